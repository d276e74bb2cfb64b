"""A worker process's per-sample cost beyond __getitem__ (issue 24): bench_pydataset.py's
dataset loaded through stoker.Loader with the given executor and worker count; after the first
epoch, the CPU time of the training process and of each worker process (/proc/PID/stat) over the
later epochs, per sample, against the CPU time __getitem__ itself took in the workers (the
pool's stats: each reply carries it). What a worker spends beyond __getitem__ (the ticket and
reply, seeding the global generators, the flatten and pwrite into the ring) is the difference;
CPU time, so the machine's load moves it less than it moves samples/s. Also each worker's
context switches per sample (/proc/PID/status): voluntary ones are waits for the next ticket
(the CPU may go idle: __getitem__ then resumes slower), involuntary ones preemptions (by the
training process, on a machine with fewer cores than runnable processes). Several tickets are in
flight per worker (as many as make ~1 ms of __getitem__; STOKER_PROC_AHEAD=1 sends one at a time,
as before issue 24's pypipe: the A/B of that change).

  PYTHONPATH=build/python /usr/bin/python3 bench/procworker_cost.py hdf5 --workers 2 --epochs 6
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_pydataset  # noqa: E402


def cpu_s(pid):
    """utime + stime of a process, all its threads, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def switches(pid):
    """(voluntary, involuntary) context switches of a process's main thread so far."""
    with open(f"/proc/{pid}/status") as f:
        got = dict(line.split(":", 1) for line in f if "ctxt_switches" in line)
    return int(got["voluntary_ctxt_switches"]), int(got["nonvoluntary_ctxt_switches"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", choices=["hdf5", "purepy"])
    ap.add_argument("--data", default="/tmp/pyds")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--executor", default="process")
    a = ap.parse_args()
    import stoker
    ns = bench_pydataset.dataset_namespace()
    ds = ns["HDF5Dataset"](os.path.join(a.data, "data.h5")) if a.scenario == "hdf5" else \
        ns["PurePythonDataset"]()
    loader = stoker.Loader(ds, batch_size=64, shuffle=True, num_workers=a.workers,
                           executor=a.executor)
    times, n = [], 0
    for e in range(a.epochs):
        if e == 1:
            pids = [os.getpid()] + loader.worker_pids()
            c0 = {p: cpu_s(p) for p in pids}
            w0 = {p: switches(p) for p in pids[1:]}
            s0 = loader._pool.stats() if loader._pool is not None else None
        t, n = time.perf_counter(), 0
        for batch in loader:
            n += len(batch[-1])
        times.append(time.perf_counter() - t)
    c1 = {p: cpu_s(p) for p in c0}
    w1 = {p: switches(p) for p in w0}
    total = (a.epochs - 1) * n
    train = (c1[os.getpid()] - c0[os.getpid()]) / total * 1e6
    workers = sum(c1[p] - c0[p] for p in c0 if p != os.getpid()) / total * 1e6
    print(f"{a.scenario}: {loader.info()['executor']} x{a.workers}, later epochs "
          f"{total / sum(times[1:]):.0f} samples/s (load {os.getloadavg()[0]:.2f})")
    if s0 is not None:
        s1 = loader._pool.stats()
        k = s1["samples"] - s0["samples"]
        getitem = (s1["cpu_ns"] - s0["cpu_ns"]) / k / 1e3
        print(f"  per sample, CPU: workers {workers:.1f} us, of it __getitem__ {getitem:.1f} us, "
              f"beyond it {workers - getitem:.1f} us; training process {train:.1f} us")
        vol = sum(w1[p][0] - w0[p][0] for p in w0) / k
        inv = sum(w1[p][1] - w0[p][1] for p in w0) / k
        print(f"  per sample, a worker's context switches: {vol:.2f} voluntary (waits for a "
              f"ticket), {inv:.2f} involuntary (preemptions); tickets a thread takes at a time "
              f"{s1.get('ahead', 1)} (STOKER_PROC_AHEAD fixes it)")
    else:
        print(f"  per sample, CPU: training process {train:.1f} us (threads: no worker process)")
    loader.close()


if __name__ == "__main__":
    main()

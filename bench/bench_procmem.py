#!/usr/bin/env python3
"""Where the memory of a Python dataset's worker processes goes (issue 24): the DataLoader and
stoker.Loader(executor="process") on the same dataset, one after the other, each in a process of
its own. Each run reads --batches batches (shuffle=True), then holds still while this parent reads
/proc/PID/smaps_rollup of every process of its tree: per process RSS (what the issue's goal "peak
RSS (all processes)" sums: a page shared by several processes counts in each), PSS (a shared page
divided among its sharers: the sum is the memory the tree really holds), USS (its private pages)
and its anonymous memory, each process named by its role (the training process; the DataLoader's
workers; stoker's fork server and its workers). The peak of the sums is sampled every 20 ms, up to the hold and up to the
child's exit (bench_pydataset.py --startup samples to the exit).

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_procmem.py --data /tmp/pyds \
        [--scenarios pil,tensor224] [--workers 2] [--batches 12] [--batch 32] \
        [--baseline /path/to/another/build/python] [--repeat 3] [--timeline]

--baseline: stoker from another build as well (a third run, "base", between the two).
--repeat: each run that many times, side by side (DataLoader, base, stoker, then again); the
summary gives each figure's median, and its ratio to the DataLoader's median.

For stoker, a watcher polls the fork server every millisecond (its children and its command
line, cheap to read, unlike smaps_rollup): "overlap" is how long the fat fork server (a fork of
the training process, before its exec) was seen alive beside all of its workers, the moment
when the tree counts the training process's pages once more than the DataLoader's does, which
the 20 ms sampler of the sums mostly misses.

The datasets are bench_pydataset.py's (pil reads --data/jpeg, from bench/gen_images.py).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_pydataset as bp  # noqa: E402

CHILD = bp.DATASETS + r'''
import sys
import stoker


def main():
    name, kind, workers, batches, batch, data = sys.argv[1:7]
    workers, batches, batch = int(workers), int(batches), int(batch)
    dataset = make(name, data)
    if kind == "dl":
        loader = DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=workers,
                            persistent_workers=True)
    else:
        loader = stoker.Loader(dataset, batch_size=batch, shuffle=True, num_workers=workers,
                               executor="process")
    print("MARK constructed", flush=True)
    held = []
    for k, b in enumerate(loader):
        held = [b]  # the training loop holds the batch it works on
        if k == 0:
            print("MARK first batch", flush=True)
        if k + 1 >= batches:
            break
    print("MARK last batch", flush=True)
    print("HOLD", flush=True)
    sys.stdin.readline()
    del held, b
    if kind != "dl":
        loader.close()
    else:
        del loader
    print("MARK closed", flush=True)


if __name__ == "__main__":
    main()
'''

FIELDS = ("Rss", "Pss", "Private_Clean", "Private_Dirty", "Anonymous")


def rollup(pid):
    """{field: bytes} from /proc/PID/smaps_rollup (empty when the process is gone)."""
    out = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key = line.split(":")[0]
                if key in FIELDS:
                    out[key] = int(line.split()[1]) * 1024
    except OSError:
        return {}
    return out


def ring_bytes(pid, name="stoker-ring"):
    """Bytes allocated to stoker's ring (its memfd, "stoker-ring") as process `pid` holds it
    open: shared memory that counts in a process's RSS only for the pages that process touched
    through its mapping (the workers pwrite into it without mapping it), so the RSS and PSS sums
    miss the rest; 0 when there is none. Each memfd counts once, however many of the process's
    descriptors name it (the C loader and the process pool each hold one)."""
    seen = {}
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            path = f"/proc/{pid}/fd/{fd}"
            try:
                if name in os.readlink(path):
                    st = os.stat(path)
                    seen[(st.st_dev, st.st_ino)] = st.st_blocks * 512
            except OSError:
                continue
    except OSError:
        return 0
    return sum(seen.values())


def cmdline(pid):
    """The process's command line, shortened: what tells the fat fork server (a fork of the
    training process) from the lean one it exec()s."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            parts = f.read().split(b"\0")
    except OSError:
        return ""
    return " ".join(os.path.basename(x.decode(errors="replace")) for x in parts[:3] if x)


def print_timeline(name, label, root, kind, timeline, step_mb=8):
    """The sums over time, one row when the RSS or PSS sum moved by step_mb or more since the
    last row, or something happened (a mark of the child, a new process, an exec)."""
    print(f"\ntimeline: {name} {label} (t s: RSS sum / PSS sum MB; per process role pid RSS/PSS)")
    last = None
    parents = {}
    for t, procs, events in timeline:
        for p, parent, _ in procs:
            parents[p] = parent
        rss = sum(m.get("Rss", 0) for _, _, m in procs)
        pss = sum(m.get("Pss", 0) for _, _, m in procs)
        if not events and last and abs(rss - last[0]) < step_mb << 20 and \
                abs(pss - last[1]) < step_mb << 20:
            continue
        last = (rss, pss)
        role = roles(root, kind, parents)
        per = ", ".join(f"{role[p].split()[-1]} {p} {mb(m.get('Rss', 0))}/{mb(m.get('Pss', 0))}"
                        for p, _, m in procs)
        print(f"  {t:6.2f} {mb(rss):>4}/{mb(pss):>4}  {per}" +
              (f"  <- {'; '.join(events)}" if events else ""))


def children_of(pid):
    """pid's children (/proc/PID/task/PID/children), empty when it is gone."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return []


def watch_overlap(root, workers, stop, out):
    """out["overlap"]: seconds from the first poll that saw the fork server, not yet exec()ed
    into the lean one, with `workers` children, to the first poll that saw it lean (0.0 when it
    was never seen fat beside all of them; None when it never went lean). Polled every ms."""
    seen_all = None
    while not stop.is_set():
        for fs in children_of(root):
            lean = "_pyworker_server.py" in cmdline(fs)
            if not lean and seen_all is None and len(children_of(fs)) >= workers:
                seen_all = time.monotonic()
            if lean:
                out["overlap"] = 0.0 if seen_all is None else time.monotonic() - seen_all
                return
        time.sleep(0.001)


def parent_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def roles(root, kind, parents):
    """{pid: role} ({pid: parent pid} read while the tree ran): the training process, and below
    it the DataLoader's workers, or stoker's fork server (a child of the training process) and
    its workers (its children)."""
    out = {}
    for p, parent in parents.items():
        if p == root:
            out[p] = "training process"
        elif parent == root:
            out[p] = "DataLoader worker" if kind == "dl" else "stoker fork server"
        else:
            out[p] = "stoker worker" if kind == "stoker" else "DataLoader descendant"
    return out


def run(name, kind, workers, batches, batch, data, pythonpath=None, unguarded=False):
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    # a training script (its work under `if __name__ == "__main__"`, as spawn asks), or with
    # --unguarded the same program as `python -c` (a notebook's case: the main module cannot be
    # imported again, so stoker's fork server cannot go lean)
    script = os.path.join(tempfile.mkdtemp(prefix="procmem"), "train.py")
    with open(script, "w") as f:
        f.write(CHILD)
    prog = ["-c", CHILD] if unguarded else [script]
    proc = subprocess.Popen([sys.executable] + prog + [name, kind, str(workers),
                             str(batches), str(batch), data], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)
    os.set_blocking(proc.stdout.fileno(), False)
    stop, window = threading.Event(), {"overlap": None}
    watcher = threading.Thread(target=watch_overlap, args=(proc.pid, workers, stop, window),
                               daemon=True)
    if kind == "stoker":
        watcher.start()
    peak_rss = peak_pss = ring = spec_fd = 0
    buf = ""
    snap = at_peak = None
    timeline, marks, t0, names = [], [], time.monotonic(), {}
    while proc.poll() is None:
        now = [(p, parent_of(p), rollup(p)) for p in bp.tree(proc.pid)]
        events = []
        for p, _, _ in now:  # a process that appears, or exec()s (the fork server going lean)
            exe = cmdline(p)
            if exe and names.get(p) != exe:
                events.append(f"{'exec' if p in names else 'new'} {p} {exe[:40]}")
                names[p] = exe
        timeline.append((time.monotonic() - t0, [(p, parent, m) for p, parent, m in now if m],
                         marks + events))
        marks = []
        rss = sum(m.get("Rss", 0) for _, _, m in now)
        pss = sum(m.get("Pss", 0) for _, _, m in now)
        if pss > peak_pss:
            at_peak = now
        peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
        ring = max(ring, ring_bytes(proc.pid))
        spec_fd = max(spec_fd, sum(ring_bytes(p, "stoker-fork-server") for p, _, _ in now))
        try:
            got = proc.stdout.read() or ""
        except (OSError, TypeError):
            got = ""
        buf += got
        marks += [ln[5:] for ln in got.splitlines() if ln.startswith("MARK ")]
        if "HOLD" in buf and snap is None:
            snap = [(p, parent_of(p), rollup(p)) for p in bp.tree(proc.pid)]
            held = (peak_rss, peak_pss)
            proc.stdin.write("\n")
            proc.stdin.flush()
        time.sleep(0.02)
    stop.set()
    if watcher.is_alive():
        watcher.join()
    if snap is None:
        return None
    role = roles(proc.pid, kind, {p: parent for p, parent, _ in snap})
    peak_role = roles(proc.pid, kind, {p: parent for p, parent, _ in at_peak})
    return {"peak_rss": peak_rss, "peak_pss": peak_pss, "held_peak": held, "ring": ring,
            "specs": spec_fd, "timeline": timeline, "root": proc.pid,
            "overlap": window["overlap"],
            "at_peak": [(peak_role[p], m) for p, _, m in at_peak if m],
            "procs": [(role[p], r) for p, _, r in snap if r]}


def mb(v):
    return f"{v / 2**20:.0f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="/tmp/pyds")
    ap.add_argument("--scenarios", default="pil")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batches", type=int, default=12)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--baseline", default=None)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--unguarded", action="store_true",
                    help="run the training program as python -c (the notebook case)")
    ap.add_argument("--timeline", action="store_true",
                    help="print each run's RSS/PSS sums over time with its phases (first repeat)")
    a = ap.parse_args()
    with open("/proc/loadavg") as f:
        print(f"load {f.read().split()[0]}, {os.cpu_count()} cores, {a.workers} workers")
    print("| scenario | loader | process | RSS MB | PSS MB | USS MB | anon MB |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    totals, timelines = {}, []
    for k in range(a.repeat):
        for name in a.scenarios.split(","):
            runs = [("dl", "dl", None)] + \
                ([("base", "stoker", a.baseline)] if a.baseline else []) + \
                [("stoker", "stoker", None)]
            for label, kind, path in runs:
                r = run(name, kind, a.workers, a.batches, a.batch, a.data, path, a.unguarded)
                if r is None:
                    print(f"| {name} | {label} | run {k + 1} failed | | | | |")
                    continue
                with open("/proc/loadavg") as f:
                    load = float(f.read().split()[0])
                if a.timeline and k == 0:
                    timelines.append((name, label, r["root"], kind, r["timeline"]))
                s = {f: sum(m.get(f, 0) for _, m in r["procs"]) for f in FIELDS}
                if k == 0:
                    print_processes(name, label, r, s)
                totals.setdefault((name, label), []).append(
                    (s["Rss"], s["Pss"]) + r["held_peak"] +
                    (r["peak_rss"], r["peak_pss"], r["specs"], r["overlap"], load))
    print_summary(totals, a.repeat)
    for t in timelines:
        print_timeline(*t)
    with open("/proc/loadavg") as f:
        print(f"load at the end {f.read().split()[0]}")


def print_processes(name, label, r, s):
    """The first repeat's processes at the hold, the processes at the peak, the memfds."""
    for role, m in sorted(r["procs"], key=lambda x: x[0]):
        uss = m.get("Private_Clean", 0) + m.get("Private_Dirty", 0)
        print(f"| {name} | {label} | {role} | {mb(m.get('Rss', 0))} | "
              f"{mb(m.get('Pss', 0))} | {mb(uss)} | {mb(m.get('Anonymous', 0))} |")
    peak = ", ".join(f"{role} {mb(m.get('Rss', 0))}/{mb(m.get('Pss', 0))}"
                     for role, m in sorted(r["at_peak"], key=lambda x: x[0]))
    print(f"| {name} | {label} | at the peak of the PSS sum (RSS/PSS): {peak} | | | | |")
    if r["specs"]:
        print(f"| {name} | {label} | fork server's memfds (largest seen) | - | - | - | "
              f"{mb(r['specs'])} (shmem) |")
    if r["ring"]:
        print(f"| {name} | {label} | ring (memfd, largest seen) | - | - | - | "
              f"{mb(r['ring'])} (shmem) |")
    uss = s["Private_Clean"] + s["Private_Dirty"]
    print(f"| {name} | {label} | **all ({len(r['procs'])} processes)** | {mb(s['Rss'])} | "
          f"{mb(s['Pss'])} | {mb(uss)} | {mb(s['Anonymous'])} |")


def print_summary(totals, repeat):
    """Medians over the repeats (MB; ratio to the DataLoader's median), the fork server's
    memfds, its overlap with all its workers, and the load after each run."""
    print(f"\nMedians of {repeat} (MB; x: ratio to the DataLoader's median)\n")
    print("| scenario | loader | RSS sum at hold | PSS sum at hold | peak RSS sum to the exit | "
          "peak PSS sum to the exit | fork server's memfds, largest | fat fork server seen "
          "beside all its workers (ms, each run) | load after each run |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (name, label), rows in totals.items():
        dl = totals.get((name, "dl"))
        cells = []
        for c in (0, 1, 4, 5):
            med = statistics.median(r[c] for r in rows)
            ratio = ""
            if dl and label != "dl":
                ratio = f" ({med / statistics.median(r[c] for r in dl):.2f}x)"
            cells.append(f"{mb(med)}{ratio}")
        stoker = label != "dl"
        specs = f"{max(r[6] for r in rows) / 2**20:.2f}" if stoker else "-"
        over = ", ".join("-" if r[7] is None else f"{r[7] * 1e3:.0f}" for r in rows) \
            if stoker else "-"
        loads = ", ".join(f"{r[8]:.1f}" for r in rows)
        print(f"| {name} | {label} | " + " | ".join(cells) + f" | {specs} | {over} | {loads} |")


if __name__ == "__main__":
    main()

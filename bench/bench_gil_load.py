"""executor="auto" under an artificial load (issue 24, pyrobust): which executor and how many
workers stoker.Loader picks for pure-Python work and for sleep work, on the idle machine and
with N busy `yes > /dev/null` processes that this script starts and kills, side by side for one
or two builds of the package (--old: another build's python/ directory, e.g. main's before the
CPU-time GIL meter), each choice made in a fresh interpreter, with one epoch's samples/s.

    python3 bench/bench_gil_load.py [--old DIR] [--busy 4] [--repeat 3]

Prints one line per (load, build, dataset, repeat): uptime's 1-minute load, the choice, its
reason and the epoch's samples/s; then a summary of how often each choice was made."""
import argparse
import collections
import json
import os
import subprocess
import sys
import time

CHILD = r"""
import json, sys, time, torch, stoker
class PurePython(torch.utils.data.Dataset):
    def __len__(self): return 128
    def __getitem__(self, i):
        s = 0
        for k in range(20000): s += k * k % 7
        return torch.tensor([float(s)]), i
class Sleep(torch.utils.data.Dataset):
    def __len__(self): return 128
    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.zeros(16), i
ds = {"pure-python": PurePython, "sleep-2ms": Sleep}[sys.argv[1]]()
loader = stoker.Loader(ds, batch_size=8, seed=1)
info = loader.info()
t0 = time.perf_counter()
n = sum(len(b[1]) for b in loader)
dt = time.perf_counter() - t0
print(json.dumps({"executor": info["executor"], "workers": info["n_threads"],
                  "reason": info["executor_reason"], "rate": n / dt}))
loader.close()
"""


def load1():
    return os.getloadavg()[0]


def run(pkg, name):
    env = dict(os.environ, PYTHONPATH=pkg)
    r = subprocess.run([sys.executable, "-c", CHILD, name], env=env, capture_output=True,
                       text=True, timeout=300)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--new", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                  "python"))
    ap.add_argument("--old", default=None)
    ap.add_argument("--busy", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    builds = [("new", os.path.abspath(a.new))] + ([("old", os.path.abspath(a.old))]
                                                   if a.old else [])
    summary = collections.Counter()
    for busy in (0, a.busy):
        hogs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(busy)]
        try:
            if busy:
                time.sleep(5)  # let the load average see them
            for rep in range(a.repeat):
                for name in ("pure-python", "sleep-2ms"):
                    for label, pkg in builds:
                        got = run(pkg, name)
                        line = (f"busy={busy} load1={load1():.1f} {label:3s} {name:11s} "
                                f"#{rep}: ")
                        if "error" in got:
                            print(line + f"error {got['error']}", flush=True)
                            continue
                        summary[(busy, label, name, got["executor"])] += 1
                        print(line + f"{got['executor']} x{got['workers']}, "
                              f"{got['rate']:.0f} samples/s; {got['reason']}", flush=True)
        finally:
            for h in hogs:
                h.kill()
                h.wait()
    print("summary (busy, build, dataset, executor): times chosen")
    for k in sorted(summary):
        print(f"  {k}: {summary[k]}")


if __name__ == "__main__":
    main()

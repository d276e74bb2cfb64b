#!/usr/bin/env python3
"""What a fork of the training process costs the training process afterwards (issue 24, time to
first batch): the copy-on-write faults it takes on every page it writes while the fork lives.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_forktax.py [--data /tmp/pyds] [--repeat 5]

1. In a process with torch and stoker imported, the same Python work (reading every module's
   dict, which writes reference counts all over the heap) before a fork, while the fork lives,
   and after it exited: wall time, minor faults, microseconds per fault.
2. stoker.Loader over bench_pydataset.py's `sleep` dataset at num_workers=1, to its first batch,
   with executor="thread" (no fork server: threads were asked for) and "auto" (the fork server
   is forked before the probe, then threads are chosen), alternately, each in a fresh process:
   the difference is what the fork server costs a loader that ends up on threads.
"""
import argparse
import os
import resource
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

WORK = r'''
import os, resource, signal, sys, time
import numpy as np, torch
import stoker

def work():
    s = 0
    for m in list(sys.modules.values()):
        for k, v in list(getattr(m, "__dict__", {}).items()):
            s += len(k)
    return s

def timed():
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = time.perf_counter()
    work()
    t1 = time.perf_counter()
    return (t1 - t) * 1e3, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0

work()
before = timed()
t = time.perf_counter()
pid = os.fork()
if pid == 0:
    time.sleep(60)
    os._exit(0)
fork_ms = (time.perf_counter() - t) * 1e3
during = timed()
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
after = timed()
print(fork_ms, *before, *during, *after)
'''

LOADER = r'''
import os, sys, time, resource
ns = {"__file__": sys.argv[1], "__name__": "bench"}
exec(compile(open(sys.argv[1]).read(), sys.argv[1], "exec"), ns)
exec(ns["DATASETS"], ns)
import stoker
ds = ns["make"]("sleep", sys.argv[2])
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
t0 = time.perf_counter()
loader = stoker.Loader(ds, batch_size=32, shuffle=True, num_workers=1, executor=sys.argv[3])
next(iter(loader))
print((time.perf_counter() - t0) * 1e3, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0,
      loader.executor)
os._exit(0)
'''


def load():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/pyds")
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    print(f"cores {len(os.sched_getaffinity(0))}, load {load()}")
    rows = []
    for _ in range(a.repeat):
        out = subprocess.run([sys.executable, "-c", WORK], capture_output=True, text=True,
                             check=True).stdout.split()
        rows.append([float(x) for x in out])
    med = [statistics.median(r[i] for r in rows) for i in range(7)]
    fork_ms, b_ms, b_f, d_ms, d_f, a_ms, a_f = med
    print(f"1. fork of a torch process: {fork_ms:.1f} ms (median of {a.repeat}); the same Python "
          f"work: {b_ms:.1f} ms, {b_f:.0f} faults before the fork; {d_ms:.1f} ms, {d_f:.0f} "
          f"faults while the fork lives ({(d_ms - b_ms) * 1e3 / max(d_f, 1):.0f} us per "
          f"fault); {a_ms:.1f} ms, {a_f:.0f} faults after it exited "
          f"({(a_ms - b_ms) * 1e3 / max(a_f, 1):.0f} us per fault) (load {load()})", flush=True)
    bench = os.path.join(HERE, "bench_pydataset.py")
    got = {"thread": [], "auto": []}
    for _ in range(a.repeat):
        for ex in ("thread", "auto"):
            out = subprocess.run([sys.executable, "-c", LOADER, bench, a.data, ex],
                                 capture_output=True, text=True, check=True).stdout.split()
            got[ex].append((float(out[0]), int(out[1]), out[2]))
    for ex, runs in got.items():
        ms = [r[0] for r in runs]
        print(f"2. sleep, num_workers=1, executor={ex!r} (ran on {runs[0][2]}): first batch "
              f"{statistics.median(ms):.0f} ms ({min(ms):.0f}-{max(ms):.0f}), "
              f"{statistics.median(r[1] for r in runs):.0f} faults (load {load()})", flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""What the torch.profiler range around each next() costs (issue 24, python/stoker/_torchprof.py).

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_torchprof.py [--batches 20000] [--rounds 5]

A stoker.Loader over tiny records (one int64 per record, batch 1, one thread), so that a
next() is almost nothing but the Python path around the C call, timed three ways in
interleaved rounds in one process: the iterator as shipped (no profiler recording: the range is
checked for and skipped), the same iterator with the check removed (its __next__ replaced by
the bare _next), and under torch.profiler.profile() (the range recorded on every next()).
Prints the median microseconds per next() of each, and the differences; and, since on a
loaded machine those differ by less than their noise, the check alone: timeit of
_torchprof.range_for with no profiler recording.
"""
import argparse
import json
import os
import statistics
import tempfile
import time
import timeit

import torch

import stoker
from stoker import _torchprof
from stoker import loader as _loader


def per_next_us(loader, n):
    it = iter(loader)
    t0 = time.perf_counter()
    k = 0
    for _ in it:
        k += 1
        if k == n:
            break
    return 1e6 * (time.perf_counter() - t0) / k


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    d = tempfile.mkdtemp()
    path = os.path.join(d, "tiny.stk")
    stoker.write_shard(path, {"v": "int64"}, ({"v": i} for i in range(a.batches + 1)))
    loader = stoker.Loader(path, 1, num_workers=1, output="numpy", prefetch=64)
    cls = _loader._LoaderIter
    shipped, bare = cls.__next__, cls._next
    times = {"shipped (no profiler)": [], "without the check": [], "under torch.profiler": []}
    load0 = os.getloadavg()
    for _ in range(a.rounds):
        times["shipped (no profiler)"].append(per_next_us(loader, a.batches))
        cls.__next__ = bare
        try:
            times["without the check"].append(per_next_us(loader, a.batches))
        finally:
            cls.__next__ = shipped
        with torch.profiler.profile():
            times["under torch.profiler"].append(per_next_us(loader, a.batches))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(json.dumps({"batches": a.batches, "rounds": a.rounds, "load": [load0, os.getloadavg()],
                      "median_us_per_next": {k: round(v, 3) for k, v in med.items()},
                      "all_us": {k: [round(x, 3) for x in v] for k, v in times.items()}}))
    it = iter(loader)
    calls = 1000000
    check = min(timeit.repeat(lambda: _torchprof.range_for(it), number=calls, repeat=5))
    print(json.dumps({"range_for_no_profiler_us": round(1e6 * check / calls, 4),
                      "load": os.getloadavg()}))
    print(f"{'the check alone':>24}: {1e6 * check / calls:7.3f} us per call (timeit, best of 5)")
    base = med["without the check"]
    for k, v in med.items():
        print(f"{k:>24}: {v:7.3f} us per next()  ({v - base:+.3f} us against no check)")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""The cost of the index-list and weighted orders (issue 16 samplers) against the built-in
shuffle, side by side in one process: a shard of N tiny records (one int64), so the loader's
per-sample work is almost only the order and the copy; each mode runs one epoch per round,
rounds interleaved, and the median samples/s per mode is printed with its ratio to the
built-in shuffle.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_sampler.py [--n 1000000] [--rounds 5]
"""
import argparse
import os
import statistics
import tempfile
import time

import numpy as np
import torch
from torch.utils.data import SubsetRandomSampler, WeightedRandomSampler

import stoker


class ListSampler(torch.utils.data.Sampler):
    """A custom sampler: a fixed random permutation (iterated each epoch)."""

    def __init__(self, perm):
        self.perm = perm

    def __iter__(self):
        return iter(self.perm)

    def __len__(self):
        return len(self.perm)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "d.stk")
    stoker.write_shard(path, {"label": "int64"}, ({"label": i} for i in range(a.n)))
    g = lambda: torch.Generator().manual_seed(1)  # noqa: E731
    perm = np.random.default_rng(0).permutation(a.n)
    modes = {
        "shuffle=True (built-in)": dict(shuffle=True, seed=1),
        "SubsetRandomSampler(all)": dict(sampler=SubsetRandomSampler(range(a.n), generator=g())),
        "custom sampler (a list)": dict(sampler=ListSampler(perm)),
        "Weighted, replacement": dict(sampler=WeightedRandomSampler(np.ones(a.n), a.n,
                                                                    generator=g())),
        "Weighted, no replacement": dict(sampler=WeightedRandomSampler(
            np.ones(a.n), a.n, replacement=False, generator=g())),
    }
    loaders = {k: stoker.Loader(path, a.batch, num_workers=a.threads, rank=0, world_size=1,
                                output="numpy", **kw) for k, kw in modes.items()}
    rates = {k: [] for k in modes}
    for _ in range(a.rounds):
        for k, ld in loaders.items():
            t0 = time.perf_counter()
            n = sum(len(b["index"]) for b in ld)
            rates[k].append(n / (time.perf_counter() - t0))
    base = statistics.median(rates["shuffle=True (built-in)"])
    print(f"| order ({a.n} records, batch {a.batch}, {a.threads} threads) | samples/s (median "
          f"of {a.rounds}) | vs built-in |")
    print("| --- | --- | --- |")
    for k in modes:
        m = statistics.median(rates[k])
        print(f"| {k} | {m:,.0f} | {m / base:.2f} |")
    for ld in loaders.values():
        ld.close()


if __name__ == "__main__":
    main()

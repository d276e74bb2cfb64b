#!/usr/bin/env python3
"""Samples with object leaves (what the ring's fixed fields do not hold: leaves past its 15
fields, strings, lists): stoker.Loader at its default and at fixed executors against the
DataLoader at num_workers=0, in one process, best of --epochs epochs each.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_object_leaves.py [--epochs 3]

ManyLeaves: a dict of 20 tensors of 8 floats (5 past the ring's fields). Texts: a token tensor,
a label, the text, 4 word ids in a list and an id string. Prints, per dataset and stoker
setting, the executor chosen and samples/s as a ratio of the DataLoader's.
"""
import argparse
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def rate(loader, epochs):
    best = 0.0
    for _ in range(epochs):
        t0, n = time.perf_counter(), 0
        for b in loader:
            n += len(b["label"] if "label" in b else b["k0"])
        best = max(best, n / (time.perf_counter() - t0))
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    import torch
    import stoker
    from tiny_datasets import ManyLeaves, Texts
    for ds in (ManyLeaves(), Texts()):
        base = rate(torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True), args.epochs)
        for kw in ({}, {"num_workers": 2}, {"num_workers": 0},
                   {"num_workers": 2, "executor": "thread"}):
            loader = stoker.Loader(ds, batch_size=64, shuffle=True, **kw)
            r = rate(loader, args.epochs)
            print(f"{type(ds).__name__} {kw or 'default'}: {loader.info()['executor']} x"
                  f"{loader.info()['n_threads']}, {r / base:.2f}x the DataLoader "
                  f"(num_workers=0: {base:.0f} samples/s)", flush=True)
            loader.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Loader(map=fn) scaling (issue 13): samples/s of stoker.Loader(map=fn) on 1 and 2 worker
threads against torch's DataLoader running the same fn in 0, 1 and 2 worker processes, for a
numpy-heavy fn (sorts and reductions, which release the GIL) and a pure-Python fn (holds it).

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=build/python /usr/bin/python3 bench/bench_map.py \
        [--samples 768] [--runs 3]

Records are float32 [128, 128] arrays plus an int64 label, in a generated .stk shard; the
DataLoader's dataset holds the same arrays in memory (its reading costs nothing). Each figure is
the median of --runs interleaved runs over one epoch (time to first batch included on both
sides: worker start-up is part of what a user pays per epoch unless workers persist).
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "build", "python"))
import stoker  # noqa: E402

SHAPE = (128, 128)


def record(i):
    return (np.random.default_rng(i).standard_normal(SHAPE).astype(np.float32), i % 10)


def numpy_fn(s):
    x = s["x"]
    y = np.sort(x, axis=1)
    y = np.sort(y + x[::-1], axis=0)
    return {"x": y[:, :64].copy(), "label": s["label"], "m": float(np.abs(y).mean())}


def python_fn(s):
    acc = 0
    for k in range(6000):
        acc = (acc * 31 + k) % 1000003
    return {"x": s["x"][:64, :64].copy(), "label": s["label"], "m": float(acc)}


FNS = {"numpy-heavy": numpy_fn, "pure-python": python_fn}


class TorchData:
    def __init__(self, arrays, labels, fn):
        self.arrays, self.labels, self.fn = arrays, labels, fn

    def __len__(self):
        return len(self.arrays)

    def __getitem__(self, i):
        return self.fn({"x": self.arrays[i], "label": self.labels[i]})


def run_stoker(path, fn, threads, batch):
    t0 = time.perf_counter()
    n = 0
    with stoker.Loader(path, batch_size=batch, num_workers=threads, map=fn,
                       output="numpy") as L:
        for b in L:
            n += len(b["label"])
    return n / (time.perf_counter() - t0)


def run_torch(data, workers, batch):
    import torch.utils.data as tud
    t0 = time.perf_counter()
    n = 0
    for b in tud.DataLoader(data, batch_size=batch, num_workers=workers):
        n += len(b["label"])
    return n / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=768)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    import torch
    torch.set_num_threads(1)
    recs = [record(i) for i in range(a.samples)]
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "map.stk")
    stoker.write_shard(path, {"x": ("float32", SHAPE), "label": "int64"},
                       ({"x": x, "label": y} for x, y in recs))
    arrays = [x for x, _ in recs]
    labels = [y for _, y in recs]
    print(f"{a.samples} samples, batch {a.batch}, median of {a.runs} runs (samples/s)")
    print("| fn | stoker 1 thread | stoker 2 threads | DataLoader 0 workers | "
          "DataLoader 1 worker | DataLoader 2 workers | stoker 2 thr / best DataLoader |")
    print("|---|---|---|---|---|---|---|")
    for name, fn in FNS.items():
        res = {k: [] for k in ("s1", "s2", "t0", "t1", "t2")}
        data = TorchData(arrays, labels, fn)
        for _ in range(a.runs):
            res["s1"].append(run_stoker(path, fn, 1, a.batch))
            res["s2"].append(run_stoker(path, fn, 2, a.batch))
            for w in (0, 1, 2):
                res[f"t{w}"].append(run_torch(data, w, a.batch))
        med = {k: statistics.median(v) for k, v in res.items()}
        best = max(med["t0"], med["t1"], med["t2"])
        print(f"| {name} | {med['s1']:.0f} | {med['s2']:.0f} | {med['t0']:.0f} | "
              f"{med['t1']:.0f} | {med['t2']:.0f} | {med['s2'] / best:.2f} |")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""How close is stoker.profile's waiting share to the truth?

The classic scenario: a Dataset whose __getitem__ sleeps `--sample-ms` (1 ms), a DataLoader
with num_workers=0 and batch_size 1, and a step that sleeps `--steps-ms` (1, 5, 20, 50 ms).
Two truths, both taken independently of the profile's clock around next(): "wall" is the share
of the loop's wall time not spent inside the step (timers in the step; everything else is the
loop waiting for its data), "getitem" counts only the time inside __getitem__ (a lower bound:
it leaves out the DataLoader's own sampling and collation).

    /usr/bin/python3 bench/bench_doctor.py [--runs 5] [--steps 200]
"""
import argparse
import statistics
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

import stoker


class SleepDataset(Dataset):
    def __init__(self, ms):
        self.ms, self.busy = ms, 0.0

    def __len__(self):
        return 100000

    def __getitem__(self, i):
        t0 = time.perf_counter()
        time.sleep(self.ms / 1e3)
        x = torch.tensor([i])
        self.busy += time.perf_counter() - t0
        return x


def one(sample_ms, step_ms, steps):
    ds = SleepDataset(sample_ms)
    busy = [0.0]

    def step(batch):
        t0 = time.perf_counter()
        time.sleep(step_ms / 1e3)
        busy[0] += time.perf_counter() - t0
    dl = DataLoader(ds, batch_size=1, num_workers=0)
    t0 = time.perf_counter()
    p = stoker.profile(dl, step=step, steps=steps, warmup=0, advise=False)
    wall = time.perf_counter() - t0
    return p.wait_share, 1 - busy[0] / wall, ds.busy / (ds.busy + busy[0]), p.data_bound


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--sample-ms", type=float, default=1.0)
    ap.add_argument("--step-ms", default="1,5,20,50")
    a = ap.parse_args()
    print("| step ms | truth: wall (median) | truth: getitem only | profile (median) | "
          "error vs wall (worst run) | data-bound (runs) |")
    print("|---|---|---|---|---|---|")
    for step_ms in [float(x) for x in a.step_ms.split(",")]:
        steps = a.steps if step_ms < 10 else max(20, a.steps // 10)
        res = [one(a.sample_ms, step_ms, steps) for _ in range(a.runs)]
        worst = max(abs(m - t) / t for m, t, _, _ in res)
        bound = sum(1 for *_, b in res if b)
        med = [statistics.median(r[k] for r in res) for k in range(3)]
        print(f"| {step_ms:g} | {med[1]:.4f} | {med[2]:.4f} | {med[0]:.4f} | "
              f"{100 * worst:.1f}% | {bound}/{len(res)} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()

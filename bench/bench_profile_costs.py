#!/usr/bin/env python3
"""Does stoker.profile name the real cost of a DataLoader? The issue-24 case, side by side
with the truth (issue 24).

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_profile_costs.py \
        [--sample-ms 1] [--shape 3,224,224] [--batch 32] [--workers 2] [--step-ms 5] [--steps 20]

A Dataset whose __getitem__ sleeps --sample-ms and returns a float32 tensor of --shape (600 KB
for 3x224x224) and its index, a DataLoader(batch_size=--batch, num_workers=--workers) and a
training step that sleeps --step-ms. First the truth, measured directly: the DataLoader's
samples/s at num_workers 0, 1, 2, 4, 8 with that __getitem__, and with the same samples but
no sleep (what moving the batches alone allows). Then stoker.profile on the loop, which
re-measures from outside and says what limits it. Prints JSON lines and the profile's report.
"""
import argparse
import json
import os
import time
import warnings

import torch
from torch.utils.data import DataLoader, Dataset

import stoker


class Sleep(Dataset):
    def __init__(self, ms, shape, n=100000):
        self.ms, self.n, self.x = ms, n, torch.zeros(shape)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.ms:
            time.sleep(self.ms / 1e3)
        return self.x.clone(), i


def rate(dl, batches=20):
    it = iter(dl)
    next(it)
    n, t = 0, time.perf_counter()
    for _ in range(batches):
        n += next(it)[0].shape[0]
    r = n / (time.perf_counter() - t)
    getattr(it, "_shutdown_workers", lambda: None)()
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sample-ms", type=float, default=1.0)
    ap.add_argument("--shape", default="3,224,224")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--step-ms", type=float, default=5.0)
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args()
    shape = tuple(int(s) for s in a.shape.split(","))
    warnings.simplefilter("ignore", UserWarning)  # worker counts past the cores, on purpose
    print(json.dumps({"load": os.getloadavg(), "cpus": len(os.sched_getaffinity(0)),
                      "sample_bytes": 4 * int(torch.tensor(shape).prod())}))
    for w in (0, 1, 2, 4, 8):
        truth = {"num_workers": w}
        for name, ms in (("with_getitem", a.sample_ms), ("getitem_free", 0.0)):
            truth[name] = round(rate(DataLoader(Sleep(ms, shape), batch_size=a.batch,
                                                num_workers=w)), 1)
        print(json.dumps(truth))
    dl = DataLoader(Sleep(a.sample_ms, shape), batch_size=a.batch, num_workers=a.workers)
    p = stoker.profile(dl, step=lambda b: time.sleep(a.step_ms / 1e3), steps=a.steps)
    print(json.dumps({"costs": p.costs, "sweep": p.sweep, "load": os.getloadavg()}))
    print(p)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Loaders made one after another in one script (per fold, per epoch, per evaluation): the time
each later loader takes to its first batches, the DataLoader beside stoker.Loader.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_later_loaders.py [--loaders 4] \
        [--images 48] [--workers 2] [--out /tmp/later_loaders]

A torchvision ImageFolder of small JPEGs (made once under --out) whose transform stoker cannot
run in C (RandomPerspective), so stoker.Loader runs its __getitem__ on worker processes. Each
loader reads one epoch and is closed before the next is made, as a script that builds a loader
per fold does. Printed per loader: the constructor's time, the epoch's time and the longest
wait for one batch. The issue this measures: a later loader's worker processes came from
stoker's lean fork server, which imported torch and torchvision again to unpickle the dataset
(about a second before the second batch, each time); now a single-threaded process forks a
fresh fork server for it (the dataset and its modules inherited).
"""
import argparse
import os
import sys
import time


def make_images(root, n):
    from PIL import Image
    import numpy as np
    rng = np.random.default_rng(0)
    for c in ("ants", "bees"):
        os.makedirs(os.path.join(root, c), exist_ok=True)
    for i in range(n):
        path = os.path.join(root, ("ants", "bees")[i % 2], f"{i:04d}.jpg")
        if not os.path.exists(path):
            Image.fromarray(rng.integers(0, 256, (96, 128, 3), dtype=np.uint8)).save(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loaders", type=int, default=4)
    ap.add_argument("--images", type=int, default=48)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default="/tmp/later_loaders")
    args = ap.parse_args()
    make_images(args.out, args.images)
    import torch
    import torchvision.transforms as T
    from torchvision import datasets
    import stoker
    ds = datasets.ImageFolder(args.out, transform=T.Compose([
        T.Resize((32, 32)), T.ToTensor(), T.RandomPerspective()]))
    for name, make in (("stoker", stoker.Loader), ("DataLoader", torch.utils.data.DataLoader)):
        for k in range(args.loaders):
            t0 = time.perf_counter()
            loader = make(ds, batch_size=8, num_workers=args.workers)
            t1 = time.perf_counter()
            gaps, last = [], time.perf_counter()
            for _ in loader:
                now = time.perf_counter()
                gaps.append(now - last)
                last = now
            how = ""
            if name == "stoker":
                how = f" ({loader.info()['executor']}, {loader.info().get('start_method')})"
                loader.close()
            print(f"{name} loader {k}{how}: constructor {t1 - t0:.3f} s, epoch "
                  f"{time.perf_counter() - t1:.3f} s, longest wait {max(gaps):.3f} s",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

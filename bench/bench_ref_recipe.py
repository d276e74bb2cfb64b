#!/usr/bin/env python3
"""torchvision's reference ImageNet training recipe (RandomResizedCrop(224) +
RandomHorizontalFlip + TrivialAugmentWide + ToTensor + Normalize + RandomErasing(0.25)):
stoker's Loader against PyTorch's DataLoader at its best num_workers, on the same JPEG folder.

    /usr/bin/python3 bench/bench_ref_recipe.py IMAGE_DIR [--workers 0,1,2,3] [--threads 2]

The same torchvision Compose object is given to both (stoker converts it). Samples/s over the
second epoch (worker start-up excluded, which favours the DataLoader); stoker's over its second
epoch too.
"""
import argparse
import os
import time

import torch
import torchvision.transforms as TV
from torchvision.datasets import ImageFolder

import stoker

ap = argparse.ArgumentParser()
ap.add_argument("folder")
ap.add_argument("--workers", default="0,1,2,3")
ap.add_argument("--threads", type=int, default=os.cpu_count())
ap.add_argument("--batch-size", type=int, default=64)
args = ap.parse_args()

recipe = TV.Compose([TV.RandomResizedCrop(224), TV.RandomHorizontalFlip(), TV.TrivialAugmentWide(),
                     TV.ToTensor(), TV.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
                     TV.RandomErasing(0.25)])


def timed_epoch(loader):
    n, t0 = 0, time.perf_counter()
    for batch in loader:
        n += len(batch[1] if isinstance(batch, (list, tuple)) else batch["label"])
    return n / (time.perf_counter() - t0)


results = {}
for w in [int(x) for x in args.workers.split(",")]:
    dl = torch.utils.data.DataLoader(ImageFolder(args.folder, transform=recipe),
                                     batch_size=args.batch_size, shuffle=True, num_workers=w,
                                     persistent_workers=w > 0, prefetch_factor=4 if w else 2)
    timed_epoch(dl)
    results[w] = timed_epoch(dl)
    print(f"DataLoader num_workers={w}: {results[w]:.1f} samples/s", flush=True)
best_w = max(results, key=results.get)
loader = stoker.Loader(args.folder, args.batch_size, rank=0, world_size=1, shuffle=True, seed=0,
                       num_workers=args.threads, transforms=recipe)
timed_epoch(loader)
s = timed_epoch(loader)
print(f"stoker threads={args.threads}: {s:.1f} samples/s")
print(f"ratio stoker / DataLoader (num_workers={best_w}): {s / results[best_w]:.2f}x")

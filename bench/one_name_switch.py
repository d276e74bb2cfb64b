#!/usr/bin/env python3
"""The one-name switch, measured: a DataLoader training-data loop and the same loop with only
the class name changed (torch.utils.data.DataLoader -> stoker.Loader), side by side.

    /usr/bin/python3 bench/gen_images.py /tmp/imgs --classes 5 --per-class 100
    PYTHONPATH=build/python /usr/bin/python3 bench/one_name_switch.py /tmp/imgs \
        [--transform train|val] [--workers 2] [--batch 32] [--epochs 2] [--split]

--split loads the training half of `random_split(dataset, [0.8, 0.2])` instead of the whole
ImageFolder (the tutorials' train/val split: a torch.utils.data.Subset of it).

Each side runs in its own process (one after the other, never at the same time) and prints
one JSON line: samples/s over the epochs after the first batch, and the time from creating
the loader to the first batch. The loop body only touches each batch (no model), so the
numbers are the loaders' own.
"""
import argparse
import json
import subprocess
import sys
import time

LOOP = r"""
import json, sys, time
import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms as T
import stoker

root, which, kind, workers, batch, epochs, split = sys.argv[1:8]
workers, batch, epochs = int(workers), int(batch), int(epochs)
norm = T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
if kind == "train":
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), norm])
else:
    tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), norm])
dataset = datasets.ImageFolder(root, transform=tf)
if split == "1":
    dataset = torch.utils.data.random_split(dataset, [0.8, 0.2],
                                            generator=torch.Generator().manual_seed(0))[0]
Loader = DataLoader if which == "DataLoader" else stoker.Loader   # the one name that changes

t0 = time.perf_counter()
loader = Loader(dataset, batch_size=batch, shuffle=True, num_workers=workers,
                pin_memory=False, persistent_workers=True, prefetch_factor=2, drop_last=False)
first = None
samples = 0
for epoch in range(epochs):
    for images, labels in loader:
        if first is None:
            first = time.perf_counter() - t0
            t1 = time.perf_counter()
            continue
        samples += labels.numel()
        assert images.shape[1:] == (3, 224, 224) and labels.dtype == torch.int64
dt = time.perf_counter() - t1
executor = loader.info()["executor"] if hasattr(loader, "info") else "-"
print(json.dumps({"loader": which, "executor": executor, "transform": kind,
                  "split": split == "1", "workers": workers, "batch": batch,
                  "images": len(dataset), "epochs": epochs,
                  "samples_per_s": round(samples / dt, 1),
                  "first_batch_s": round(first, 3)}))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root")
    ap.add_argument("--transform", choices=("train", "val"), default="train")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1, help="runs per side (alternating)")
    ap.add_argument("--split", action="store_true",
                    help="the training half of random_split(dataset, [0.8, 0.2]) (a Subset)")
    a = ap.parse_args()
    for _ in range(a.repeat):
        for which in ("DataLoader", "stoker.Loader"):
            r = subprocess.run([sys.executable, "-c", LOOP, a.root, which, a.transform,
                                str(a.workers), str(a.batch), str(a.epochs),
                                "1" if a.split else "0"],
                               capture_output=True, text=True, timeout=1800)
            if r.returncode != 0:
                sys.exit(f"{which} failed:\n{r.stderr[-3000:]}")
            print(r.stdout.strip().splitlines()[-1], flush=True)
            time.sleep(1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A dataset the training loop changes before each epoch (`dataset.set_epoch(e)`): what it costs
the DataLoader, which starts its workers anew each epoch, and stoker, whose worker processes
take the changed dataset in place of their copy (docs/reliability.md, issue 24).

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_changed_dataset.py [--data /tmp/cifar] \
        [--workers 2] [--epochs 4]

The dataset is PyTorch's CIFAR10 tutorial's (random pixels under --data, made by
bench_tutorials.py) as a class of the user's own with a set_epoch(); training transform, batch
128 shuffled. Three runs, each in a process of its own: the DataLoader calling set_epoch each
epoch, stoker.Loader without calling it, and stoker.Loader calling it. Each prints, per epoch,
the time from iter() to the first batch and the epoch's samples/s.
"""
import argparse
import os
import subprocess
import sys
import tempfile

CHILD = r'''
import sys, time
import torch, torchvision
import torchvision.transforms as T
import torchvision.datasets.cifar as cifar
from torch.utils.data import DataLoader
import stoker
cifar.check_integrity = lambda *a, **k: True   # random pixels, not the download's checksums


class MyCIFAR10(torchvision.datasets.CIFAR10):
    epoch = 0

    def set_epoch(self, e):
        self.epoch = e

    def __getitem__(self, i):
        return super().__getitem__(i)


if __name__ == "__main__":
    root, which, change, workers, epochs = sys.argv[1:6]
    norm = T.Normalize((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010))
    ds = MyCIFAR10(root, train=True, download=False, transform=T.Compose(
        [T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.ToTensor(), norm]))
    Loader = DataLoader if which == "DataLoader" else stoker.Loader
    loader = Loader(ds, batch_size=128, shuffle=True, num_workers=int(workers))
    for e in range(int(epochs)):
        if change == "1":
            ds.set_epoch(e)
        t = time.perf_counter()
        it = iter(loader)
        n = len(next(it)[1])
        first = time.perf_counter() - t
        n += sum(len(y) for _, y in it)
        print(f"| {which} | {'yes' if change == '1' else 'no'} | {e} | {first * 1000:.0f} ms | "
              f"{n / (time.perf_counter() - t):.0f}/s |", flush=True)
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/cifar")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=4)
    args = ap.parse_args()
    print("| loader | set_epoch each epoch | epoch | first batch | samples/s |")
    print("| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "train.py")  # a script file, as a user's (the __main__ guard)
        with open(script, "w") as f:
            f.write(CHILD)
        for which, change in (("DataLoader", "1"), ("stoker", "0"), ("stoker", "1")):
            out = subprocess.run([sys.executable, script, args.data, which, change,
                                  str(args.workers), str(args.epochs)], text=True, timeout=1800)
            if out.returncode != 0:
                sys.exit(f"{which} failed")


if __name__ == "__main__":
    main()

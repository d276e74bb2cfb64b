"""What re-reading the batches read ahead across an epoch's end costs on worker threads
(issue 24, DataLoader parity: a dataset changed between epochs is seen by the whole next
epoch). Later epochs of a 1 ms-sleep dataset on 4 worker threads: stoker with the dataset
unchanged (nothing re-read), stoker with `dataset.epoch = e` assigned before each epoch (the
batches read ahead are read again), and the DataLoader with 4 persistent worker processes
(changed or not: it never reads across an epoch's end), alternating in one run; best of 3.

    PYTHONPATH=build/python python3 bench/bench_epoch_reread.py 256 2048
"""
import os
import sys
import time

import torch

import stoker


class Sleepy(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n
        self.epoch = 0
        self.data = torch.randn(n, 3, 32, 32)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(0.001)  # stands for I/O
        return self.data[i], i


def later_epochs(make, n, change, epochs=4):
    ds = Sleepy(n)
    loader = make(ds)
    for _ in loader:  # epoch 0 apart (start-up)
        pass
    t = time.perf_counter()
    for e in range(1, epochs + 1):
        if change:
            ds.epoch = e  # what dataset.set_epoch(e) does
        for _ in loader:
            pass
    dt = (time.perf_counter() - t) / epochs
    if hasattr(loader, "close"):
        loader.close()
    return dt


def main():
    kw = dict(batch_size=32, num_workers=4, shuffle=True)

    def stoker_loader(ds):
        return stoker.Loader(ds, executor="thread", **kw)

    def dataloader(ds):
        return torch.utils.data.DataLoader(ds, persistent_workers=True, **kw)
    runs = {"stoker, dataset unchanged": (stoker_loader, False),
            "stoker, dataset.epoch assigned": (stoker_loader, True),
            "DataLoader": (dataloader, True)}
    for n in [int(a) for a in sys.argv[1:]] or [256, 2048]:
        best = {}
        for _ in range(3):
            for name, (make, change) in runs.items():
                dt = later_epochs(make, n, change)
                best[name] = min(best.get(name, dt), dt)
        base = best["stoker, dataset unchanged"]
        print(f"{n} samples ({-(-n // 32)} batches of 32), load {os.getloadavg()[0]:.2f}: " +
              ", ".join(f"{k} {v * 1000:.0f} ms/epoch ({v / base:.2f}x)" for k, v in best.items()))


if __name__ == "__main__":
    main()

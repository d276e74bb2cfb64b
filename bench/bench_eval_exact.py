#!/usr/bin/env python3
"""Evaluation through the one-name switch (issue 24): how close and how fast.

    /usr/bin/python3 bench/gen_images.py /tmp/ev_small --classes 4 --per-class 50 --profile small
    PYTHONPATH=build/python /usr/bin/python3 bench/bench_eval_exact.py /tmp/ev_small [ROOT ...] \
        [--workers 0,1,2,4] [--threads 2] [--batch 32] [--epochs 2] [--rounds 2]

A torchvision ImageFolder with the evaluation transform Resize(256) + CenterCrop(224) +
ToTensor + Normalize, read by torch.utils.data.DataLoader (PIL + torchvision, the reference)
and by stoker.Loader over the same dataset object, in its default mode (exact: the transform
draws no random numbers) and with exact=False (the fast decode training uses).

Accuracy, per ROOT: each image's output against the DataLoader's, as |difference| in grey
levels of the image ((x * std + mean) * 255): the maximum, the mean and the share of values
that differ by one level or more.

Speed, on the first ROOT: samples/s of each loader over the epochs, the first epoch (which
includes starting the workers and the first reads) and the later ones reported apart; the
DataLoader at each --workers count (its best is the comparison), stoker at --threads. Each
configuration runs --rounds times, interleaved, in this process one after the other; the best
round is kept. Prints one JSON line per figure, then a table.
"""
import argparse
import json
import os
import time

import torch
from torch.utils.data import DataLoader
from torchvision import transforms as T
from torchvision.datasets import ImageFolder

import stoker

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
VAL = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(MEAN, STD)])


def outputs(loader):
    return torch.cat([x.clone() for x, _ in loader])


def accuracy(root, threads):
    ds = ImageFolder(root, transform=VAL)
    want = outputs(DataLoader(ds, batch_size=16))
    std = torch.tensor(STD)[:, None, None]
    rows = []
    for mode, exact in (("exact (default)", None), ("fast (exact=False)", False)):
        got = outputs(stoker.Loader(ds, batch_size=16, num_workers=threads, exact=exact))
        d = ((got - want).abs() * std * 255).flatten()
        rows.append({"root": root, "mode": mode, "images": len(ds),
                     "max_levels": round(float(d.max()), 2),
                     "mean_levels": round(float(d.mean()), 4),
                     "share_off": round(float((d > 0.5).float().mean()), 4)})
    return rows


def run_epochs(make, epochs):
    """(first epoch samples/s, later epochs samples/s) of the loader `make()` builds."""
    t0 = time.perf_counter()
    loader = make()
    rates = []
    for _ in range(epochs):
        n, t = 0, time.perf_counter()
        for x, y in loader:
            n += y.numel()
        rates.append(n / (time.perf_counter() - t))
    first = rates[0] * 1.0
    later = sum(rates[1:]) / len(rates[1:]) if len(rates) > 1 else None
    del loader
    return first, later, time.perf_counter() - t0


def speed(root, workers, threads, batch, epochs, rounds):
    ds = ImageFolder(root, transform=VAL)
    configs = [(f"DataLoader num_workers={w}",
                lambda w=w: DataLoader(ds, batch_size=batch, num_workers=w,
                                       persistent_workers=w > 0)) for w in workers]
    configs += [(f"stoker exact (default) threads={threads}",
                 lambda: stoker.Loader(ds, batch_size=batch, num_workers=threads)),
                (f"stoker fast (exact=False) threads={threads}",
                 lambda: stoker.Loader(ds, batch_size=batch, num_workers=threads,
                                       exact=False))]
    best = {}
    for _ in range(rounds):
        for name, make in configs:
            first, later, _ = run_epochs(make, epochs)
            b = best.get(name)
            if b is None or (later or first) > (b[1] or b[0]):
                best[name] = (first, later)
    return [{"loader": k, "images": len(ds), "batch": batch, "epochs": epochs,
             "first_epoch_samples_per_s": round(v[0], 1),
             "later_epochs_samples_per_s": None if v[1] is None else round(v[1], 1)}
            for k, v in best.items()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("roots", nargs="+", help="ImageFolder trees (bench/gen_images.py)")
    ap.add_argument("--workers", default="0,1,2,4", help="DataLoader num_workers to try")
    ap.add_argument("--threads", type=int, default=2, help="stoker's threads")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    print(json.dumps({"load": os.getloadavg(), "cpus": len(os.sched_getaffinity(0))}))
    acc = [r for root in a.roots for r in accuracy(root, a.threads)]
    for r in acc:
        print(json.dumps(r))
    sp = speed(a.roots[0], [int(w) for w in a.workers.split(",")], a.threads, a.batch,
               a.epochs, a.rounds)
    for r in sp:
        print(json.dumps(r))
    print(json.dumps({"load": os.getloadavg()}))
    print("\n| tree | mode | max levels | mean levels | values off |")
    print("| --- | --- | --- | --- | --- |")
    for r in acc:
        print(f"| {os.path.basename(r['root'].rstrip('/'))} | {r['mode']} | {r['max_levels']:g} "
              f"| {r['mean_levels']:.3f} | {100 * r['share_off']:.1f}% |")
    print("\n| loader | first epoch samples/s | later epochs samples/s |")
    print("| --- | --- | --- |")
    for r in sp:
        later = r["later_epochs_samples_per_s"]
        print(f"| {r['loader']} | {r['first_epoch_samples_per_s']:.0f} | "
              f"{'-' if later is None else f'{later:.0f}'} |")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The tutorials' first scripts (CIFAR10, MNIST, a TensorDataset) with the DataLoader and with
stoker.Loader, side by side.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_tutorials.py [--data /tmp/cifar] \
        [--workers 0,1,2,4,8] [--epochs 3] [--stoker-workers 2|0|auto] \
        [--dataset cifar10|cifar100|mnist|fashionmnist|tensors20|tensors784] [--own] \
        [--fetch sample|batch]

The scripts every tutorial teaches first. CIFAR10 (PyTorch's tutorial, pytorch-cifar):
torchvision.datasets.CIFAR10 with the training transform (RandomCrop(32, padding=4),
RandomHorizontalFlip, ToTensor, Normalize) at batch 128 shuffled, and the test set with the
evaluation transform (ToTensor, Normalize) at batch 100. MNIST (pytorch/examples mnist/main.py):
ToTensor, Normalize((0.1307,), (0.3081,)) for both, batch 64 shuffled and 1000. Each epoch runs
the training loader, then the test loader. tensors20 / tensors784: a TensorDataset of random
float32 features and int64 labels in memory (tabular: 200,000 + 50,000 rows of 20; flat MNIST:
60,000 + 10,000 of 784), batch 64 shuffled and 1000. Both loaders are built before the first
epoch, as the tutorials build them. The loop body only touches each batch (no model), so the
figures are the loaders' own. Data: the datasets' own files (CIFAR's pickles, MNIST's idx) with
random pixels, made once under --data (no download here); torchvision's checksum check of
CIFAR's download is turned off.

With --own the dataset is a subclass whose __getitem__ calls the base class's, as a user's
own class is written: stoker cannot read it natively, and its __getitem__ runs in Python (for
these datasets, in stoker's worker processes).

With --fetch batch (tensors20 / tensors784) both loaders get batch_size=None and a
BatchSampler as the sampler (RandomSampler for training, SequentialSampler for the test set):
__getitem__ gets each batch's list of indices, the usual way to make tiny samples fast.

Each configuration runs in its own process, one after the other, and prints one JSON line: the
time to build both loaders, the first epoch's training and test samples/s, the later epochs',
and the script's whole time. The DataLoader runs at each --workers count (its best is reported
beside stoker); stoker.Loader at --stoker-workers, with only the class name changed.
"""
import argparse
import json
import os
import pickle
import subprocess
import sys

import numpy as np

LOOP = r"""
import json, sys, time
t_start = time.perf_counter()
import torch, torchvision
import torchvision.transforms as T
import torchvision.datasets.cifar as cifar
from torch.utils.data import DataLoader
import stoker
cifar.check_integrity = lambda *a, **k: True   # random pixels, not the download's checksums

root, which, workers, epochs, kind, own, fetch = sys.argv[1:8]
workers, epochs, own = (None if workers == "auto" else int(workers)), int(epochs), own == "1"
kw = {} if workers is None else {"num_workers": workers}  # None: stoker picks
Loader = DataLoader if which == "DataLoader" else stoker.Loader   # the one name that changes


def mine(base):
    # with --own: the class as a user writes their own, __getitem__ overridden (so it runs in
    # Python), under the base's name (MNIST finds its folder by it) in this module (it pickles)
    if not own:
        return base
    cls = type(base.__name__, (base,), {"__getitem__": lambda self, i: base.__getitem__(self, i),
                                        "__module__": "__main__"})
    globals()[base.__name__] = cls
    return cls


if kind.startswith("tensors"):  # in-memory tensors: tabular (20 features) or flat MNIST (784)
    features = int(kind[len("tensors"):])
    g = torch.Generator().manual_seed(0)
    n_train, n_test = (200000, 50000) if features <= 100 else (60000, 10000)
    def Dataset(root, train, download, transform):
        n = n_train if train else n_test
        return mine(torch.utils.data.TensorDataset)(torch.randn(n, features, generator=g),
                                                    torch.randint(0, 10, (n,), generator=g))
    train_tf = test_tf = None
    batches, shape = (64, 1000), (features,)
elif kind.startswith("cifar"):
    Dataset = mine(torchvision.datasets.CIFAR10 if kind == "cifar10" else
                   torchvision.datasets.CIFAR100)
    norm = T.Normalize((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010))
    train_tf = T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.ToTensor(),
                          norm])
    test_tf = T.Compose([T.ToTensor(), norm])
    batches, shape = (128, 100), (3, 32, 32)
else:
    Dataset = mine(torchvision.datasets.MNIST if kind == "mnist" else
                   torchvision.datasets.FashionMNIST)
    train_tf = test_tf = T.Compose([T.ToTensor(), T.Normalize((0.1307,), (0.3081,))])
    batches, shape = (64, 1000), (1, 28, 28)
trainset = Dataset(root, train=True, download=False, transform=train_tf)
testset = Dataset(root, train=False, download=False, transform=test_tf)
t0 = time.perf_counter()
if fetch == "batch":  # __getitem__ takes each batch's list of indices (batch_size=None)
    S = torch.utils.data
    trainloader = Loader(trainset, batch_size=None, sampler=S.BatchSampler(
        S.RandomSampler(trainset), batches[0], drop_last=False), **kw)
    testloader = Loader(testset, batch_size=None, sampler=S.BatchSampler(
        S.SequentialSampler(testset), batches[1], drop_last=False), **kw)
else:
    trainloader = Loader(trainset, batch_size=batches[0], shuffle=True, **kw)
    testloader = Loader(testset, batch_size=batches[1], shuffle=False, **kw)
built = time.perf_counter() - t0
rates = []
for epoch in range(epochs):
    a = time.perf_counter(); n = 0
    for x, y in trainloader:
        n += len(y)
    b = time.perf_counter(); m = 0
    for x, y in testloader:
        m += len(y)
    c = time.perf_counter()
    assert n == len(trainset) and m == len(testset) and x.shape[1:] == shape
    rates.append((n / (b - a), m / (c - b)))
later = rates[1:] or rates
executor = trainloader.info()["executor"] if hasattr(trainloader, "info") else "-"
if workers is None:  # what stoker picked
    workers = f"auto: {trainloader.num_workers}"
print(json.dumps({"loader": which, "executor": executor, "workers": workers,
                  "dataset": kind + (" (own class)" if own else "") +
                  (" (batch fetch)" if fetch == "batch" else ""),
                  "epochs": epochs, "build_s": round(built, 3),
                  "train_first": round(rates[0][0]), "test_first": round(rates[0][1]),
                  "train_later": round(sum(r[0] for r in later) / len(later)),
                  "test_later": round(sum(r[1] for r in later) / len(later)),
                  "script_s": round(time.perf_counter() - t_start, 2)}))
"""


def make_data(root, kind):
    """The dataset's own files with random pixels: CIFAR's pickles (50,000 training and 10,000
    test images) or MNIST's idx files (60,000 and 10,000)."""
    rng = np.random.default_rng(0)
    if kind.startswith("tensors"):
        return  # made in memory by the loop
    if kind in ("mnist", "fashionmnist"):
        raw = os.path.join(root, "MNIST" if kind == "mnist" else "FashionMNIST", "raw")
        if os.path.exists(os.path.join(raw, "t10k-labels-idx1-ubyte")):
            return
        os.makedirs(raw, exist_ok=True)
        for part, n in (("train", 60000), ("t10k", 10000)):
            for what, arr, magic in (
                    ("images-idx3", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), 2051),
                    ("labels-idx1", rng.integers(0, 10, n).astype(np.uint8), 2049)):
                with open(os.path.join(raw, f"{part}-{what}-ubyte"), "wb") as f:
                    f.write(magic.to_bytes(4, "big"))
                    for d in arr.shape:
                        f.write(int(d).to_bytes(4, "big"))
                    f.write(arr.tobytes())
        return
    if kind == "cifar10":
        folder, files, key, n_classes = "cifar-10-batches-py", \
            [(f"data_batch_{i}", 10000) for i in range(1, 6)] + [("test_batch", 10000)], \
            "labels", 10
        meta, meta_key = "batches.meta", "label_names"
    else:
        folder, files, key, n_classes = "cifar-100-python", [("train", 50000), ("test", 10000)], \
            "fine_labels", 100
        meta, meta_key = "meta", "fine_label_names"
    d = os.path.join(root, folder)
    if os.path.exists(os.path.join(d, meta)):
        return
    os.makedirs(d, exist_ok=True)
    for name, n in files:
        with open(os.path.join(d, name), "wb") as f:
            pickle.dump({"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                         key: rng.integers(0, n_classes, n).tolist()}, f)
    with open(os.path.join(d, meta), "wb") as f:
        pickle.dump({meta_key: [f"class{i}" for i in range(n_classes)]}, f)


def run(args, which, workers):
    out = subprocess.run([sys.executable, "-c", LOOP, args.data, which, str(workers),
                          str(args.epochs), args.dataset, "1" if args.own else "0",
                          args.fetch],
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        sys.exit(f"{which} at {workers} workers failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/cifar", help="where the random-pixel dataset files "
                    "are made (once)")
    ap.add_argument("--dataset", default="cifar10",
                    choices=("cifar10", "cifar100", "mnist", "fashionmnist", "tensors20",
                             "tensors784"))
    ap.add_argument("--workers", default="0,1,2,4,8", help="the DataLoader's num_workers")
    ap.add_argument("--stoker-workers", default="2",
                    help="stoker.Loader's num_workers (auto: not given, stoker picks)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--own", action="store_true", help="the dataset as a class of the user's "
                    "own: a subclass whose __getitem__ calls the base's (so it runs in Python, "
                    "not read natively)")
    ap.add_argument("--fetch", choices=("sample", "batch"), default="sample",
                    help="batch: the tiny-sample idiom, batch_size=None with a BatchSampler as "
                    "the sampler, so __getitem__ gets each batch's list of indices (tensors* "
                    "datasets)")
    args = ap.parse_args()
    if args.fetch == "batch" and not args.dataset.startswith("tensors"):
        ap.error("--fetch batch: the tensors20 / tensors784 datasets (whose __getitem__ takes "
                 "a list of indices)")
    make_data(args.data, args.dataset)
    rows = [run(args, "DataLoader", int(w)) for w in args.workers.split(",")]
    mine = run(args, "stoker", args.stoker_workers)
    rows.append(mine)
    for r in rows:
        print(json.dumps(r), flush=True)
    best = max(rows[:-1], key=lambda r: r["train_later"])
    print(f"\nDataLoader's best: num_workers={best['workers']}")
    print("| loader | num_workers | build s | train first epoch /s | test first | "
          "train later epochs /s | test later | script s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in (best, mine):
        print(f"| {r['loader']} ({r['executor']}) | {r['workers']} | {r['build_s']} | "
              f"{r['train_first']} | {r['test_first']} | {r['train_later']} | "
              f"{r['test_later']} | {r['script_s']} |")
    print(f"| stoker / DataLoader's best | | | {mine['train_first'] / best['train_first']:.2f}x | "
          f"{mine['test_first'] / best['test_first']:.2f}x | "
          f"{mine['train_later'] / best['train_later']:.2f}x | "
          f"{mine['test_later'] / best['test_later']:.2f}x | "
          f"{mine['script_s'] / best['script_s']:.2f}x |")


if __name__ == "__main__":
    main()

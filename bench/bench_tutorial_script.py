#!/usr/bin/env python3
"""PyTorch's CIFAR10 tutorial as a user's own script file: a class of the user's own, two loaders
built before training, the `if __name__ == "__main__":` guard, run with the DataLoader and with
stoker.Loader (only the name changed), alternated.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_tutorial_script.py [--data /tmp/cifar] \
        [--workers 2] [--epochs 3] [--repeat 2]

What a script adds to bench_tutorials.py's `python -c` runs: stoker's fork server can go lean
(exec a small interpreter once the first loader's workers are forked), so a later loader's
dataset is pickled to it and unpickled there (importing torch). The dataset class is defined at
module level, as a worker process that imports the script needs it. Each run prints one JSON
line: the time to build the two loaders (the second one's apart), each epoch's training and
test samples/s, and the whole script's time; then the medians side by side. Data: CIFAR's
pickles with random pixels under --data (bench_tutorials.py makes them).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

SCRIPT = r'''
import json, sys, time
t_start = time.perf_counter()
import torch, torchvision
import torchvision.transforms as T
import torchvision.datasets.cifar as cifar
from torch.utils.data import DataLoader
import stoker
cifar.check_integrity = lambda *a, **k: True   # random pixels, not the download's checksums


class MyCIFAR10(torchvision.datasets.CIFAR10):  # a class of the user's own
    def __getitem__(self, i):
        return super().__getitem__(i)


def main():
    root, which, workers, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    Loader = DataLoader if which == "DataLoader" else stoker.Loader   # the one name that changes
    norm = T.Normalize((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010))
    train_tf = T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.ToTensor(),
                          norm])
    trainset = MyCIFAR10(root, train=True, download=False, transform=train_tf)
    testset = MyCIFAR10(root, train=False, download=False, transform=T.Compose([T.ToTensor(), norm]))
    t0 = time.perf_counter()
    trainloader = Loader(trainset, batch_size=128, shuffle=True, num_workers=workers)
    t1 = time.perf_counter()
    testloader = Loader(testset, batch_size=100, shuffle=False, num_workers=workers)
    t2 = time.perf_counter()
    rates = []
    for epoch in range(epochs):
        a = time.perf_counter(); n = 0
        for x, y in trainloader:
            n += len(y)
        b = time.perf_counter(); m = 0
        for x, y in testloader:
            m += len(y)
        c = time.perf_counter()
        assert n == len(trainset) and m == len(testset)
        rates.append((round(n / (b - a)), round(m / (c - b))))
    print(json.dumps({"loader": which, "build_train_s": round(t1 - t0, 3),
                      "build_test_s": round(t2 - t1, 3), "epochs": rates,
                      "script_s": round(time.perf_counter() - t_start, 2)}))


if __name__ == "__main__":
    main()
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/cifar")
    ap.add_argument("--workers", type=int, default=2, help="num_workers of both loaders")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_tutorials
    bench_tutorials.make_data(args.data, "cifar10")
    rows = {"DataLoader": [], "stoker": []}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "cifar_tutorial.py")
        with open(path, "w") as f:
            f.write(SCRIPT)
        for _ in range(args.repeat):
            for which in rows:
                out = subprocess.run([sys.executable, path, args.data, which, str(args.workers),
                                      str(args.epochs)], capture_output=True, text=True,
                                     timeout=1800)
                if out.returncode != 0:
                    sys.exit(f"{which} failed:\n{out.stderr[-3000:]}")
                r = json.loads(out.stdout.strip().splitlines()[-1])
                print(json.dumps(r), flush=True)
                rows[which].append(r)
    med = {w: {"build": statistics.median(r["build_train_s"] + r["build_test_s"] for r in rs),
               "first": statistics.median(r["epochs"][0][0] for r in rs),
               "later": statistics.median(e[0] for r in rs for e in r["epochs"][1:] or r["epochs"]),
               "test": statistics.median(e[1] for r in rs for e in r["epochs"]),
               "script": statistics.median(r["script_s"] for r in rs)} for w, rs in rows.items()}
    print("\n| loader | build both s | train epoch 1 /s | train later /s | test /s | script s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for w, m in med.items():
        print(f"| {w} | {m['build']:.3f} | {m['first']:.0f} | {m['later']:.0f} | {m['test']:.0f} | "
              f"{m['script']:.2f} |")
    s, d = med["stoker"], med["DataLoader"]
    print(f"| stoker / DataLoader | | {s['first'] / d['first']:.2f}x | "
          f"{s['later'] / d['later']:.2f}x | {s['test'] / d['test']:.2f}x | "
          f"{s['script'] / d['script']:.2f}x |")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Python front-end figures (issue: Python and PyTorch front end), side by side in one run:

1. Overhead: stoker.Loader from Python against the C `stoker bench` on the same data, recipe,
   threads and batch size (goal: Python >= 95% of C). Raw records (where per-batch overhead
   shows most) and imagenet-train.
2. Time to first batch: stoker.Loader against torch DataLoader(num_workers=2) over ImageFolder
   with the same torchvision recipe (goal: 10x faster), each in a fresh process.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_python.py [--images 2000]

Uses bench/out/jpeg_small_<N> (made by bench/bench_images.py or here) and bench/out/raw_4000.stk
(bench/bench_raw.py) when present.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STOKER = os.path.join(ROOT, "build", "stoker")
ENV = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "build", "python"))


def c_bench(data, recipe, threads, batch, epochs):
    cmd = [STOKER, "bench", data, "--recipe", recipe, "--threads", str(threads), "--batch-size",
           str(batch), "--epochs", str(epochs), "--shuffle", "--json"]
    d = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return d["samples_per_s"], "stoker " + " ".join(cmd[2:])


PY_LOOP = r"""
import sys, time, json
import torch   # imported before the clock starts, as in a training script
import stoker
data, recipe, threads, batch, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
t0 = time.perf_counter()
loader = stoker.Loader(data, batch_size=batch, shuffle=True, num_workers=threads,
                       transforms=None if recipe == "raw" else recipe)
n = 0
for e in range(epochs):
    for b in loader:
        n += len(b["index"])
dt = time.perf_counter() - t0
print(json.dumps({"samples_per_s": n / dt}))
"""


def py_bench(data, recipe, threads, batch, epochs):
    out = subprocess.run([sys.executable, "-c", PY_LOOP, data, recipe, str(threads), str(batch),
                          str(epochs)], check=True, capture_output=True, text=True, env=ENV)
    return json.loads(out.stdout)["samples_per_s"]


FIRST_STOKER = r"""
import sys, time
t0 = time.perf_counter()
import torch   # a training script has imported torch already (stoker converts lazily)
import stoker
t1 = time.perf_counter()
loader = stoker.Loader(sys.argv[1], batch_size=64, shuffle=True, num_workers=2,
                       transforms="imagenet-train")
b = next(iter(loader))
t2 = time.perf_counter()
print(f"{(t2 - t1) * 1e3:.1f} {(t1 - t0) * 1e3:.1f}")
"""

FIRST_TORCH = r"""
import sys, time
t0 = time.perf_counter()
import torch
from torchvision import datasets, transforms as T
t1 = time.perf_counter()
tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
dl = torch.utils.data.DataLoader(datasets.ImageFolder(sys.argv[1], transform=tf), batch_size=64,
                                 shuffle=True, num_workers=2, persistent_workers=True,
                                 prefetch_factor=4)
x, y = next(iter(dl))
t2 = time.perf_counter()
print(f"{(t2 - t1) * 1e3:.1f} {(t1 - t0) * 1e3:.1f}")
"""


def first_batch(code, arg, repeat=3):
    runs = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", code, arg], check=True, capture_output=True,
                             text=True, env=ENV).stdout.split()
        runs.append((float(out[0]), float(out[1])))
    runs.sort()
    return runs[len(runs) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out"))
    a = ap.parse_args()
    tree = os.path.join(a.out, f"jpeg_small_{a.images}")
    packed = tree + ".stk"
    if not os.path.exists(packed):
        if not os.path.isdir(tree):
            subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gen_images.py"), tree,
                            "--classes", "10", "--per-class", str(a.images // 10)], check=True)
        subprocess.run([STOKER, "pack", "--quiet", tree, packed], check=True)
    rows, cmds = [], []
    raw = os.path.join(a.out, "raw_4000.stk")
    cases = [(packed, "imagenet-train", 64, 2)]
    if os.path.exists(raw):
        cases.insert(0, (raw, "raw", 64, 10))
    for data, recipe, batch, epochs in cases:
        # interleave C and Python runs, three each, and keep the medians
        cs, ps = [], []
        for _ in range(3):
            c, cmd = c_bench(data, recipe, a.threads, batch, epochs)
            cs.append(c)
            ps.append(py_bench(data, recipe, a.threads, batch, epochs))
        cs.sort()
        ps.sort()
        rows.append((recipe, os.path.basename(data), cs[1], ps[1]))
        cmds.append(cmd)
    print("| recipe | data | C `stoker bench` samples/s | Python `stoker.Loader` samples/s "
          "| Python / C |")
    print("|---|---|---|---|---|")
    for recipe, data, c, p in rows:
        print(f"| {recipe} | {data} | {c:.0f} | {p:.0f} | {p / c:.3f} |")
    s = first_batch(FIRST_STOKER, packed)
    t = first_batch(FIRST_TORCH, tree)
    print("\n| time to first batch (imagenet-train, batch 64, 2 workers) | ms | import ms |")
    print("|---|---|---|")
    print(f"| stoker.Loader (packed) | {s[0]:.1f} | {s[1]:.0f} |")
    print(f"| DataLoader(ImageFolder, num_workers=2) | {t[0]:.1f} | {t[1]:.0f} |")
    print(f"| ratio | {t[0] / s[0]:.1f}x | |")
    print("\ncommands (C side):\n    " + "\n    ".join(cmds))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Side-by-side image pipeline benchmark: PyTorch's DataLoader + torchvision, stoker, and the
decode-only ceiling, on the same JPEGs, the same recipe and the same cores, in one run.

    /usr/bin/python3 bench/bench_images.py [--images 2000] [--profile small|imagenet|grain]
        [--recipe imagenet-train|imagenet-val] [--threads 2] [--workers 0,1,2,3,4]
        [--repeat 3] [--torch-repeat 1]

1. Generates an ImageFolder tree of photo-like JPEGs (bench/gen_images.py) unless it exists,
   and packs it with `stoker pack` (files stored as they are).
2. PyTorch: torchvision.datasets.ImageFolder with the recipe's torchvision transforms
   (RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor + Normalize, or Resize(256) +
   CenterCrop(224) + ToTensor + Normalize), DataLoader(batch_size, shuffle=True, num_workers=w,
   persistent_workers=True, prefetch_factor=4) for each w; throughput is taken over the epochs
   after the first (worker start-up excluded, which favours PyTorch); the best w is kept.
3. stoker: `stoker bench PACKED --recipe R --threads T --ceiling --json`, default (crop + DCT
   scaled decode) and --exact (full-scale decode). Its time includes loader start-up. The
   ceiling is libjpeg-turbo decoding every whole image and nothing else, same files, same threads.
Prints one Markdown table of samples/s and ratios (wall clock, and per CPU second of the process:
on a shared machine the steadier of the two), and the commands.

On a shared machine single runs swing by tens of percent, so the stoker runs (default and
exact alternating, each with its own ceiling run) are repeated --repeat times and the DataLoader
sweep --torch-repeat times: the table gives medians with [min-max], and the ratio to the
ceiling as the median [min-max] of each run's own ratio (pipeline and ceiling measured back to
back in one process, so closest in time).
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STOKER = os.path.join(ROOT, "build", "stoker")
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def torch_transform(recipe):
    from torchvision import transforms as T
    if recipe == "imagenet-train":
        ops = [T.RandomResizedCrop(224), T.RandomHorizontalFlip()]
    else:
        ops = [T.Resize(256), T.CenterCrop(224)]
    return T.Compose(ops + [T.ToTensor(), T.Normalize(MEAN, STD)])


def bench_torch(tree, recipe, workers, batch, epochs):
    """Samples/s of DataLoader over epochs 2..E (epoch 1 pays the worker start)."""
    import torch
    from torchvision.datasets import ImageFolder
    torch.set_num_threads(1)
    ds = ImageFolder(tree, transform=torch_transform(recipe))
    kw = dict(batch_size=batch, shuffle=True, num_workers=workers)
    if workers > 0:
        kw.update(persistent_workers=True, prefetch_factor=4)
    dl = torch.utils.data.DataLoader(ds, **kw)
    t0 = time.perf_counter()
    first = None
    n = 0
    for e in range(epochs):
        for x, y in dl:
            if first is None:
                first = time.perf_counter() - t0
            if e > 0:
                n += x.shape[0]
        if e == 0:
            t1 = time.perf_counter()
    sps = n / (time.perf_counter() - t1)
    del dl
    return sps, first


def shown(path):
    """A path as a command to paste here should name it: relative below the working
    directory, else absolute."""
    rel = os.path.relpath(os.path.abspath(path))
    return rel if not rel.startswith("..") else os.path.abspath(path)


def stoker_bench(packed, recipe, threads, epochs, batch, exact):
    cmd = [STOKER, "bench", packed, "--recipe", recipe, "--threads", str(threads), "--epochs",
           str(epochs), "--batch-size", str(batch), "--shuffle", "--ceiling", "--json"]
    if exact:
        cmd.append("--exact")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    # printed as it can be pasted: the binary and the data by a path valid where we run, and
    # the table a person reads instead of the JSON this script parses
    return json.loads(out), shlex.join([shown(STOKER), cmd[1], shown(packed)] +
                                       [x for x in cmd[3:] if x != "--json"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--profile", default="small", choices=["small", "imagenet", "grain"])
    ap.add_argument("--recipe", default="imagenet-train",
                    choices=["imagenet-train", "imagenet-val"])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--workers", default="0,1,2,3,4", help="DataLoader num_workers to try")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--torch-epochs", type=int, default=2, help="DataLoader epochs (>= 2)")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--repeat", type=int, default=3, help="stoker runs of each mode")
    ap.add_argument("--torch-repeat", type=int, default=1, help="DataLoader sweeps")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out"))
    a = ap.parse_args()
    classes = 10
    tree = os.path.join(a.out, f"jpeg_{a.profile}_{a.images}")
    packed = tree + ".stk"
    if not os.path.isdir(tree):
        subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gen_images.py"), tree,
                        "--classes", str(classes), "--per-class", str(a.images // classes),
                        "--profile", a.profile], check=True)
    if not os.path.exists(packed):
        subprocess.run([STOKER, "pack", "--quiet", tree, packed], check=True)
    sizes = [os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(tree) for f in fs]
    print(f"dataset: {len(sizes)} JPEGs, mean {sum(sizes) / len(sizes) / 1000:.1f} KB "
          f"({a.profile}), recipe {a.recipe}, {a.threads} threads/workers max, "
          f"batch {a.batch_size}, {os.cpu_count()} CPUs\n", flush=True)

    def spread(v, fmt="%.0f", unit=""):
        """median [min-max] of a list"""
        v = sorted(v)
        if len(v) == 1:
            return fmt % v[0] + unit
        return f"{fmt % statistics.median(v)}{unit} [{fmt % v[0]}-{fmt % v[-1]}]"

    runs = {"default": [], "exact": []}
    cmds = []
    for r in range(a.repeat):
        for mode in ("default", "exact"):
            d, cmd = stoker_bench(packed, a.recipe, a.threads, a.epochs, a.batch_size,
                                  mode == "exact")
            runs[mode].append(d)
            if r == 0:
                cmds.append(cmd)
        print(f"  stoker run {r + 1}/{a.repeat}: default "
              f"{runs['default'][-1]['samples_per_s']:.0f} (ceiling "
              f"{runs['default'][-1]['ceiling']['samples_per_s']:.0f}), exact "
              f"{runs['exact'][-1]['samples_per_s']:.0f} (ceiling "
              f"{runs['exact'][-1]['ceiling']['samples_per_s']:.0f})", flush=True)
    ceilings = [d["ceiling"]["samples_per_s"] for v in runs.values() for d in v]
    torch_runs = {}
    if not a.skip_torch:
        for r in range(a.torch_repeat):
            for w in [int(x) for x in a.workers.split(",")]:
                sps, first = bench_torch(tree, a.recipe, w, a.batch_size, max(2, a.torch_epochs))
                print(f"  DataLoader num_workers={w}: {sps:.1f} samples/s "
                      f"(first batch {first * 1e3:.0f} ms)", flush=True)
                torch_runs.setdefault(w, []).append((sps, first))
    torch_best = None  # (median samples/s, workers, runs) of the best num_workers
    for w, v in torch_runs.items():
        med = statistics.median(s for s, _ in v)
        if torch_best is None or med > torch_best[0]:
            torch_best = (med, w, v)

    rows = [("decode-only ceiling (libjpeg-turbo, full decode)", ceilings, None, None, None)]
    for mode, name in (("exact", "stoker, exact (full-scale decode)"),
                       ("default", "stoker, default (crop + DCT-scaled fast decode)")):
        v = runs[mode]
        rows.append((name, [d["samples_per_s"] for d in v],
                     [d["samples_per_s"] / d["ceiling"]["samples_per_s"] for d in v],
                     [d["cpu_ratio_to_ceiling"] for d in v], [d["first_batch_ms"] for d in v]))
    if torch_best:
        rows.append((f"PyTorch DataLoader + torchvision, best num_workers={torch_best[1]}",
                     [s for s, _ in torch_best[2]], None, None,
                     [f * 1e3 for _, f in torch_best[2]]))
    print()
    print("| pipeline | samples/s | vs ceiling | vs ceiling per CPU s | vs PyTorch | first batch ms |")
    print("|---|---|---|---|---|---|")
    ceil_med = statistics.median(ceilings)
    for name, sps, ratio, cpu_ratio, first in rows:
        vs_c = spread(ratio, "%.2f", "x") if ratio else f"{statistics.median(sps) / ceil_med:.2f}x"
        vs_cpu = spread(cpu_ratio, "%.2f", "x") if cpu_ratio else "-"
        vs_t = spread([x / torch_best[0] for x in sps], "%.2f", "x") if torch_best else "-"
        fb = f"{statistics.median(first):.0f}" if first else "-"
        print(f"| {name} | {spread(sps)} | {vs_c} | {vs_cpu} | {vs_t} | {fb} |")
    print(f"\n{a.repeat} stoker runs of each mode, each with its own ceiling run; ratios to the "
          f"ceiling per run, to PyTorch against its median; median [min-max]; "
          f"load average {open('/proc/loadavg').read().split()[0]} at the end")
    # The whole run again, DataLoader sweep included (a pasteable command, as each line here).
    again = [sys.executable, shown(__file__), "--images", str(a.images), "--profile", a.profile,
             "--recipe", a.recipe, "--threads", str(a.threads), "--workers", a.workers,
             "--batch-size", str(a.batch_size), "--epochs", str(a.epochs), "--torch-epochs",
             str(a.torch_epochs), "--repeat", str(a.repeat), "--torch-repeat",
             str(a.torch_repeat), "--out", shown(a.out)] + (["--skip-torch"] if a.skip_torch
                                                           else [])
    print("commands (each can be pasted as it is):\n    " + "\n    ".join(cmds + [
        shlex.join(again)]))


if __name__ == "__main__":
    main()

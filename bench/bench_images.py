#!/usr/bin/env python3
"""Side-by-side image pipeline benchmark: PyTorch's DataLoader + torchvision, stoker, and the
decode-only ceiling, on the same JPEGs, the same recipe and the same cores, in one run.

    /usr/bin/python3 bench/bench_images.py [--images 2000] [--profile small|imagenet|grain]
        [--max-side 512 --quality 90] [--recipe imagenet-train|imagenet-val] [--threads 2]
        [--workers 0,1,2,3,4] [--repeat 3] [--torch-repeat 1]

1. Generates an ImageFolder tree of photo-like JPEGs (bench/gen_images.py) unless it exists,
   and packs it with `stoker pack` (files stored as they are).
2. PyTorch: torchvision.datasets.ImageFolder with the recipe's torchvision transforms
   (RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor + Normalize, or Resize(256) +
   CenterCrop(224) + ToTensor + Normalize), DataLoader(batch_size, shuffle=True, num_workers=w,
   persistent_workers=True, prefetch_factor=4) for each w; its first epoch (worker start-up
   included) and its later epochs are timed apart; the best w (by later epochs) is kept.
3. stoker: `stoker bench PACKED --recipe R --threads T --ceiling --json`, default (crop + DCT
   scaled decode) and --exact (full-scale decode). Its first epoch includes loader start-up and
   every image's first (strictly checked) read. The ceiling is libjpeg-turbo (TurboJPEG)
   decoding every whole image and nothing else, same files, same threads, same epochs.
Prints one Markdown table of samples/s, first epoch and later epochs apart, per worker thread
(process) too, and ratios (wall clock, and per CPU second of the process: on a shared machine the
steadier of the two), and the commands. --max-side/--quality make the data as FFCV's ImageNet
benchmark writes it (gen_images.py --max-side 512 --quality 90: FFCV's configuration).

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
    """Samples/s of DataLoader over epochs 2..E, the time to its first batch, samples/s in its
    first epoch (worker start-up included), and samples per CPU second over all epochs (this
    process and its workers)."""
    import torch
    from torchvision.datasets import ImageFolder
    torch.set_num_threads(1)
    ds = ImageFolder(tree, transform=torch_transform(recipe))
    kw = dict(batch_size=batch, shuffle=True, num_workers=workers)
    if workers > 0:
        kw.update(persistent_workers=True, prefetch_factor=4)
    dl = torch.utils.data.DataLoader(ds, **kw)
    c0 = os.times()
    t0 = time.perf_counter()
    first = None
    n0 = n = 0
    for e in range(epochs):
        for x, y in dl:
            if first is None:
                first = time.perf_counter() - t0
            if e > 0:
                n += x.shape[0]
            else:
                n0 += x.shape[0]
        if e == 0:
            t1 = time.perf_counter()
    sps = n / (time.perf_counter() - t1)
    del dl  # the workers exit and are waited for: their CPU time is in os.times() now
    c1 = os.times()
    cpu = sum(c1[:4]) - sum(c0[:4])  # this process and its worker processes, every epoch
    return sps, first, n0 / (t1 - t0), (n0 + n) / cpu if cpu > 0 else 0.0


def warm(path):
    """Read the file once, so that a run's first epoch reads it from the page cache (as the
    ceiling, which preloads the records, does): the disk is not what is measured."""
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def shown(path):
    """A path as a command to paste here should name it: relative below the working
    directory, else absolute."""
    rel = os.path.relpath(os.path.abspath(path))
    return rel if not rel.startswith("..") else os.path.abspath(path)


def stoker_bench(packed, recipe, threads, epochs, batch, exact):
    warm(packed)
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
    ap.add_argument("--max-side", type=int, default=0,
                    help="re-encode as FFCV's benchmark data (gen_images.py --max-side)")
    ap.add_argument("--quality", type=int, default=90, help="with --max-side: JPEG quality")
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
    reenc = f"_max{a.max_side}q{a.quality}" if a.max_side else ""
    tree = os.path.join(a.out, f"jpeg_{a.profile}{reenc}_{a.images}")
    packed = tree + ".stk"
    if not os.path.isdir(tree):
        gen = [sys.executable, os.path.join(ROOT, "bench", "gen_images.py"), tree, "--classes",
               str(classes), "--per-class", str(a.images // classes), "--profile", a.profile]
        if a.max_side:
            gen += ["--max-side", str(a.max_side), "--quality", str(a.quality)]
        subprocess.run(gen, check=True)
    if not os.path.exists(packed):
        subprocess.run([STOKER, "pack", "--quiet", tree, packed], check=True)
    sizes = [os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(tree) for f in fs]
    how = f", re-encoded at max side {a.max_side}, quality {a.quality}" if a.max_side else ""
    print(f"dataset: {len(sizes)} JPEGs, mean {sum(sizes) / len(sizes) / 1000:.1f} KB "
          f"({a.profile}{how}), recipe {a.recipe}, {a.threads} threads/workers max, "
          f"batch {a.batch_size}, {a.epochs} epochs, {os.cpu_count()} CPUs\n", flush=True)

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
    def part(d, key):
        """(samples/s, ratio to the ceiling's same part, per CPU second) of a run's part."""
        p, c = d.get(key), d["ceiling"].get(key)
        if not p or not c:
            return None
        return (p["samples_per_s"], p["samples_per_s"] / c["samples_per_s"],
                (p["samples"] / p["cpu_s"]) / (c["samples"] / c["cpu_s"]))

    ceil = [d["ceiling"] for v in runs.values() for d in v]
    torch_runs = {}
    if not a.skip_torch:
        for r in range(a.torch_repeat):
            for w in [int(x) for x in a.workers.split(",")]:
                sps, first, sps1, per_cpu = bench_torch(tree, a.recipe, w, a.batch_size,
                                                        max(2, a.torch_epochs))
                print(f"  DataLoader num_workers={w}: first epoch {sps1:.1f}, later epochs "
                      f"{sps:.1f} samples/s (first batch {first * 1e3:.0f} ms; {per_cpu:.0f} "
                      f"samples per CPU second)", flush=True)
                torch_runs.setdefault(w, []).append((sps, first, sps1, per_cpu))
    torch_best = None  # (median later-epoch samples/s, workers, runs) of the best num_workers
    for w, v in torch_runs.items():
        med = statistics.median(x[0] for x in v)
        if torch_best is None or med > torch_best[0]:
            torch_best = (med, w, v)

    # rows: name, threads (or worker processes), then per part (first epoch, later epochs):
    # samples/s list, ratio-to-ceiling list, per-CPU-s ratio list; first batch ms list
    rows = [("decode-only ceiling (libjpeg-turbo, full decode)", a.threads,
             [[c["first_epoch"]["samples_per_s"] for c in ceil],
              [c["later_epochs"]["samples_per_s"] for c in ceil if c.get("later_epochs")]],
             None, None, None)]
    for mode, name in (("exact", "stoker, exact (full-scale decode)"),
                       ("default", "stoker, default (crop + DCT-scaled fast decode)")):
        v = runs[mode]
        ps = [[part(d, k) for d in v] for k in ("first_epoch", "later_epochs")]
        ps = [[x for x in p if x] for p in ps]
        rows.append((name, a.threads, [[x[0] for x in p] for p in ps],
                     [[x[1] for x in p] for p in ps], [[x[2] for x in p] for p in ps],
                     [d["first_batch_ms"] for d in v]))
    if torch_best:
        rows.append((f"PyTorch DataLoader + torchvision, best num_workers={torch_best[1]}",
                     max(1, torch_best[1]), [[x[2] for x in torch_best[2]],
                                             [x[0] for x in torch_best[2]]], None, None,
                     [x[1] * 1e3 for x in torch_best[2]]))
    print()
    print("| pipeline | first epoch samples/s | per thread | vs ceiling | per CPU s "
          "| later epochs samples/s | per thread | vs ceiling | per CPU s | vs PyTorch (later) "
          "| first batch ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    ceil_med = [statistics.median(p) if p else None for p in rows[0][2]]
    for name, threads, sps, ratio, cpu_ratio, first in rows:
        cells = []
        for k in range(2):
            if not sps[k]:
                cells += ["-"] * 4
                continue
            if ratio:
                vs_c, vs_cpu = spread(ratio[k], "%.2f", "x"), spread(cpu_ratio[k], "%.2f", "x")
            else:
                vs_c = f"{statistics.median(sps[k]) / ceil_med[k]:.2f}x" if ceil_med[k] else "-"
                vs_cpu = "-"
            cells += [spread(sps[k]), f"{statistics.median(sps[k]) / threads:.0f}", vs_c, vs_cpu]
        vs_t = spread([x / torch_best[0] for x in sps[1]], "%.2f", "x") if torch_best and sps[1] \
            else "-"
        fb = f"{statistics.median(first):.0f}" if first else "-"
        print(f"| {name} | " + " | ".join(cells) + f" | {vs_t} | {fb} |")
    # samples per CPU second (the process's, all threads; the DataLoader's with its workers):
    # a per-core figure that a shared machine disturbs less than samples/s
    def per_cpu(d, key):
        p = d.get(key) if key != "ceiling" else d["ceiling"]
        return p["samples"] / p["cpu_s"] if p and p.get("cpu_s") else None

    def cpu_spread(v):
        v = [x for x in v if x]
        return spread(v) if v else "-"

    parts = [f"stoker {mode} first epoch "
             f"{cpu_spread([per_cpu(d, 'first_epoch') for d in runs[mode]])}, later "
             f"{cpu_spread([per_cpu(d, 'later_epochs') for d in runs[mode]])}"
             for mode in ("default", "exact")]
    parts.append(f"ceiling {cpu_spread([per_cpu(d, 'ceiling') for d in runs['default']])}")
    if torch_best:
        parts.append(f"DataLoader num_workers={torch_best[1]} "
                     f"{cpu_spread([x[3] for x in torch_best[2]])}")
    print("\nsamples per CPU second: " + "; ".join(parts))
    print(f"\n{a.repeat} stoker runs of each mode, each with its own ceiling run; ratios to the "
          f"ceiling per run and per part (first epoch to the ceiling's first, later to later), "
          f"to PyTorch against its median; per thread = samples/s / {a.threads} threads "
          f"(the DataLoader: / its worker processes); median [min-max]; "
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

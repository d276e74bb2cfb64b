#!/usr/bin/env python3
"""A short pure-Python __getitem__ on each executor, side by side: what executor="auto" should
choose (python/stoker/_executor.py's model) and what each executor costs beside __getitem__.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_executors.py [--k 100,300,1000] \
        [--workers 2] [--epochs 3] [--repeat 1] [--fetch sample|batch]

The dataset is a loop of k steps of Python arithmetic returning (tensor of 4 floats, int), the
shape of a tabular or text sample; batch 64, shuffled, 100,000 samples. For each k, each
configuration runs in a process of its own: stoker.Loader with executor "thread", "process"
and "auto" at --workers, stoker's default (num_workers not given: "auto" picks the executor and
the count, the training thread itself included), stoker at num_workers=0 (the training thread
loads each batch), and the DataLoader at 0 and --workers workers. Each prints the best later
epoch's samples/s; the first line per k gives __getitem__'s own time (timeit, one thread).

--fetch batch: the same work done for a whole batch in one call, as a dataset that tokenizes a
list of strings at once: batch_size=None with a BatchSampler as the sampler, __getitem__ given
each batch's list of 64 indices (the time shown is still per sample).
"""
import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, sys, time, timeit
import torch
from torch.utils.data import DataLoader
import stoker
from tiny_datasets import Short


k, which, epochs = int(sys.argv[1]), sys.argv[2], int(sys.argv[4])
workers = None if sys.argv[3] == "None" else int(sys.argv[3])  # None: stoker picks
batched = sys.argv[5] == "batch"
ds = Short(k)
if which == "time":
    n = 20000
    print(json.dumps({"getitem_us": timeit.timeit(lambda: ds[12345], number=n) / n * 1e6}))
    sys.exit()
S = torch.utils.data
kw = dict(batch_size=None, sampler=S.BatchSampler(S.RandomSampler(ds), 64, False)) if batched \
    else dict(batch_size=64, shuffle=True)
if which == "DataLoader":
    loader = DataLoader(ds, num_workers=workers, **kw)
else:
    kw.update({} if workers is None else {"num_workers": workers})
    loader = stoker.Loader(ds, executor=which, **kw)
best = 0
for e in range(epochs):
    t = time.perf_counter()
    n = sum(len(y) for _, y in loader)
    if e:
        best = max(best, n / (time.perf_counter() - t))
chose = "-"
if hasattr(loader, "info"):
    chose = loader.info()["executor"] + f" x{loader.num_workers}"
print(json.dumps({"rate": round(best), "chose": chose}))
"""


def child(*args):
    here = os.path.dirname(os.path.abspath(__file__))  # (tiny_datasets, for the workers too)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [here] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    out = subprocess.run([sys.executable, "-c", CHILD] + [str(a) for a in args],
                         capture_output=True, text=True, timeout=900, env=env)
    if out.returncode != 0:
        sys.exit(f"{args} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k", default="100,300,1000", help="steps of the loop, comma-separated")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3, help="epochs per run (the first is left out)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each configuration, in turn")
    ap.add_argument("--fetch", choices=("sample", "batch"), default="sample",
                    help="batch: __getitem__ gets each batch's list of indices")
    args = ap.parse_args()
    w = args.workers
    configs = [("thread", w), ("process", w), ("auto", w), ("auto", None), ("auto", 0),
               ("DataLoader", 0), ("DataLoader", w)]
    print(f"| __getitem__ | thread x{w} | process x{w} | auto x{w} (chose) | default (chose) | "
          f"num_workers=0 | DataLoader 0 | DataLoader {w} |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for k in (int(v) for v in args.k.split(",")):
        us = child(k, "time", 0, 1, args.fetch)["getitem_us"]
        got = {c: [] for c in configs}
        for _ in range(args.repeat):
            for c in configs:
                got[c].append(child(k, c[0], c[1], args.epochs, args.fetch))
        cells = []
        for c in configs:
            rates = "-".join(str(r["rate"]) for r in got[c]) + "/s"
            chose = c[0] == "auto" and c[1] != 0
            cells.append(rates + (f" ({got[c][0]['chose']})" if chose else ""))
        print(f"| {us:.1f} us (k={k}) | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()

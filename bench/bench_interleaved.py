#!/usr/bin/env python3
"""Tiny samples, stoker against the DataLoader with their epochs interleaved in one process.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_interleaved.py \
        [--dataset tensors20|short10|short100] [--fetch sample|batch] [--batch 64] \
        [--rounds 9] [--stoker-workers 0|auto|N] [--executor thread|process] [--prefetch N] \
        [--dl-workers 0]

For samples of a few microseconds the two loaders differ by tenths of a microsecond a sample,
and this shared VM's speed drifts by more than that between two processes run one after the
other (the same DataLoader run four times: 2.96-4.45 us of CPU a sample). So both loaders are
built over the same dataset object in one process, and their epochs alternate (the DataLoader
first in even rounds, stoker first in odd ones): each round gives a ratio of two epochs run
seconds apart, and the median of the rounds' ratios is the figure (the spread is printed too).
The first epoch of each is a warm-up and is reported apart.

Datasets (bench/tiny_datasets.py): tensors20, a class of your own over a TensorDataset (20
random float32 features and an int64 label a row, 200,000 rows; __getitem__ calls the base
class's, as bench_tutorials.py --own does); shortK, bench_executors.py's pure-Python loop of K
steps returning (a 4-float tensor, an int) (100,000 samples). --fetch batch: batch_size=None
with a BatchSampler (of a RandomSampler) as the sampler, __getitem__ given each batch's list of
indices.
"""
import argparse
import statistics
import time

from torch.utils.data import BatchSampler, DataLoader, RandomSampler

import stoker
from tiny_datasets import Short, tensors


def make(name):
    if name.startswith("tensors"):
        return tensors(int(name[len("tensors"):]))
    return Short(int(name[len("short"):]))


def epoch(loader):
    """(wall s, CPU s, samples) of one epoch."""
    w, c, n = time.perf_counter(), time.process_time(), 0
    for _, y in loader:
        n += len(y)
    return time.perf_counter() - w, time.process_time() - c, n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="tensors20")
    ap.add_argument("--fetch", choices=("sample", "batch"), default="sample")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--stoker-workers", default="auto",
                    help="stoker.Loader's num_workers (auto: not given)")
    ap.add_argument("--dl-workers", type=int, default=0)
    ap.add_argument("--executor", default=None, help="stoker's executor (default: auto)")
    ap.add_argument("--prefetch", type=int, default=None, help="stoker's prefetch (batches)")
    args = ap.parse_args()
    ds = make(args.dataset)
    if args.fetch == "batch":
        def kw():
            return dict(batch_size=None,
                        sampler=BatchSampler(RandomSampler(ds), args.batch, drop_last=False))
    else:
        def kw():
            return dict(batch_size=args.batch, shuffle=True)
    sw = {} if args.stoker_workers == "auto" else {"num_workers": int(args.stoker_workers)}
    sw.update({k: v for k, v in (("executor", args.executor), ("prefetch", args.prefetch))
               if v is not None})
    loaders = {"DataLoader": DataLoader(ds, num_workers=args.dl_workers, **kw()),
               "stoker": stoker.Loader(ds, **sw, **kw())}
    info = loaders["stoker"].info()
    print(f"dataset {args.dataset}, fetch {args.fetch}, batch {args.batch}, {len(ds)} samples; "
          f"DataLoader num_workers={args.dl_workers}; stoker {info['executor']} x"
          f"{loaders['stoker'].num_workers} ({info['executor_reason']})")
    first = {k: epoch(v) for k, v in loaders.items()}
    ratios, cpu_ratios, rates = [], [], {k: [] for k in loaders}
    for r in range(args.rounds):
        order = list(loaders) if r % 2 == 0 else list(reversed(loaders))
        got = {k: epoch(loaders[k]) for k in order}
        for k, (w, _, n) in got.items():
            rates[k].append(n / w)
        ratios.append(got["DataLoader"][0] / got["stoker"][0])
        cpu_ratios.append(got["DataLoader"][1] / got["stoker"][1])
    for k in loaders:
        w, _, n = first[k]
        print(f"{k:10s} first epoch {n / w:9.0f}/s; later epochs median "
              f"{statistics.median(rates[k]):9.0f}/s [{min(rates[k]):.0f}-{max(rates[k]):.0f}]")
    print(f"stoker / DataLoader, first epoch: {first['DataLoader'][0] / first['stoker'][0]:.2f}x")
    q = sorted(ratios)
    print(f"stoker / DataLoader, later epochs (wall, median of {args.rounds} interleaved "
          f"rounds): {statistics.median(ratios):.2f}x [{q[0]:.2f}-{q[-1]:.2f}]; CPU time: "
          f"{statistics.median(cpu_ratios):.2f}x")


if __name__ == "__main__":
    main()

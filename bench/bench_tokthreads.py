#!/usr/bin/env python3
"""Where a token loader's CPU goes, thread by thread (issue 26, tok6): fixed windows B=32, T=2048
from Python, after WARM untimed batches, K timed batches; per thread (the consumer, the
workers) the CPU per batch (utime + stime from /proc/self/task, 1/CLK_TCK resolution: 10 ms
over K batches) and the context switches per batch (voluntary: it slept; involuntary: it was
preempted). bench_tokens.py gives the totals against the ceilings; this gives their split.

    STOKER_MMAP=1 PYTHONPATH=build/python /usr/bin/python3 bench/bench_tokthreads.py \
        [--threads 1] [--warm 3100] [--batches 3000] [--ids-dtype int32] [FILE]

FILE defaults to bench_tokens.py's nanoGPT file (bench/data/tokens/train_200000000.bin).
WARM 3100 is a little over an epoch of that file (a later epoch: every page touched).
"""
import argparse
import itertools
import os
import time

import numpy  # noqa: F401  (imported first, as a training script has them)
import torch  # noqa: F401

import stoker

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def threads_now():
    """{tid: (name, cpu seconds, voluntary switches, involuntary switches)}."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
            with open(f"/proc/self/task/{tid}/status") as f:
                status = f.read()
        except OSError:  # (ended meanwhile)
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        sw = {k: int(v) for k, v in (line.split(":") for line in status.splitlines()
                                     if "ctxt_switches:" in line)}
        out[tid] = (name, (int(fields[11]) + int(fields[12])) / tick,
                    sw.get("voluntary_ctxt_switches", 0), sw.get("nonvoluntary_ctxt_switches", 0))
    return out


def epochs(L):
    """The loader's batches, epoch after epoch."""
    while True:
        yield from L


def main():
    p = argparse.ArgumentParser()
    p.add_argument("file", nargs="?",
                   default=os.path.join(ROOT, "bench", "data", "tokens", "train_200000000.bin"))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warm", type=int, default=3100)
    p.add_argument("--batches", type=int, default=3000)
    p.add_argument("--ids-dtype", default="int64", help="int64 (the default) or int32")
    a = p.parse_args()
    L = stoker.Loader(a.file, batch_size=32, seq_len=2048, tokens="windows", shuffle=True,
                      seed=0, num_workers=a.threads, ids_dtype=a.ids_dtype)
    g = epochs(L)
    for b in itertools.islice(g, a.warm):
        del b  # (a batch not held while the next is taken)
    K = a.batches
    before, w0 = threads_now(), time.perf_counter()
    for b in itertools.islice(g, K):
        del b
    wall, after = time.perf_counter() - w0, threads_now()
    L.close()
    total = 0.0
    print(f"STOKER_MMAP={os.environ.get('STOKER_MMAP', '')} threads={a.threads} K={K} "
          f"ids_dtype={a.ids_dtype}")
    for tid, (name, c, vol, inv) in sorted(after.items()):
        n0, c0, vol0, inv0 = before.get(tid, (name, 0.0, 0, 0))
        total += c - c0
        if c > c0 or vol > vol0:
            print(f"  {name:12s} {(c - c0) / K * 1e6:6.1f} us/batch  slept {(vol - vol0) / K:.2f}"
                  f"  preempted {(inv - inv0) / K:.2f} a batch")
    print(f"  total {total / K * 1e6:.1f} us/batch ({K * 32 * 2048 / total / 1e6:.0f} Mtokens per "
          f"CPU-second), wall {wall / K * 1e6:.1f} us/batch")


if __name__ == "__main__":
    main()

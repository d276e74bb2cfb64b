#!/usr/bin/env python3
"""Raw-record rate of TFRecord against .stk through `stoker bench` (issue 12), for comparing
builds side by side: the same 500 random records (40-74 KB, 57 KB mean) written once as one
TFRecord file of tf.train.Example {image, label} (the test suite's writer) and once as one .stk
shard; then ROUNDS interleaved runs of each (binary, file) pair, one thread, batch 64, shuffle,
20 epochs each, CRCs/checksums checked as the loader does. Before every run its file is evicted
from the page cache and read back sequentially (bench/pagecache.py; `--page-cache as-is` leaves
the cache alone), and each file's large-folio share is printed. Prints the best and the median
samples/s and samples per CPU second of each pair and their ratios to .stk (the machine is
shared: read the best, or the CPU-second ratio).

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_tfrecord_raw.py \\
        [--rounds 15] [--out DIR] [--page-cache warm|as-is] NAME=STOKER_BINARY ...
(the last binary also runs the .stk file)."""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python", "tests"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import pagecache  # noqa: E402


def make(out):
    import numpy as np
    import stoker
    from test_tfrecord import example, write_tfrecord
    os.makedirs(out, exist_ok=True)
    tf, stk = os.path.join(out, "d.tfrecord"), os.path.join(out, "d.stk")
    if not os.path.exists(tf):
        rng = np.random.default_rng(0)
        recs = [{"image": rng.integers(0, 256, int(rng.integers(40000, 74000)),
                                       dtype=np.uint8).tobytes(), "label": i % 1000}
                for i in range(500)]
        write_tfrecord(tf, [example(r) for r in recs])
        stoker.write_shard(stk, {"image": "bytes", "label": "int64"}, recs)
    return tf, stk


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "tfrecord_raw"))
    ap.add_argument("builds", nargs="+", help="NAME=path/to/stoker")
    pagecache.add_argument(ap)
    a = ap.parse_args()
    tf, stk = make(a.out)
    runs = [(n, b, tf) for n, b in (x.split("=", 1) for x in a.builds)]
    runs.append(("stk", runs[-1][1], stk))
    got = {n: [] for n, _, _ in runs}
    cpu = {n: [] for n, _, _ in runs}  # samples per CPU second of the stoker process
    for r in range(a.rounds):
        for name, binary, data in runs:
            pagecache.prepare([data], a.page_cache)
            out = subprocess.run([binary, "bench", data, "--threads", "1", "--epochs",
                                  str(a.epochs), "--batch-size", "64", "--shuffle", "--json",
                                  "--quiet"], capture_output=True, text=True, check=True)
            d = json.loads(out.stdout)
            got[name].append(d["samples_per_s"])
            cpu[name].append(d["samples"] / d["cpu_s"])
        print(f"round {r + 1}/{a.rounds}: " + ", ".join(f"{n} {got[n][-1]:.0f}" for n in got),
              file=sys.stderr, flush=True)
    print(f"page cache: {a.page_cache}; {a.rounds} interleaved rounds; samples/s (wall clock) "
          "and samples per CPU second, best and median, ratio to .stk's same statistic\n")
    print("| file | best samples/s | median samples/s | best per CPU s | median per CPU s |")
    print("|---|---|---|---|---|")
    for name in got:
        cells = []
        for v, ref in ((got[name], got["stk"]), (cpu[name], cpu["stk"])):
            cells.append(f"{max(v):.0f} ({max(v) / max(ref):.2f}x)")
            cells.append(f"{statistics.median(v):.0f} "
                         f"({statistics.median(v) / statistics.median(ref):.2f}x)")
        print(f"| {name} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} |")
    print("\n```\nPYTHONPATH=build/python /usr/bin/python3 bench/bench_tfrecord_raw.py "
          + " ".join(sys.argv[1:]))
    print(f"stoker bench FILE --threads 1 --epochs {a.epochs} --batch-size 64 --shuffle --json "
          "--quiet\n```")


if __name__ == "__main__":
    main()

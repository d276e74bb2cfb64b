#!/usr/bin/env python3
"""Raw-record rate of TFRecord against .stk through `stoker bench` (issue 12), for comparing
builds side by side: the same 500 random records (40-74 KB, 57 KB mean) written once as one
TFRecord file of tf.train.Example {image, label} (the test suite's writer) and once as one .stk
shard; then ROUNDS interleaved runs of each (binary, file) pair, one thread, batch 64, shuffle,
20 epochs each, CRCs/checksums checked as the loader does. Prints the best and the median
samples/s of each pair and their ratios to .stk (the machine is shared: read the best).

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_tfrecord_raw.py \\
        [--rounds 15] [--out DIR] NAME=STOKER_BINARY ...
(the last binary also runs the .stk file)."""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python", "tests"))


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
    a = ap.parse_args()
    tf, stk = make(a.out)
    runs = [(n, b, tf) for n, b in (x.split("=", 1) for x in a.builds)]
    runs.append(("stk", runs[-1][1], stk))
    got = {n: [] for n, _, _ in runs}
    for _ in range(a.rounds):
        for name, binary, data in runs:
            out = subprocess.run([binary, "bench", data, "--threads", "1", "--epochs",
                                  str(a.epochs), "--batch-size", "64", "--shuffle", "--json",
                                  "--quiet"], capture_output=True, text=True, check=True)
            got[name].append(json.loads(out.stdout)["samples_per_s"])
    best_stk, med_stk = max(got["stk"]), statistics.median(got["stk"])
    for name, v in got.items():
        print(f"{name:10s} best {max(v):8.0f} ({max(v) / best_stk:.2f}x .stk)  median "
              f"{statistics.median(v):8.0f} ({statistics.median(v) / med_stk:.2f}x .stk)")


if __name__ == "__main__":
    main()

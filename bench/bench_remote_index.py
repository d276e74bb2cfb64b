#!/usr/bin/env python3
"""Opening remote shards with their index kept in the block cache (issue 12, wdsidx): N
WebDataset tar shards (and TFRecord files without a .idx) on s3rver at 127.0.0.1, behind a
counting proxy that adds `--latency-ms` to every request (s3util.FaultProxy, no faults), opened
with `stoker.Dataset(..., format=...)` in these states of the cache:

  no cache          no cache_dir: every open scans the headers (before and after this change)
  cold cache        an empty cache_dir: the scan fetches the shards' blocks, keeps the index
  warm blocks, no index   every block cached, the index entries deleted: what a second open
                    cost before this change (the scan reads every header from the cached blocks)
  warm blocks + index     the second open now: a HEAD per shard, the index from the cache
  index only        the blocks evicted, the index entries kept (a dataset larger than the cache:
                    blocks are evicted before indexes); before this change it cost a cold open

Each state is measured `--rounds` times, interleaved (the machine is shared and noisy: compare
within one run); time is the median wall-clock of the open, requests / ranged GETs / MiB are what
the proxy served during it.

    PYTHONPATH=build/python:python/tests /usr/bin/python3 bench/bench_remote_index.py \
        [--shards 16] [--per 400] [--tf-files 4] [--tf-per 100] [--latency-ms 10] [--rounds 3]
"""
import argparse
import gc
import io
import os
import shutil
import statistics
import struct
import sys
import tarfile
import tempfile
import time

import numpy as np

import stoker
from s3util import FaultProxy, S3Server, anonymous_process, s3rver_command

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python",
                                "tests"))
from test_tfrecord import example, write_tfrecord  # noqa: E402


def make_wds(d, shards, per, rng):
    os.makedirs(d)
    for s in range(shards):
        with tarfile.open(os.path.join(d, f"shard-{s:06d}.tar"), "w",
                          format=tarfile.USTAR_FORMAT) as t:
            for i in range(per):
                key = f"train/s{s * per + i:08d}"
                for ext, data in (("jpg", rng.bytes(int(rng.integers(2000, 12000)))),
                                  ("cls", str(int(rng.integers(0, 1000))).encode())):
                    ti = tarfile.TarInfo(f"{key}.{ext}")
                    ti.size = len(data)
                    t.addfile(ti, io.BytesIO(data))


def make_tf(d, files, per, rng):
    os.makedirs(d)
    for f in range(files):
        recs = [{"image/encoded": rng.bytes(int(rng.integers(5000, 12000))),
                 "image/class/label": int(rng.integers(0, 1000))} for _ in range(per)]
        write_tfrecord(os.path.join(d, f"train-{f:03d}.tfrecord"), [example(r) for r in recs])


def settle(p, timeout=10):
    gc.collect()
    t = time.monotonic() + timeout
    while p.in_flight and time.monotonic() < t:
        time.sleep(0.005)


def entries(cache):
    d = os.path.join(cache, "entries")
    return [os.path.join(d, e) for e in os.listdir(d)] if os.path.isdir(d) else []


def drop(cache, blocks):
    """Delete the block entries (blocks=True) or the index entries (False)."""
    for e in entries(cache):
        if e.rsplit("-", 1)[1].isdigit() == blocks:
            os.unlink(e)


def open_once(p, url, fmt, cache):
    settle(p)
    r0, g0, b0 = p.requests, p.range_gets, p.bytes
    t0 = time.perf_counter()
    ds = stoker.Dataset(url, format=fmt, cache_dir=cache if cache else "")
    dt = time.perf_counter() - t0
    meta = ds.shards[0]["metadata"]
    n = len(ds)
    del ds
    settle(p)
    return dt, p.requests - r0, p.range_gets - g0, p.bytes - b0, meta, n


STATES = ("no cache", "cold cache", "warm blocks, no index", "warm blocks + index", "index only")


def measure(p, url, fmt, tmp, tag, rnd):
    """One open in each state; returns {state: result}."""
    out = {}
    out["no cache"] = open_once(p, url, fmt, None)
    cache = os.path.join(tmp, f"cache-{tag}-{rnd}")
    out["cold cache"] = open_once(p, url, fmt, cache)
    drop(cache, blocks=False)  # as before this change: blocks only
    out["warm blocks, no index"] = open_once(p, url, fmt, cache)  # rescans, stores the index
    out["warm blocks + index"] = open_once(p, url, fmt, cache)
    drop(cache, blocks=True)
    out["index only"] = open_once(p, url, fmt, cache)
    shutil.rmtree(cache, ignore_errors=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--per", type=int, default=400, help="samples per shard / records per file")
    ap.add_argument("--tf-files", type=int, default=4)
    ap.add_argument("--tf-per", type=int, default=100,
                    help="records per TFRecord file (without a cache: one GET per record)")
    ap.add_argument("--latency-ms", type=float, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    tmp = tempfile.mkdtemp(prefix="stk-ridx-")
    make_wds(os.path.join(tmp, "wds"), a.shards, a.per, rng)
    make_tf(os.path.join(tmp, "tf"), a.tf_files, a.tf_per, rng)
    wds_bytes = sum(os.path.getsize(os.path.join(tmp, "wds", f))
                    for f in os.listdir(os.path.join(tmp, "wds")))
    tf_bytes = sum(os.path.getsize(os.path.join(tmp, "tf", f))
                   for f in os.listdir(os.path.join(tmp, "tf")))
    srv = S3Server(s3rver_command(), os.path.join(tmp, "s3")).start()
    anonymous_process(srv.endpoint)
    sets = [("wds", f"s3://data/wds/shard-{{000000..{a.shards - 1:06d}}}.tar", "wds",
             a.shards, wds_bytes),
            ("tfrecord", f"s3://data/tf/train-{{000..{a.tf_files - 1:03d}}}.tfrecord",
             "tfrecord", a.tf_files, tf_bytes)]
    res = {}
    try:
        srv.put_dir(os.path.join(tmp, "wds"), "wds")
        srv.put_dir(os.path.join(tmp, "tf"), "tf")
        with FaultProxy(srv.endpoint.split("//")[1], latency=a.latency_ms / 1000) as p:
            os.environ["AWS_ENDPOINT_URL"] = p.endpoint
            for rnd in range(a.rounds):
                for tag, url, fmt, _, _ in sets:
                    for state, r in measure(p, url, fmt, tmp, tag, rnd).items():
                        res.setdefault((tag, state), []).append(r)
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{a.shards} WebDataset shards of {a.per} samples ({wds_bytes / 2**20:.1f} MiB), "
          f"{a.tf_files} TFRecord files of {a.tf_per} records ({tf_bytes / 2**20:.1f} MiB); "
          f"+{a.latency_ms:g} ms per request (proxy); median of {a.rounds} interleaved rounds "
          "[min-max]")
    print("\n| format | cache state at open | open (s) | x no cache | requests | ranged GETs "
          "| MiB fetched | index |")
    print("|---|---|---|---|---|---|---|---|")
    for tag, _, _, files, _ in sets:
        base = statistics.median(r[0] for r in res[(tag, "no cache")])
        for state in STATES:
            rs = res[(tag, state)]
            t = statistics.median(r[0] for r in rs)
            req = statistics.median(r[1] for r in rs)
            gets = statistics.median(r[2] for r in rs)
            mib = statistics.median(r[3] for r in rs) / 2**20
            meta = rs[0][4].split('"index": "')[1].split('"')[0]
            print(f"| {tag} ({files} files) | {state} | {t:.3f} [{min(r[0] for r in rs):.3f}-"
                  f"{max(r[0] for r in rs):.3f}] | {t / base:.2f} | {req:.0f} | {gets:.0f} | "
                  f"{mib:.1f} | {meta} |")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The remote transport side by side, in one process: the same .stk dataset (photo-like JPEGs
from gen_images.py, packed) read from local disk and from s3rver on 127.0.0.1, for raw records
and the imagenet-train pipeline, without a cache, cold cache and warm cache, before (one GET per
record: STOKER_HTTP_PREFETCH=0) and after (coalescing, curl multi, read-ahead: the defaults).
Rates are samples/s and their ratio to local disk, measured in the same run; requests and bytes
come from a second pass through a counting proxy (s3util.FaultProxy, no faults) so that the rate
runs talk to s3rver directly.

    PYTHONPATH=build/python:python/tests /usr/bin/python3 bench/bench_remote_transport.py \
        [--images 600] [--workers 2] [--batch 64] [--latency-ms 20] [--rounds 3]
"""
import argparse
import gc
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import stoker
from s3util import FaultProxy, S3Server, anonymous_process, s3rver_command

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
URL = "s3://data/ds/imgs.stk"


def epoch(path, recipe, a):
    t0 = time.perf_counter()
    loader = stoker.Loader(path, batch_size=a.batch, shuffle=True, seed=1,
                           num_workers=a.workers,
                           transforms=None if recipe == "raw" else recipe)
    first, count, batches = None, 0, 0
    for b in loader:
        first = first or time.perf_counter() - t0
        count += len(b["index"])
        batches += 1
    dt = time.perf_counter() - t0
    return count / dt, first, batches


def settle(proxy, timeout=10):
    """Wait until the proxy has nothing in flight (a closed loader's last prefetches end)."""
    gc.collect()
    t = time.monotonic() + timeout
    while proxy.in_flight and time.monotonic() < t:
        time.sleep(0.01)


def setenv(prefetch, cache):
    os.environ.pop("STOKER_HTTP_PREFETCH", None)
    if not prefetch:
        os.environ["STOKER_HTTP_PREFETCH"] = "0"
    os.environ.pop("STOKER_CACHE_DIR", None)
    if cache:
        os.environ["STOKER_CACHE_DIR"] = cache
        os.environ["STOKER_CACHE_LIMIT"] = "4G"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=600)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--latency-ms", type=float, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="stk-rt-")
    imgs = os.path.join(tmp, "imgs")
    subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gen_images.py"), imgs,
                    "--classes", "10", "--per-class", str(a.images // 10), "--profile",
                    "imagenet"], check=True, stdout=subprocess.DEVNULL)
    os.makedirs(os.path.join(tmp, "ds"))
    local = os.path.join(tmp, "ds", "imgs.stk")
    subprocess.run([os.path.join(ROOT, "build", "stoker"), "pack", imgs, local, "--quiet"],
                   check=True)
    size = os.path.getsize(local)
    srv = S3Server(s3rver_command(), os.path.join(tmp, "s3")).start()
    anonymous_process(srv.endpoint)
    n = 0
    configs = [("s3rver, no cache", "before", False, None), ("s3rver, no cache", "after", True, None),
               ("s3rver, cold cache", "before", False, "cold"),
               ("s3rver, warm cache", "before", False, "warm"),
               ("s3rver, cold cache", "after", True, "cold"),
               ("s3rver, warm cache", "after", True, "warm")]
    try:
        srv.put_dir(os.path.join(tmp, "ds"), "ds")
        n = len(stoker.Dataset(local))
        setenv(True, None)
        epoch(local, "raw", a)  # warm-up: the first loader of a process pays one-time costs
        rates = {}  # (recipe, source, mode) -> [(rate, first)]
        for rnd in range(a.rounds):  # interleaved rounds: the machine's drift hits every row
            for recipe in ("raw", "imagenet-train"):
                setenv(True, None)
                rates.setdefault((recipe, "local disk", ""), []).append(epoch(local, recipe, a))
                for src, mode, prefetch, kind in configs:
                    cache = os.path.join(tmp, f"cache-{recipe}-{mode}-{rnd}") if kind else None
                    setenv(prefetch, cache)
                    rates.setdefault((recipe, src, mode), []).append(epoch(URL, recipe, a))
        rows = []
        for recipe in ("raw", "imagenet-train"):
            local_rate = statistics.median(r[0] for r in rates[(recipe, "local disk", "")])
            for (rc, src, mode), rs in rates.items():
                if rc == recipe:
                    med = statistics.median(r[0] for r in rs)
                    first = statistics.median(r[1] for r in rs)
                    rows.append((recipe, src, mode, med, min(r[0] for r in rs),
                                 max(r[0] for r in rs), med / local_rate, first))
        # requests and bytes per epoch through one counting proxy (raw records; the transforms do
        # not change what is read)
        counts = []
        host = srv.endpoint.split("//")[1]
        with FaultProxy(host) as p:
            os.environ["AWS_ENDPOINT_URL"] = p.endpoint
            for src, mode, prefetch, kind in configs:
                setenv(prefetch, os.path.join(tmp, f"count-{mode}") if kind else None)
                settle(p)
                r0, b0 = p.requests, p.bytes
                p.max_in_flight = 0
                _, _, batches = epoch(URL, "raw", a)
                settle(p)  # the loader opened next epoch's first batches: their GETs count here
                counts.append((src, mode, p.requests - r0, p.bytes - b0, batches,
                               p.max_in_flight))
        lat = []
        with FaultProxy(host, latency=a.latency_ms / 1000) as p:
            os.environ["AWS_ENDPOINT_URL"] = p.endpoint
            for mode, prefetch in (("before", False), ("after", True)):
                setenv(prefetch, None)
                p.max_in_flight = 0
                r = epoch(URL, "raw", a)
                lat.append((mode, r[0], r[1], p.max_in_flight))
                settle(p, timeout=30)  # before the server stops under the last read-ahead
            # imagenet-train through the same latency, no cache: how many GETs in flight it
            # takes to hide 20 ms (one GET per record before; then STOKER_HTTP_INFLIGHT = k)
            lat_img = []
            for mode, prefetch, inflight in (("before", False, None), ("after", True, 1),
                                             ("after", True, 2), ("after", True, 4),
                                             ("after", True, 8), ("after", True, 16)):
                setenv(prefetch, None)
                os.environ.pop("STOKER_HTTP_INFLIGHT", None)
                if inflight:
                    os.environ["STOKER_HTTP_INFLIGHT"] = str(inflight)
                p.max_in_flight = 0
                r = epoch(URL, "imagenet-train", a)
                lat_img.append((mode, inflight, r[0], r[1], p.max_in_flight))
                settle(p, timeout=30)
            os.environ.pop("STOKER_HTTP_INFLIGHT", None)
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{n} JPEGs (gen_images.py --profile imagenet), one {size / 2**20:.1f} MiB .stk shard; "
          f"batch {a.batch}, {a.workers} workers, shuffled, one epoch per row")
    print(f"\nmedian of {a.rounds} interleaved rounds [min-max]; x local = median / local median")
    print("\n| pipeline | source | transport | samples/s | x local | first batch (s) |")
    print("|---|---|---|---|---|---|")
    for recipe, src, mode, med, lo, hi, x, first in rows:
        print(f"| {recipe} | {src} | {mode} | {med:.0f} [{lo:.0f}-{hi:.0f}] | {x:.2f} | "
              f"{first:.2f} |")
    print("\n| raw, through a counting proxy | transport | requests | per batch | MiB fetched "
          "| x shard size | max in flight |")
    print("|---|---|---|---|---|---|---|")
    for label, mode, req, nbytes, batches, mif in counts:
        print(f"| {label} | {mode} | {req} | {req / max(batches, 1):.1f} | "
              f"{nbytes / 2**20:.1f} | {nbytes / size:.2f} | {mif} |")
    print(f"\n| raw, +{a.latency_ms:.0f} ms per request (proxy), no cache | transport | samples/s "
          "| first batch (s) | max in flight |")
    print("|---|---|---|---|---|")
    for mode, rate, first, mif in lat:
        print(f"| | {mode} | {rate:.0f} | {first:.2f} | {mif} |")
    img_local = statistics.median(r[0] for r in rates[("imagenet-train", "local disk", "")])
    print(f"\n| imagenet-train, +{a.latency_ms:.0f} ms per request, no cache | transport "
          "| STOKER_HTTP_INFLIGHT | samples/s | x local | first batch (s) | max in flight |")
    print("|---|---|---|---|---|---|---|")
    for mode, inflight, rate, first, mif in lat_img:
        print(f"| | {mode} | {inflight or '-'} | {rate:.0f} | {rate / img_local:.2f} | "
              f"{first:.2f} | {mif} |")


if __name__ == "__main__":
    main()

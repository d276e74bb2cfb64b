#!/usr/bin/env python3
"""Read-ahead for remote WebDataset and TFRecord (the source table's `extent`): one raw epoch
(batch 64, 2 workers, shuffled, no cache) of the same kind of records stored as WebDataset tar
shards and as TFRecord files on s3rver at 127.0.0.1, before (STOKER_HTTP_PREFETCH=0: one GET per
record, as every format but .stk read before) and after (the defaults: a batch's records, and the
next batch's, coalesced into a few ranged GETs, up to 16 in flight). Twice: straight to s3rver,
and behind a proxy adding --latency-ms per request (s3util.FaultProxy, no faults), which also
counts the requests. Rounds are interleaved; medians [min-max].

    PYTHONPATH=build/python:python/tests /usr/bin/python3 bench/bench_remote_readahead.py \\
        [--shards 4] [--per 400] [--latency-ms 10] [--rounds 3]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

import stoker
from s3util import FaultProxy, S3Server, anonymous_process, s3rver_command

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_remote_index import make_tf, make_wds, settle  # noqa: E402


def epoch(url, fmt, prefetch):
    os.environ.pop("STOKER_HTTP_PREFETCH", None)
    if not prefetch:
        os.environ["STOKER_HTTP_PREFETCH"] = "0"
    loader = stoker.Loader(url, batch_size=64, shuffle=True, seed=1, num_workers=2, format=fmt)
    t0, n = time.perf_counter(), 0
    for b in loader:
        n += len(b["index"])
    dt = time.perf_counter() - t0
    loader.close()
    return n / dt, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=4, help="WDS shards and TFRecord files")
    ap.add_argument("--per", type=int, default=400, help="records per shard / file")
    ap.add_argument("--latency-ms", type=float, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    tmp = tempfile.mkdtemp(prefix="stk-rra-")
    make_wds(os.path.join(tmp, "wds"), a.shards, a.per, rng)
    make_tf(os.path.join(tmp, "tf"), a.shards, a.per, rng)
    stoker.Dataset(os.path.join(tmp, "tf"))  # writes each file's .idx: the open is not measured
    srv = S3Server(s3rver_command(), os.path.join(tmp, "s3")).start()
    anonymous_process(srv.endpoint)
    sets = [("wds", "s3://data/wds/", "wds"), ("tfrecord", "s3://data/tf/", "tfrecord")]
    rows = {}
    try:
        srv.put_dir(os.path.join(tmp, "wds"), "wds")
        srv.put_dir(os.path.join(tmp, "tf"), "tf")
        host = srv.endpoint.split("//")[1]
        for _ in range(a.rounds):
            for name, url, fmt in sets:
                for prefetch in (False, True):
                    os.environ["AWS_ENDPOINT_URL"] = srv.endpoint
                    rate, n = epoch(url, fmt, prefetch)
                    rows.setdefault((name, "s3rver", prefetch), []).append((rate, None))
                    with FaultProxy(host, latency=a.latency_ms / 1000) as p:
                        os.environ["AWS_ENDPOINT_URL"] = p.endpoint
                        r0 = p.requests
                        rate, n = epoch(url, fmt, prefetch)
                        settle(p, timeout=30)
                        rows.setdefault((name, f"+{a.latency_ms:g} ms", prefetch), []).append(
                            (rate, p.requests - r0))
    finally:
        srv.stop()
    print(f"{a.shards} WDS shards and {a.shards} TFRecord files of {a.per} records (2-12 KB); "
          f"raw epoch, batch 64, 2 workers, shuffled, no cache; median of {a.rounds} "
          "interleaved rounds [min-max]\n")
    print("| format | server | read-ahead | samples/s | x before | requests per epoch |")
    print("|---|---|---|---|---|---|")
    for (name, srv_kind, prefetch), v in rows.items():
        rates = [r for r, _ in v]
        before = statistics.median(r for r, _ in rows[(name, srv_kind, False)])
        reqs = [q for _, q in v if q is not None]
        print(f"| {name} | {srv_kind} | {'on' if prefetch else 'off (before)'} | "
              f"{statistics.median(rates):.0f} [{min(rates):.0f}-{max(rates):.0f}] | "
              f"{statistics.median(rates) / before:.2f} | "
              f"{statistics.median(reqs) if reqs else '-'} |")


if __name__ == "__main__":
    main()

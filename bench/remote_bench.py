"""Remote (S3) numbers on loopback: one epoch of a .stk dataset read from local disk, from a local
s3rver (cold and warm STOKER_CACHE_DIR, no cache), and through a proxy adding latency per
request. Usage: PYTHONPATH=build/python:python/tests python3 bench/remote_bench.py [N] [KB]"""
import os
import sys
import tempfile
import time

import numpy as np

import stoker
from conftest import write_dataset
from s3util import FaultProxy, S3Server, s3rver_command

n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
kb = int(sys.argv[2]) if len(sys.argv) > 2 else 110  # about an ImageNet JPEG


def rec(i):
    return {"data": np.random.default_rng(i).integers(0, 256, kb << 10, np.uint8).tobytes(),
            "label": i}


def epoch(path, workers=4):
    t0 = time.perf_counter()
    loader = stoker.Loader(path, batch_size=64, shuffle=True, seed=1, num_workers=workers)
    first, count = None, 0
    for b in loader:
        first = first or time.perf_counter() - t0
        count += len(b["index"])
    dt = time.perf_counter() - t0
    assert count == n
    return count / dt, first


tmp = tempfile.mkdtemp()
local = write_dataset(os.path.join(tmp, "ds"), n, shards=4, fields={"data": "bytes",
                                                                    "label": "int64"}, make=rec)
srv = S3Server(s3rver_command(), os.path.join(tmp, "s3")).start()
try:
    srv.put_dir(local, "ds")
    os.environ["AWS_ENDPOINT_URL"] = srv.endpoint
    rows = [("local disk", *epoch(local))]
    rows.append(("s3rver, no cache", *epoch("s3://data/ds/")))
    os.environ["STOKER_CACHE_DIR"] = os.path.join(tmp, "cache")
    rows.append(("s3rver, cold cache", *epoch("s3://data/ds/")))
    rows.append(("s3rver, warm cache", *epoch("s3://data/ds/")))
    del os.environ["STOKER_CACHE_DIR"]
    for w in (4, 16):
        with FaultProxy(srv.endpoint.split("//")[1], latency=0.020) as p:
            os.environ["AWS_ENDPOINT_URL"] = p.endpoint
            r = epoch("s3://data/ds/", workers=w)
            rows.append((f"+20 ms/request, {w} workers (max {p.max_in_flight} in flight)", *r))
finally:
    srv.stop()
print(f"{n} records of {kb} KiB ({n * kb / 1024:.0f} MiB), batch 64, 4 shards")
print("| source | records/s | first batch (s) |\n|---|---|---|")
for name, rate, first in rows:
    print(f"| {name} | {rate:.0f} | {first:.2f} |")

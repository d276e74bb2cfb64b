#!/usr/bin/env python3
"""Issue 30's costs, A/B against a base revision, interleaved (A B A B) in separate processes
of the same Python: what a read pays for pinning its version (an fstat after every local read)
and a cache hit for checking its checksums (the 4 KiB chunks it touches, XXH3).

    /usr/bin/python3 bench/bench_issue30_ab.py --base 67de657 [--rounds 5] [--workers 2]

Workloads (raw records, no decode: the read path is all there is to measure):
  local-100k  .stk of 2,000 records of 100 KiB, page cache warm, 3 epochs (the last timed)
  local-1k    .stk of 50,000 records of 1 KiB (the fstat's worst case: one per small read)
  s3-cached   the 100 KiB dataset on s3rver (127.0.0.1) through a warm block cache: every read
              a cache hit (each build fills its own cache first: the entry layouts differ)
Builds BASE's Python extension in a temporary worktree (`make python`). Prints a Markdown table
of samples/s and samples per CPU second of the process (less disturbed by a shared machine),
medians [min-max] per build, and the new/base ratio of the medians, with `uptime`.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RUN = r"""
import os, sys, time, json
import stoker
path, workers, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
kw = {}
if os.environ.get("BENCH_CACHE"):
    kw["cache_dir"] = os.environ["BENCH_CACHE"]
loader = stoker.Loader(path, 64, shuffle=True, seed=1, num_workers=workers, rank=0,
                       world_size=1, **kw)
rate = cpu_rate = 0
for e in range(epochs):
    t0, c0, n = time.perf_counter(), time.process_time(), 0
    for b in loader:
        n += len(b["index"])
    rate, cpu_rate = n / (time.perf_counter() - t0), n / (time.process_time() - c0)
print(json.dumps({"rate": rate, "cpu_rate": cpu_rate}))
"""


def sh(cmd, **kw):
    print("$", " ".join(cmd), file=sys.stderr)
    return subprocess.run(cmd, check=True, **kw)


def rate(pythonpath, path, workers, epochs, env_extra=None):
    env = dict(os.environ, PYTHONPATH=pythonpath + os.pathsep + os.path.join(ROOT, "python",
                                                                              "tests"))
    env.update(env_extra or {})
    out = subprocess.run([sys.executable, "-c", RUN, path, str(workers), str(epochs)],
                         check=True, capture_output=True, text=True, env=env).stdout
    import json
    r = json.loads(out.strip().splitlines()[-1])
    return r["rate"], r["cpu_rate"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="bench30_")
    base_tree = os.path.join(work, "base")
    if not os.path.exists(os.path.join(base_tree, "build", "python")):
        sh(["git", "-C", ROOT, "worktree", "add", "--detach", "-f", base_tree, a.base],
           stdout=subprocess.DEVNULL)
        sh(["make", "-C", base_tree, "-j2", "python"], stdout=subprocess.DEVNULL)
    builds = {"base": os.path.join(base_tree, "build", "python"),
              "new": os.path.join(ROOT, "build", "python")}
    sys.path[:0] = [builds["new"], os.path.join(ROOT, "python", "tests")]
    import numpy as np
    import stoker
    from s3util import S3Server, anonymous_process, s3rver_command

    def make(name, n, size):
        p = os.path.join(work, name)
        if not os.path.exists(p):
            stoker.write_shard(p, {"data": "bytes", "label": "int64"},
                               ({"data": np.random.default_rng(i).integers(0, 256, size, np.uint8)
                                 .tobytes(), "label": i} for i in range(n)))
        return p

    big, small = make("r100k.stk", 2000, 100 << 10), make("r1k.stk", 50000, 1 << 10)
    srv = S3Server(s3rver_command(), os.path.join(work, "s3")).start()
    try:
        srv.put("b/r100k.stk", open(big, "rb").read())
        anonymous_process(srv.endpoint)
        caches = {b: os.path.join(work, "cache-" + b) for b in builds}
        for b, pp in builds.items():  # fill each build's cache
            shutil.rmtree(caches[b], ignore_errors=True)
            rate(pp, "s3://data/b/r100k.stk", a.workers, 1, {"BENCH_CACHE": caches[b]})
        loads = [("local-100k", big, 3, {}), ("local-1k", small, 3, {}),
                 ("s3-cached", "s3://data/b/r100k.stk", 2, None)]
        res = {(w, b): [] for w, *_ in loads for b in builds}
        for r in range(a.rounds):
            for w, path, epochs, extra in loads:
                for b, pp in builds.items():
                    env = extra if extra is not None else {"BENCH_CACHE": caches[b]}
                    res[(w, b)].append(rate(pp, path, a.workers, epochs, env))
    finally:
        srv.stop()
    up = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"\n{a.rounds} rounds, {a.workers} worker threads; `uptime`: {up}\n")
    print("| workload | measure | base " + a.base + " | new | new/base (medians) |")
    print("|---|---|---|---|---|")
    for w, *_ in loads:
        for k, what in ((0, "samples/s"), (1, "samples per CPU second")):
            v = {b: [x[k] for x in res[(w, b)]] for b in builds}
            mb, mn = (statistics.median(v[b]) for b in ("base", "new"))
            fmt = lambda b: "%.0f [%.0f-%.0f]" % (statistics.median(v[b]), min(v[b]), max(v[b]))
            print(f"| {w} | {what} | {fmt('base')} | {fmt('new')} | {mn / mb:.3f} |")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Read paths for raw records, per CPU second (issue 15): runs bench/bench_readpath.c's methods
interleaved (every method once per round, files and thread counts alternating), prints a
Markdown table of medians with [min-max] and each method's ratio to memcpy in the same round.

    /usr/bin/python3 bench/bench_readpath.py FILE [FILE...] [--rounds 5] [--threads 1,2]
        [--epochs 5] [--methods memcpy,pread,...]

Builds build/bench_readpath (with io_uring when liburing.h is installed). The files should be
in the page cache (each is read once before the first round).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXE = os.path.join(ROOT, "build", "bench_readpath")
ALL = "memcpy,pread,mmap-keep,mmap-record,mmap-window,mmap-map,uring"


def build():
    src = os.path.join(ROOT, "bench", "bench_readpath.c")
    os.makedirs(os.path.dirname(EXE), exist_ok=True)
    cmd = ["cc", "-O2", "-pthread", "-o", EXE, src]
    if os.path.exists("/usr/include/liburing.h"):
        cmd += ["-DWITH_URING", "-luring"]
    subprocess.run(cmd, check=True)
    return "-DWITH_URING" in cmd


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--methods", default=ALL)
    a = ap.parse_args()
    uring = build()
    methods = [m for m in a.methods.split(",") if m != "uring" or uring]
    for f in a.files:
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass
    res = {}  # (file, threads, method) -> [(gb_cpu, gb_wall, rss, ratio_cpu)]
    for r in range(a.rounds):
        for t in a.threads.split(","):
            for f in a.files:
                got = {}
                for m in methods:
                    out = subprocess.run([EXE, f, m, t, str(a.epochs)], check=True,
                                         capture_output=True, text=True).stdout
                    g = re.search(r"([\d.]+) GB/cpu-s +([\d.]+) GB/s +peak RSS (\d+) MiB", out)
                    got[m] = (float(g[1]), float(g[2]), int(g[3]))
                for m in methods:
                    base = got.get("memcpy", (0,))[0]
                    res.setdefault((f, t, m), []).append(
                        got[m] + ((got[m][0] / base) if base else 0.0,))
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)

    def mm(v, fmt):
        return f"{fmt % statistics.median(v)} [{fmt % min(v)}-{fmt % max(v)}]"

    print("| file | threads | method | GB per CPU s | per CPU s / memcpy | GB/s (wall) | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|")
    for (f, t, m), v in res.items():
        print(f"| {os.path.basename(f)} | {t} | {m} | {mm([x[0] for x in v], '%.2f')} | "
              f"{mm([x[3] for x in v], '%.2f')} | {mm([x[1] for x in v], '%.2f')} | "
              f"{max(x[2] for x in v)} |")
    print(f"\n`/usr/bin/python3 bench/bench_readpath.py {' '.join(a.files)} --rounds {a.rounds} "
          f"--threads {a.threads} --epochs {a.epochs} --methods {','.join(methods)}`")


if __name__ == "__main__":
    main()

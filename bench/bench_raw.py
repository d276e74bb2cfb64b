#!/usr/bin/env python3
"""Raw-record pipeline benchmark (issue: core engine): records/s and GB/s of the loader against
plain memcpy of the same bytes (the ceiling), 1 and 2 threads; time to first batch; peak RSS
against the ring size on a small and a large dataset of the same records.

    /usr/bin/python3 bench/bench_raw.py [--records 4000] [--large 20000] [--out bench/out]
        [--page-cache warm|as-is]

Records are ~100 KB of random bytes (90-110 KB) packed with `stoker pack`, as an ImageFolder of
opaque files would be. Every figure comes from `build/stoker bench ... --json` runs made one
after the other in this process run, loader and ceiling side by side, so ratios are comparable
on a noisy machine. Before every run its .stk is evicted from the page cache and read back
sequentially (bench/pagecache.py; `--page-cache as-is` leaves the cache alone) and its
large-folio share printed. Prints a Markdown table and the commands that produced it.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STOKER = os.path.join(ROOT, "build", "stoker")
sys.path.insert(0, os.path.join(ROOT, "bench"))
import pagecache  # noqa: E402


def make_tree(path, n, seed=0):
    """n files of 90-110 KB random bytes in 10 class folders."""
    import random
    rnd = random.Random(seed)
    for c in range(10):
        os.makedirs(os.path.join(path, f"c{c}"), exist_ok=True)
    block = os.urandom(128 * 1024)
    for i in range(n):
        size = rnd.randint(90_000, 110_000)
        off = rnd.randint(0, len(block) - size)
        with open(os.path.join(path, f"c{i % 10}", f"{i:07d}.bin.jpg"), "wb") as f:
            f.write(block[off:off + size])


def run(cmd, data, page_cache):
    """One `stoker bench --json` run, data prepared (bench/pagecache.py) before it."""
    pagecache.prepare([data], page_cache)
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def spread(v):
    """'median (best)' of a list of ratios."""
    return f"{statistics.median(v):.2f} ({max(v):.2f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=4000)
    ap.add_argument("--large", type=int, default=20000, help="records of the large dataset")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3,
                    help="interleaved rounds (each runs every row once); medians and bests")
    ap.add_argument("--build", action="append", default=[], metavar="NAME=STOKER",
                    help="run every row with each of these binaries, interleaved (default: "
                    "this tree's build/stoker)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out"))
    pagecache.add_argument(ap)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    sets = {}
    for name, n in (("small", a.records), ("large", a.large)):
        data = os.path.join(a.out, f"raw_{n}.stk")
        if not os.path.exists(data):
            tree = os.path.join(a.out, f"raw_tree_{n}")
            shutil.rmtree(tree, ignore_errors=True)
            make_tree(tree, n)
            subprocess.run([STOKER, "pack", "--quiet", "--force", tree,
                            data], check=True, stdout=subprocess.DEVNULL)
            shutil.rmtree(tree)
        sets[name] = data
    if a.page_cache == "as-is":  # the old behaviour: one read of each file at the start
        for data in sets.values():
            with open(data, "rb") as f:
                while f.read(1 << 24):
                    pass
    builds = [b.split("=", 1) for b in a.build] or [("cur", STOKER)]
    rows = []  # (build, dataset name, threads, command, data)
    for extra in ([], ["--no-verify"]):
        for threads in (1, 2):
            for bname, exe in builds:
                cmd = [exe, "bench", sets["small"], "--threads", str(threads), "--epochs",
                       str(a.epochs), "--batch-size", str(a.batch_size), "--shuffle",
                       "--ceiling", "--json"] + extra
                rows.append((bname, "small" + (" no-verify" if extra else ""), threads, cmd,
                             sets["small"]))
    for bname, exe in builds:
        cmd = [exe, "bench", sets["large"], "--threads", "2", "--epochs", "1",
               "--batch-size", str(a.batch_size), "--shuffle", "--json"]
        rows.append((bname, "large", 2, cmd, sets["large"]))
    got = [[] for _ in rows]
    for r in range(a.repeat):
        for i, (_, _, _, cmd, data) in enumerate(rows):
            got[i].append(run(cmd, data, a.page_cache))
        print(f"round {r + 1}/{a.repeat} done", file=sys.stderr, flush=True)
    print(f"page cache: {a.page_cache}; {a.repeat} interleaved rounds; rates are the median run's "
          "(by loader/memcpy), ratios median (best) over the rounds\n")
    print("| build | dataset | threads | loader records/s | loader GB/s | memcpy records/s "
          "| memcpy GB/s | loader/memcpy | loader/memcpy per CPU s | first batch ms | ring MiB "
          "| peak RSS MiB (max) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (bname, name, threads, _, data), runs in zip(rows, got):
        runs = sorted(runs, key=lambda d: d.get("ratio_to_ceiling", d["samples_per_s"]))
        d = runs[len(runs) // 2]
        c = d.get("ceiling")
        size_gb = os.path.getsize(data) / 1e9
        print(f"| {bname} | {name} ({size_gb:.1f} GB) | {threads} | {d['samples_per_s']:.0f} | "
              f"{d['bytes_per_s'] / 1e9:.2f} | "
              + (f"{c['samples_per_s']:.0f} | {c['bytes_per_s'] / 1e9:.2f} | "
                 f"{spread([x['ratio_to_ceiling'] for x in runs])} | "
                 f"{spread([x['cpu_ratio_to_ceiling'] for x in runs])}" if c
                 else "- | - | - | -")
              + f" | {d['first_batch_ms']:.1f} | {d['ring_mib']:.1f} | "
              f"{max(x['peak_rss_mib'] for x in runs):.1f} |")
    print(f"\ncommands (page cache {a.page_cache}):")
    print("    /usr/bin/python3 bench/bench_raw.py " + " ".join(sys.argv[1:]))
    for bname, _, _, cmd, _ in rows:
        print(f"    {bname}: stoker {' '.join(cmd[1:])}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Raw-record pipeline benchmark (issue: core engine): records/s and GB/s of the loader against
plain memcpy of the same bytes (the ceiling), 1 and 2 threads; time to first batch; peak RSS
against the ring size on a small and a large dataset of the same records.

    /usr/bin/python3 bench/bench_raw.py [--records 4000] [--large 20000] [--out bench/out]

Records are ~100 KB of random bytes (90-110 KB) packed with `stoker pack`, as an ImageFolder of
opaque files would be. Every figure comes from `build/stoker bench ... --json` runs made one
after the other in this process run, loader and ceiling side by side, so ratios are comparable
on a noisy machine. Prints a Markdown table and the commands that produced it.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STOKER = os.path.join(ROOT, "build", "stoker")


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


def run(cmd, repeat):
    """Median run (by loader/ceiling ratio when there is a ceiling, else by samples/s)."""
    print("$", " ".join(cmd), file=sys.stderr)
    runs = [json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            for _ in range(repeat)]
    runs.sort(key=lambda d: d.get("ratio_to_ceiling", d["samples_per_s"]))
    return runs[len(runs) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=4000)
    ap.add_argument("--large", type=int, default=20000, help="records of the large dataset")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3, help="runs per row; the median is kept")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out"))
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
    # Warm the page cache so both sides read from memory.
    for data in sets.values():
        with open(data, "rb") as f:
            while f.read(1 << 24):
                pass
    rows = []
    for extra in ([], ["--no-verify"]):
        for threads in (1, 2):
            cmd = [STOKER, "bench", sets["small"], "--threads", str(threads), "--epochs",
                   str(a.epochs), "--batch-size", str(a.batch_size), "--shuffle", "--ceiling",
                   "--json"] + extra
            rows.append((threads, "small" + (" no-verify" if extra else ""),
                         run(cmd, a.repeat), " ".join(cmd[1:])))
    for threads in (2,):
        cmd = [STOKER, "bench", sets["large"], "--threads", str(threads), "--epochs", "1",
               "--batch-size", str(a.batch_size), "--shuffle", "--json"]
        rows.append((threads, "large", run(cmd, a.repeat), " ".join(cmd[1:])))
    print("| dataset | threads | loader records/s | loader GB/s | memcpy records/s | memcpy GB/s "
          "| loader/memcpy | first batch ms | ring MiB | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for threads, name, d, _ in rows:
        c = d.get("ceiling")
        size_gb = os.path.getsize(sets[name.split()[0]]) / 1e9
        print(f"| {name} ({size_gb:.1f} GB) | {threads} | {d['samples_per_s']:.0f} | "
              f"{d['bytes_per_s'] / 1e9:.2f} | "
              + (f"{c['samples_per_s']:.0f} | {c['bytes_per_s'] / 1e9:.2f} | "
                 f"{d['ratio_to_ceiling']:.2f}" if c else "- | - | -")
              + f" | {d['first_batch_ms']:.1f} | {d['ring_mib']:.1f} | {d['peak_rss_mib']:.1f} |")
    print("\ncommands:")
    for _, _, _, cmd in rows:
        print(f"    stoker {cmd}")


if __name__ == "__main__":
    main()

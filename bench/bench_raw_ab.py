#!/usr/bin/env python3
"""Raw records against memcpy, shards packed by two builds (issue 15): the same ~100 KB records
(bench/bench_raw.py's generator) packed by BASE's `stoker pack` and by the current one, then
`stoker bench --ceiling` runs of the current build on each, interleaved A B A B, at each thread
count and prefetch depth. Reports the loader/memcpy ratio by wall clock and per CPU second
(`cpu_ratio_to_ceiling`, which a shared machine disturbs less), peak RSS against the ring, and
how much of each shard the page cache holds in folios of 64 KiB or more (/proc/kpageflags, root
only), since that is what the writer's change acts on. Before every run its shard is evicted from
the page cache and read back sequentially (bench/pagecache.py), so both shards start as a dataset
read from disk does; `--page-cache as-is` leaves the cache as the writer left it (the old
behaviour, the one where the writer's folio sizes show).

    /usr/bin/python3 bench/bench_raw_ab.py --base 51d2558 [--records 4000] [--rounds 5]
        [--threads 1,2] [--prefetch 4,1] [--large 0] [--work DIR] [--page-cache warm|as-is]

--large N adds an N-record dataset read once per build (peak RSS against the ring).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import pagecache  # noqa: E402
from pagecache import large_folio_share  # noqa: E402


def sh(cmd, **kw):
    print("$", " ".join(cmd), file=sys.stderr)
    return subprocess.run(cmd, check=True, **kw)


def bench(stoker, data, threads, prefetch, epochs, ceiling=True):
    cmd = [stoker, "bench", data, "--threads", str(threads), "--prefetch", str(prefetch),
           "--epochs", str(epochs), "--batch-size", "64", "--shuffle", "--json", "--quiet"]
    if ceiling:
        cmd.append("--ceiling")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out), " ".join(["stoker"] + cmd[1:])


def mm(v, fmt="%.2f"):
    return f"{fmt % statistics.median(v)} [{fmt % min(v)}-{fmt % max(v)}]"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="git revision whose writer packs shard A")
    ap.add_argument("--records", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--prefetch", default="4,1")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--large", type=int, default=0)
    ap.add_argument("--work", default=None)
    pagecache.add_argument(ap)
    a = ap.parse_args()
    import bench_raw
    work = a.work or tempfile.mkdtemp(prefix="stk-rawab-")
    os.makedirs(work, exist_ok=True)
    new = os.path.join(ROOT, "build", "stoker")
    where = os.path.join(work, "base")
    if not os.path.exists(os.path.join(where, "build", "stoker")):
        sh(["git", "-C", ROOT, "worktree", "add", "--detach", "-f", where, a.base],
           stdout=subprocess.DEVNULL)
        sh(["make", "-C", where, "-j2", "cli"], stdout=subprocess.DEVNULL)
    base = os.path.join(where, "build", "stoker")
    sets = {}
    for n in [a.records] + ([a.large] if a.large else []):
        tree = os.path.join(work, f"tree_{n}")
        if not os.path.exists(tree):
            bench_raw.make_tree(tree, n)
        for tag, exe in (("base", base), ("new", new)):
            out = os.path.join(work, f"raw_{n}_{tag}.stk")
            sh([exe, "pack", "--quiet", "--force", tree, out], stdout=subprocess.DEVNULL)
            sets[(n, tag)] = out
        shutil.rmtree(tree)
    for (n, tag), path in sets.items():
        share = large_folio_share(path)
        print(f"{os.path.basename(path)}: {os.path.getsize(path) / 1e9:.2f} GB, "
              f"{'?' if share is None else '%.2f' % share} of its pages in folios >= 64 KiB",
              file=sys.stderr)
    rows, cmds = {}, set()
    for r in range(a.rounds):
        for t in a.threads.split(","):
            for p in a.prefetch.split(","):
                for tag in ("base", "new"):
                    pagecache.prepare([sets[(a.records, tag)]], a.page_cache)
                    d, cmd = bench(new, sets[(a.records, tag)], t, p, a.epochs)
                    cmds.add(cmd.replace(sets[(a.records, tag)], f"raw_{a.records}_{{base,new}}.stk"))
                    rows.setdefault((t, p, tag), []).append(d)
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    print(f"page cache: {a.page_cache}\n")
    print("| threads | prefetch | packed by | loader GB/s | memcpy GB/s | loader/memcpy (wall) | "
          "loader/memcpy (per CPU s) | ring MiB | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (t, p, tag), v in rows.items():
        print(f"| {t} | {p} | {tag} | {mm([d['bytes_per_s'] / 1e9 for d in v])} | "
              f"{mm([d['ceiling']['bytes_per_s'] / 1e9 for d in v])} | "
              f"{mm([d['ratio_to_ceiling'] for d in v])} | "
              f"{mm([d['cpu_ratio_to_ceiling'] for d in v])} | {v[0]['ring_mib']:.1f} | "
              f"{max(d['peak_rss_mib'] for d in v):.1f} |")
    if a.large:
        print("\n| dataset | packed by | threads | loader GB/s | peak RSS MiB | ring MiB |")
        print("|---|---|---|---|---|---|")
        for tag in ("base", "new"):
            path = sets[(a.large, tag)]
            if a.page_cache == "as-is":  # the old behaviour: one read into the page cache
                with open(path, "rb") as fh:
                    while fh.read(1 << 24):
                        pass
            else:
                pagecache.prepare([path], a.page_cache)
            d, cmd = bench(new, path, 2, 4, 1, ceiling=False)
            cmds.add(cmd.replace(path, f"raw_{a.large}_{{base,new}}.stk"))
            print(f"| {os.path.getsize(path) / 1e9:.1f} GB, one epoch | {tag} | 2 | "
                  f"{d['bytes_per_s'] / 1e9:.2f} | {d['peak_rss_mib']:.1f} | {d['ring_mib']:.1f} |")
    print("\n```\n/usr/bin/python3 bench/bench_raw_ab.py " + " ".join(sys.argv[1:]))
    for c in sorted(cmds):
        print(c)
    print("```")
    if not a.work:
        sh(["git", "-C", ROOT, "worktree", "remove", "--force", where])
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

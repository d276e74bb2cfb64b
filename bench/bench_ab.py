#!/usr/bin/env python3
"""A/B throughput of two builds of stoker on the same data, interleaved in one process run
(issue 11: a restructuring must stay within noise of the commit before it).

    /usr/bin/python3 bench/bench_ab.py --base 53de931 [--rounds 5] [--images 1500]
        [--records 3000] [--threads 1,2] [--profile small|imagenet|grain] [--ceiling]
        [--workloads images,raw] [--epochs 1] [--batch-size 64] [--exact] [--base-stoker PATH]
        [--pause 4]

Builds BASE's CLI in a temporary git worktree (`make cli`), packs the data once with the
current build (both builds read version-1 shards), then alternates `stoker bench ... --json`
runs of the two builds, A B A B ..., for each workload: imagenet-train on generated photo-like
JPEGs (bench/gen_images.py) and raw ~100 KB records (bench/bench_raw.py's generator). Prints a
Markdown table of medians with [min-max] and the new/base ratio of the medians, and the commands.
--profile picks gen_images.py's image set; --ceiling adds each run's own ceiling (`stoker bench
--ceiling`: full decode, or memcpy, of the same records on the same threads, measured right
after it) and the table then also gives each build's ratio to it, median [min-max]. --epochs:
epochs per imagenet-train run (default 1: every read a first read; more shows the later epochs,
where a strict decode stops after the window of a record checked before). Where a build's
`stoker bench --json` reports its first epoch and later epochs apart (issue 29), a second table
gives each part's samples/s and ratio to the same part of its ceiling. --batch-size and --exact
are passed to every imagenet-train run (default: `stoker bench`'s batch of 256, the fast decode);
"ring MiB" is the run's peak RSS less its RSS before the loader: the ring memory it wrote, as the
first epoch writes each slot it uses for the first time (issue 29). --pause S sleeps S seconds
before each run: on a VM that hands freed memory back to its host about 2 s after it is freed
(free page reporting), a run started at once gets the memory the run before it freed at its exit
already backed, cheap to touch, so whichever build frees more at exit speeds up the other one's
first epoch; a pause of 4 s or more gives every run fresh memory (issue 29, first5).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))


def sh(cmd, **kw):
    print("$", " ".join(cmd), file=sys.stderr)
    return subprocess.run(cmd, check=True, **kw)


def build_base(rev, where):
    sh(["git", "-C", ROOT, "worktree", "add", "--detach", "-f", where, rev],
       stdout=subprocess.DEVNULL)
    sh(["make", "-C", where, "-j2", "cli"], stdout=subprocess.DEVNULL)
    return os.path.join(where, "build", "stoker")


def warm(path):
    """Read the file once, so that the first epoch reads from the page cache, not the disk."""
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def bench(stoker, data, recipe, threads, epochs, ceiling=False, extra=()):
    warm(data)
    cmd = [stoker, "bench", data, "--recipe", recipe, "--threads", str(threads), "--epochs",
           str(epochs), "--json", "--quiet"] + (["--ceiling"] if ceiling else []) + list(extra)
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    parts = {}
    for key in ("first_epoch", "later_epochs"):
        if out.get(key):
            parts[key] = (out[key]["samples_per_s"], out.get(f"{key}_ratio_to_ceiling"),
                          out.get(f"cpu_{key}_ratio_to_ceiling"))
    parts["ring_mib"] = out["peak_rss_mib"] - out["rss_before_mib"]
    return out["samples_per_s"], out.get("ratio_to_ceiling"), " ".join(cmd[1:]), parts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="git revision to compare against")
    ap.add_argument("--base-stoker", default=None,
                    help="BASE's stoker CLI, already built (default: build it in a worktree)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--images", type=int, default=1500)
    ap.add_argument("--records", type=int, default=3000)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--work", default=None, help="keep data here (default: a temp dir)")
    ap.add_argument("--profile", default="small", choices=["small", "imagenet", "grain"])
    ap.add_argument("--ceiling", action="store_true", help="also each run's ratio to its ceiling")
    ap.add_argument("--workloads", default="images,raw")
    ap.add_argument("--epochs", type=int, default=1, help="epochs per imagenet-train run")
    ap.add_argument("--batch-size", type=int, default=0, help="imagenet-train runs' batch size")
    ap.add_argument("--exact", action="store_true", help="imagenet-train runs decode exactly")
    ap.add_argument("--pause", type=float, default=0.0, help="seconds to sleep before each run")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="stk-ab-")
    os.makedirs(work, exist_ok=True)
    new = os.path.join(ROOT, "build", "stoker")
    base = a.base_stoker or build_base(a.base, os.path.join(work, "base"))
    imgs, raw = os.path.join(work, f"imgs_{a.profile}"), os.path.join(work, "raw")
    workloads = a.workloads.split(",")
    if "images" in workloads and not os.path.exists(imgs + ".stk"):
        sh([sys.executable, os.path.join(ROOT, "bench", "gen_images.py"), imgs, "--classes",
            "10", "--per-class", str(max(1, a.images // 10)), "--profile", a.profile],
           stdout=subprocess.DEVNULL)
        sh([new, "pack", imgs, imgs + ".stk", "--quiet"])
    if "raw" in workloads and not os.path.exists(raw + ".stk"):
        import bench_raw
        bench_raw.make_tree(raw, a.records)
        sh([new, "pack", raw, raw + ".stk", "--quiet"])
    rows = []
    jobs = [("imagenet-train", imgs + ".stk", a.epochs), ("raw", raw + ".stk", 3)]
    for recipe, data, epochs in [j for j in jobs if ("images" if j[0] != "raw" else "raw")
                                 in workloads]:
        for t in [int(x) for x in a.threads.split(",")]:
            res = {"base": [], "new": []}
            rat = {"base": [], "new": []}
            parts = {"base": {}, "new": {}}
            ring = {}
            cmd = ""
            for _ in range(a.rounds):
                for name, exe in (("base", base), ("new", new)):
                    extra = ([] if recipe == "raw" else
                             (["--batch-size", str(a.batch_size)] if a.batch_size else [])
                             + (["--exact"] if a.exact else []))
                    time.sleep(a.pause)
                    r, q, cmd, pt = bench(exe, data, recipe, t, epochs, a.ceiling, extra)
                    ring.setdefault(name, []).append(pt.pop("ring_mib"))
                    res[name].append(r)
                    if q is not None:
                        rat[name].append(q)
                    for key, v in pt.items():
                        parts[name].setdefault(key, []).append(v)
            mb, mn = statistics.median(res["base"]), statistics.median(res["new"])
            rows.append((recipe, t, res, mb, mn, cmd, rat, parts, ring))
    print(f"\nbase {a.base} vs new (working tree), {a.rounds} interleaved rounds each, "
          f"images: gen_images.py --profile {a.profile}\n")

    def spread(v, f):
        return f"{statistics.median(v):{f}} [{min(v):{f}}-{max(v):{f}}]" if v else "-"

    print("| workload | threads | base samples/s | new samples/s | new / base"
          + (" | base / ceiling | new / ceiling" if a.ceiling else "")
          + " | ring MiB written, base / new |")
    print("|---|---|---|---|---|" + ("---|---|" if a.ceiling else "") + "---|")
    for recipe, t, res, mb, mn, _, rat, _, ring in rows:
        line = (f"| {recipe} | {t} | {spread(res['base'], '.0f')} | {spread(res['new'], '.0f')} "
                f"| {mn / mb:.3f} |")
        if a.ceiling:
            line += f" {spread(rat['base'], '.3f')} | {spread(rat['new'], '.3f')} |"
        line += f" {spread(ring['base'], '.0f')} / {spread(ring['new'], '.0f')} |"
        print(line)
    part_rows = [(recipe, t, name, key, v) for recipe, t, _, _, _, _, _, parts, _ in rows
                 for name in ("base", "new") for key, v in parts[name].items()]
    if part_rows:
        print("\nfirst epoch and later epochs apart (builds that report them):\n")
        print("| workload | threads | build | part | samples/s | vs ceiling | per CPU s |")
        print("|---|---|---|---|---|---|---|")
        for recipe, t, name, key, v in part_rows:
            ratios = [x[1] for x in v if x[1] is not None]
            cpus = [x[2] for x in v if x[2] is not None]
            print(f"| {recipe} | {t} | {name} | {key.replace('_', ' ')} | "
                  f"{spread([x[0] for x in v], '.0f')} | {spread(ratios, '.3f')} | "
                  f"{spread(cpus, '.3f')} |")
    print("\ncommands (each build): " + "; ".join(sorted({r[5] for r in rows})))
    print(f"load average {open('/proc/loadavg').read().split()[0]} at the end")
    if not a.base_stoker:
        sh(["git", "-C", ROOT, "worktree", "remove", "--force", os.path.join(work, "base")])
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

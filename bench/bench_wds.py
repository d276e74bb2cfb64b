#!/usr/bin/env python3
"""WebDataset tar shards read directly by stoker (format "wds"), against the same records packed
to .stk and against webdataset-style tarfile iteration in a PyTorch DataLoader.

1. imagenet-train: stoker.Loader over the tar shards vs over the .stk the same shards pack to
   (same JPEGs, same recipe, transform_field="jpg", 2 threads); goal >= 0.9x.
2. raw records: `stoker bench` over both (no transform); goal >= 0.8x.
3. webdataset-style: an IterableDataset iterating the shards with the tarfile module (shards
   split over the DataLoader's workers), PIL decode + the torchvision imagenet-train transforms,
   num_workers=2, batch 64; ratio of stoker's tar rate to it.
4. index: build time per GB (first open, no cache) and with the cache, and memory per million
   records, on a synthetic tar of many small members.

Runs are interleaved (tar, stk, tar, stk, ...) and medians of --repeat kept. Before every raw
run its files (the tar shards, or the .stk) are evicted from the page cache and read back
sequentially (bench/pagecache.py; `--page-cache as-is` leaves the cache alone) and their
large-folio shares printed. `--raw-only` runs the raw rows alone (best, median and per CPU
second). Data is generated under --out (bench/gen_images.py for the JPEGs); nothing is
downloaded.
"""
import argparse
import io
import json
import os
import resource
import subprocess
import sys
import tarfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STOKER = os.path.join(ROOT, "build", "stoker")
ENV = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "build", "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import pagecache  # noqa: E402


def write_shards(tree, out_dir, n_shards):
    """ImageFolder tree -> n_shards WebDataset tars of key.jpg + key.cls (classes sorted)."""
    classes = sorted(d for d in os.listdir(tree) if os.path.isdir(os.path.join(tree, d)))
    files = [(c, os.path.join(tree, cls, f)) for c, cls in enumerate(classes)
             for f in sorted(os.listdir(os.path.join(tree, cls)))]
    os.makedirs(out_dir, exist_ok=True)
    per = (len(files) + n_shards - 1) // n_shards
    paths = []
    for s in range(n_shards):
        p = os.path.join(out_dir, f"train-{s:06d}.tar")
        with tarfile.open(p, "w", format=tarfile.USTAR_FORMAT) as tf:
            for i, (c, f) in enumerate(files[s * per:(s + 1) * per]):
                key = f"s{s * per + i:07d}"
                for ext, data in (("jpg", open(f, "rb").read()), ("cls", str(c).encode())):
                    ti = tarfile.TarInfo(f"{key}.{ext}")
                    ti.size = len(data)
                    tf.addfile(ti, io.BytesIO(data))
        paths.append(p)
    return paths


STOKER_LOOP = r"""
import sys, time, json
import torch
import stoker
data, epochs = sys.argv[1], int(sys.argv[2])
data = data.split(",") if "," in data else data
t0 = time.perf_counter()
loader = stoker.Loader(data, batch_size=64, shuffle=True, num_workers=2,
                       transforms="imagenet-train", transform_field="jpg")
n = 0
for e in range(epochs):
    for b in loader:
        n += len(b["index"])
print(json.dumps({"samples_per_s": n / (time.perf_counter() - t0)}))
"""

TARFILE_LOOP = r"""
import sys, time, json, tarfile, io
import torch
from PIL import Image
from torchvision import transforms as T
shards, epochs = sys.argv[1].split(","), int(sys.argv[2])
tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])

class Shards(torch.utils.data.IterableDataset):
    # webdataset's pipeline: shards split over workers, members grouped by key in order
    def __iter__(self):
        wi = torch.utils.data.get_worker_info()
        mine = shards[wi.id::wi.num_workers] if wi else shards
        for p in mine:
            with tarfile.open(p, "r") as t:
                key, sample = None, {}
                for m in t:
                    if not m.isfile():
                        continue
                    k, ext = m.name.split(".", 1)
                    if k != key and sample:
                        yield self.decode(sample)
                        sample = {}
                    key = k
                    sample[ext] = t.extractfile(m).read()
                if sample:
                    yield self.decode(sample)

    def decode(self, s):
        img = Image.open(io.BytesIO(s["jpg"])).convert("RGB")
        return tf(img), int(s["cls"])

t0 = time.perf_counter()
dl = torch.utils.data.DataLoader(Shards(), batch_size=64, num_workers=2, persistent_workers=True,
                                 prefetch_factor=4)
n = 0
for e in range(epochs):
    for x, y in dl:
        n += len(y)
print(json.dumps({"samples_per_s": n / (time.perf_counter() - t0)}))
"""

INDEX_PROBE = r"""
import sys, time, json, os
import stoker
def rss(key="VmRSS:"):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets VmHWM to the current RSS
r0 = rss()
t0 = time.perf_counter()
ds = stoker.Dataset(sys.argv[1], format="wds")
dt = time.perf_counter() - t0
r1 = rss()
peak = rss("VmHWM:")
print(json.dumps({"seconds": dt, "records": len(ds), "rss_delta": r1 - r0,
                  "peak_delta": peak - r0}))
"""


CPU = {}  # CPU seconds (user + sys) of the last run_json child, by the key it was given


def run_json(args, key=None):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(args, check=True, capture_output=True, text=True, env=ENV).stdout
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if key:
        CPU.setdefault(key, []).append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
    return json.loads(out.strip().splitlines()[-1])


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def synthetic_tar(path, samples):
    """samples x (key.cls + key.txt), 16-byte members: an index-heavy shard."""
    if os.path.exists(path):
        return
    hdr = tarfile.TarInfo("x")
    with open(path + ".part", "wb") as f:
        for i in range(samples):
            for ext, data in (("cls", b"%d" % (i % 1000)), ("txt", b"sample %08d text" % i)):
                hdr.name = f"shard/s{i:09d}.{ext}"
                hdr.size = len(data)
                f.write(hdr.tobuf(tarfile.USTAR_FORMAT))
                f.write(data + b"\0" * (-len(data) % 512))
        f.write(b"\0" * 1024)
    os.rename(path + ".part", path)


def raw_run(data, epochs, key):
    return run_json([STOKER, "bench", data, "--threads", "2", "--epochs", str(epochs),
                     "--batch-size", "64", "--shuffle", "--json", "--quiet"], key)


def raw_only(a, tars, brace, packed):
    """The raw rows alone: --repeat interleaved rounds, best and median by wall clock and per
    CPU second of the stoker process (its own getrusage, as `stoker bench` reports it)."""
    wall, cpu = {"raw_tar": [], "raw_stk": []}, {"raw_tar": [], "raw_stk": []}
    for r in range(a.repeat):
        for key, data, files in (("raw_tar", brace, tars), ("raw_stk", packed, [packed])):
            pagecache.prepare(files, a.page_cache)
            d = raw_run(data, a.raw_epochs, key)
            wall[key].append(d["samples_per_s"])
            cpu[key].append(d["samples"] / d["cpu_s"])
        print(f"round {r + 1}/{a.repeat}: tar {wall['raw_tar'][-1]:.0f}, "
              f".stk {wall['raw_stk'][-1]:.0f} samples/s", file=sys.stderr, flush=True)
    print(f"page cache: {a.page_cache}; {a.repeat} interleaved rounds, `stoker bench` 2 threads, "
          "raw records; best and median, tar / .stk of the same statistic\n")
    print("| statistic | tar (wds) | .stk | tar / .stk |")
    print("|---|---|---|---|")
    for what, v in (("samples/s (wall clock)", wall), ("samples per CPU second", cpu)):
        for stat, f in (("best", max), ("median", median)):
            t, s = f(v["raw_tar"]), f(v["raw_stk"])
            print(f"| {what}, {stat} | {t:.0f} | {s:.0f} | **{t / s:.2f}x** |")
    print(f"\ncommand: /usr/bin/python3 bench/bench_wds.py --images {a.images} --shards "
          f"{a.shards} --repeat {a.repeat} --raw-epochs {a.raw_epochs} --raw-only "
          f"--page-cache {a.page_cache}\n  (each run: stoker bench DATA --threads 2 --epochs "
          f"{a.raw_epochs} --batch-size 64 --shuffle --json --quiet)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=500)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--raw-epochs", type=int, default=100)
    ap.add_argument("--index-samples", type=int, default=200000)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out"))
    ap.add_argument("--raw-only", action="store_true",
                    help="only the raw rows (tar vs .stk through `stoker bench`)")
    pagecache.add_argument(ap)
    a = ap.parse_args()
    tree = os.path.join(a.out, f"jpeg_small_{a.images}")
    if not os.path.isdir(tree):
        subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gen_images.py"), tree,
                        "--classes", "10", "--per-class", str(a.images // 10), "--profile",
                        "small"], check=True)
    wds_dir = os.path.join(a.out, f"wds_{a.images}")
    tars = sorted(os.path.join(wds_dir, f) for f in os.listdir(wds_dir)
                  if f.endswith(".tar")) if os.path.isdir(wds_dir) else []
    if len(tars) != a.shards:
        tars = write_shards(tree, wds_dir, a.shards)
    tar_arg = ",".join(tars)
    brace = os.path.join(wds_dir, "train-{%06d..%06d}.tar" % (0, a.shards - 1))
    packed = wds_dir + ".stk"
    if not os.path.exists(packed):
        subprocess.run([STOKER, "pack", "--quiet", brace, packed], check=True)

    if a.raw_only:
        return raw_only(a, tars, brace, packed)
    rate = {"tar": [], "stk": [], "tarfile": [], "raw_tar": [], "raw_stk": []}
    for _ in range(a.repeat):
        rate["tar"].append(run_json([sys.executable, "-c", STOKER_LOOP, tar_arg,
                                     str(a.epochs)], "tar")["samples_per_s"])
        rate["stk"].append(run_json([sys.executable, "-c", STOKER_LOOP, packed,
                                     str(a.epochs)], "stk")["samples_per_s"])
        rate["tarfile"].append(run_json([sys.executable, "-c", TARFILE_LOOP, tar_arg,
                                         str(a.epochs)])["samples_per_s"])
        for key, data, files in (("raw_tar", brace, tars), ("raw_stk", packed, [packed])):
            pagecache.prepare(files, a.page_cache)
            rate[key].append(raw_run(data, a.raw_epochs, key)["samples_per_s"])
    m = {k: median(v) for k, v in rate.items()}
    print(f"{a.images} JPEGs in {a.shards} shards, {a.repeat} interleaved runs, medians "
          "[min-max] samples/s\n")
    print("| case | tar (wds) | .stk | other | tar / .stk | tar / other |")
    print("|---|---|---|---|---|---|")
    rng = lambda k: f"{m[k]:.0f} [{min(rate[k]):.0f}-{max(rate[k]):.0f}]"
    print(f"| imagenet-train, stoker.Loader 2 threads | {rng('tar')} | {rng('stk')} | - "
          f"| **{m['tar'] / m['stk']:.2f}x** | - |")
    print(f"| raw records, `stoker bench` 2 threads | {rng('raw_tar')} | {rng('raw_stk')} | - "
          f"| **{m['raw_tar'] / m['raw_stk']:.2f}x** | - |")
    cpu = {k: median(v) for k, v in CPU.items()}
    print(f"| CPU seconds per run (user + sys), imagenet-train | {cpu['tar']:.2f} | "
          f"{cpu['stk']:.2f} | - | **{cpu['stk'] / cpu['tar']:.2f}x** (samples per CPU-s) | - |")
    print(f"| CPU seconds per run (user + sys), raw | {cpu['raw_tar']:.2f} | {cpu['raw_stk']:.2f} "
          f"| - | **{cpu['raw_stk'] / cpu['raw_tar']:.2f}x** (samples per CPU-s) | - |")
    print(f"| imagenet-train vs tarfile + PIL + torchvision, DataLoader(num_workers=2) "
          f"| {rng('tar')} | - | {rng('tarfile')} | - | **{m['tar'] / m['tarfile']:.2f}x** |")

    # the index
    syn = os.path.join(a.out, f"wds_index_{a.index_samples}.tar")
    synthetic_tar(syn, a.index_samples)
    size = os.path.getsize(syn)
    cold, warm = [], []
    for _ in range(a.repeat):
        if os.path.exists(syn + ".stkidx"):
            os.unlink(syn + ".stkidx")
        cold.append(run_json([sys.executable, "-c", INDEX_PROBE, syn]))
        warm.append(run_json([sys.executable, "-c", INDEX_PROBE, syn]))
    c = sorted(cold, key=lambda r: r["seconds"])[len(cold) // 2]
    w = sorted(warm, key=lambda r: r["seconds"])[len(warm) // 2]
    per_m = 1e6 / c["records"]
    print(f"\nindex: {c['records']} samples ({2 * c['records']} members) in "
          f"{size / 1e9:.2f} GB, {a.repeat} runs, medians\n")
    print("| open | seconds | s per GB | records/s | RSS after open per 1M records | peak "
          "during open per 1M records |")
    print("|---|---|---|---|---|---|")
    for name, r in (("first (header scan, writes .stkidx)", c), ("cached (.stkidx)", w)):
        print(f"| {name} | {r['seconds']:.3f} | {r['seconds'] / (size / 1e9):.2f} | "
              f"{r['records'] / r['seconds']:.0f} | {r['rss_delta'] * per_m / 2**20:.0f} MiB | "
              f"{r['peak_delta'] * per_m / 2**20:.0f} MiB |")
    jt = subprocess.run(["du", "-b", *tars], capture_output=True, text=True).stdout.split()
    gb = sum(int(x) for x in jt[0::2]) / 1e9
    for t in tars:
        if os.path.exists(t + ".stkidx"):
            os.unlink(t + ".stkidx")
    j = run_json([sys.executable, "-c", INDEX_PROBE, tar_arg.split(",")[0]])
    print(f"\nJPEG shard (first of {a.shards}, {gb / a.shards * 1e3:.1f} MB, {j['records']} samples)"
          f": first open {j['seconds'] * 1e3:.1f} ms")
    print(f"\ncommand: /usr/bin/python3 bench/bench_wds.py --images {a.images} --shards "
          f"{a.shards} --epochs {a.epochs} --repeat {a.repeat} --raw-epochs {a.raw_epochs} "
          f"--index-samples {a.index_samples} --page-cache {a.page_cache}")


if __name__ == "__main__":
    main()

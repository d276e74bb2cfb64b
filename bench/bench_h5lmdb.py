#!/usr/bin/env python3
"""HDF5 and LMDB read directly by stoker, against the same JPEGs packed to .stk and against the
readers users have today (h5py / py-lmdb in a torch DataLoader with workers), same files, same
cores, one run.

    /usr/bin/python3 bench/bench_h5lmdb.py [--images 500] [--threads 2] [--repeat 3]

1. Generates ~N photo-like JPEGs (bench/gen_images.py --profile small) unless present, packs
   them to .stk (stoker.pack_image_folder), and writes the same records, in the same order, as
   an HDF5 file (dataset `image`: h5py vlen uint8, the usual way to store encoded images;
   `label`: int64), the same HDF5 with the vlen dataset chunked (64 rows a chunk, which stoker
   reads through libhdf5, serialised) and an LMDB environment (key %08d, value = the JPEGs).
2. stoker.Loader over each of them (and .stk with verify=False: HDF5 and LMDB have no
   checksums, while .stk checks each record's XXH3 on its first read in a process), shuffle, --threads workers, batch 64: imagenet-train
   (transform_field `image`, or `value` for LMDB) and raw records (no transform), over several
   epochs; the three formats are interleaved in each repeat, medians reported.
3. DataLoader(num_workers=--threads, persistent workers, shuffle) over a torch Dataset that opens
   the h5py file / py-lmdb environment lazily in each worker (the fork-safe recipe), PIL decode +
   torchvision's RandomResizedCrop(224) + flip + ToTensor + Normalize; raw: the bytes only.
Before every raw run (stoker's and the DataLoader's) its file is evicted from the page cache and
read back sequentially (bench/pagecache.py; `--page-cache as-is` leaves the cache alone) and its
large-folio share printed.
Prints one Markdown table of samples/s and ratios.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "build", "python"))
import stoker  # noqa: E402
sys.path.insert(0, os.path.join(ROOT, "bench"))
import pagecache  # noqa: E402

FORMATS = ("stk", "stk-nv", "hdf5", "lmdb", "hdf5-lib")
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def prepare(out, images):
    tree = os.path.join(out, f"jpeg_small_{images}")
    if not os.path.isdir(tree):
        subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gen_images.py"), tree,
                        "--classes", "5", "--per-class", str(images // 5), "--profile",
                        "small"], check=True)
    stk, h5, mdb, h5lib = tree + ".stk", tree + ".h5", tree + ".lmdb", tree + ".chunked.h5"
    if not os.path.exists(stk):
        stoker.pack_image_folder(tree, stk)
    ds = stoker.Dataset(stk)
    if not os.path.exists(h5):
        import h5py
        with h5py.File(h5 + ".tmp", "w") as f:
            img = f.create_dataset("image", (len(ds),), dtype=h5py.vlen_dtype(np.uint8))
            for i in range(len(ds)):
                img[i] = np.frombuffer(ds[i]["image"], np.uint8)
            f["label"] = np.array([ds[i]["label"] for i in range(len(ds))], np.int64)
        os.rename(h5 + ".tmp", h5)
    if not os.path.exists(h5lib):  # the same, chunked: stoker reads it through the library
        import h5py
        with h5py.File(h5lib + ".tmp", "w") as f:
            img = f.create_dataset("image", (len(ds),), dtype=h5py.vlen_dtype(np.uint8),
                                   chunks=(min(64, len(ds)),))
            for i in range(len(ds)):
                img[i] = np.frombuffer(ds[i]["image"], np.uint8)
            f["label"] = np.array([ds[i]["label"] for i in range(len(ds))], np.int64)
        os.rename(h5lib + ".tmp", h5lib)
    if not os.path.exists(mdb):
        import lmdb
        env = lmdb.open(mdb + ".tmp", map_size=1 << 32)
        with env.begin(write=True) as t:
            for i in range(len(ds)):
                t.put(b"%08d" % i, ds[i]["image"])
        env.close()
        os.rename(mdb + ".tmp", mdb)
    n = len(ds)
    ds.close()
    return n, {"stk": stk, "stk-nv": stk, "hdf5": h5, "lmdb": mdb, "hdf5-lib": h5lib}


def run_stoker(path, fmt, recipe, threads, epochs):
    kw = dict(shuffle=True, num_workers=threads, rank=0, world_size=1, format=fmt.split("-")[0],
              verify=fmt != "stk-nv")
    if recipe != "raw":
        kw.update(transforms=recipe, transform_field="value" if fmt == "lmdb" else "image")
    t0 = time.perf_counter()
    ld = stoker.Loader(path, 64, **kw)
    n = 0
    for _ in range(epochs):
        for b in ld:
            n += len(b["index"])
    ld.close()
    return n / (time.perf_counter() - t0)


class H5Images:
    def __init__(self, path, tf):
        self.path, self.tf, self.f = path, tf, None
        import h5py
        with h5py.File(path, "r") as f:
            self.n = len(f["label"])

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import h5py
        if self.f is None:  # opened in the worker, after fork
            self.f = h5py.File(self.path, "r")
        data = self.f["image"][i].tobytes()
        return self.tf(data), int(self.f["label"][i])


class LmdbImages:
    def __init__(self, path, tf):
        self.path, self.tf, self.env = path, tf, None
        import lmdb
        env = lmdb.open(path, readonly=True, lock=False)
        self.n = env.stat()["entries"]
        env.close()

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import lmdb
        if self.env is None:
            self.env = lmdb.open(self.path, readonly=True, lock=False, readahead=False)
        with self.env.begin() as t:
            data = t.get(b"%08d" % i)
        return self.tf(data), 0


def run_torch(path, fmt, recipe, workers, epochs):
    import io
    import torch
    from PIL import Image
    from torchvision import transforms as T
    torch.set_num_threads(1)
    if recipe == "raw":
        def tf(b):
            return torch.frombuffer(bytearray(b), dtype=torch.uint8)
        collate = list
    else:
        pipe = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                          T.Normalize(MEAN, STD)])

        def tf(b):
            return pipe(Image.open(io.BytesIO(b)).convert("RGB"))
        collate = None
    ds = (H5Images if fmt == "hdf5" else LmdbImages)(path, tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, num_workers=workers,
                                     persistent_workers=True, prefetch_factor=4,
                                     collate_fn=collate)
    t0 = time.perf_counter()
    n = 0
    for _ in range(epochs):
        for b in dl:
            n += len(b) if recipe == "raw" else b[0].shape[0]
    sps = n / (time.perf_counter() - t0)
    del dl
    return sps


def index_cost(out, n=1_000_000):
    """Open time and index memory for n keys (LMDB, 8-byte keys) and n vlen rows (HDF5)."""
    import h5py
    import lmdb
    mdb, h5 = os.path.join(out, f"keys_{n}.lmdb"), os.path.join(out, f"vlen_{n}.h5")
    if not os.path.exists(mdb):
        env = lmdb.open(mdb, map_size=1 << 31)
        with env.begin(write=True) as t:
            for i in range(n):
                t.put(b"%08d" % i, b"v" * 16)
        env.close()
    if not os.path.exists(h5):
        with h5py.File(h5, "w") as f:
            d = f.create_dataset("image", (n,), dtype=h5py.vlen_dtype(np.uint8))
            a = np.empty(n, dtype=object)
            for i in range(n):
                a[i] = np.full(16 + i % 32, i % 251, np.uint8)
            d[:] = a
            f["label"] = np.arange(n, dtype=np.int64)
    for path, what in ((mdb, "LMDB keys"), (h5, "HDF5 vlen rows")):
        stoker.Dataset(path).close()  # warm the page cache
        t0 = time.perf_counter()
        ds = stoker.Dataset(path)
        print(f"{what}: {len(ds)} opened in {time.perf_counter() - t0:.2f} s "
              f"({ds.metadata if what.startswith('HDF5') else 'key index'})")
        ds.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=500)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3, help="imagenet-train epochs per run")
    ap.add_argument("--raw-epochs", type=int, default=20)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out"))
    ap.add_argument("--index-cost", action="store_true",
                    help="only: open time for 1M LMDB keys and 1M HDF5 vlen rows")
    pagecache.add_argument(ap)
    a = ap.parse_args()
    if a.index_cost:
        return index_cost(a.out)
    n, paths = prepare(a.out, a.images)
    sizes = {k: sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(p) for f in fs)
             if os.path.isdir(p) else os.path.getsize(p) for k, p in paths.items()}
    print(f"{n} JPEGs; file sizes: " + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in
                                                 sizes.items()) +
          f"; {a.threads} threads/workers, {os.cpu_count()} CPUs; page cache {a.page_cache}",
          flush=True)
    res = {}
    for fmt in FORMATS:  # warm the page cache
        run_stoker(paths[fmt], fmt, "raw", a.threads, 1)
    for recipe, epochs in (("imagenet-train", a.epochs), ("raw", a.raw_epochs)):
        for r in range(a.repeat):
            for fmt in FORMATS:
                if recipe == "raw":
                    pagecache.prepare([paths[fmt]], a.page_cache)
                res.setdefault((recipe, fmt), []).append(
                    run_stoker(paths[fmt], fmt, recipe, a.threads, epochs))
            print(f"  {recipe} run {r + 1}: " + ", ".join(
                f"{f} {res[(recipe, f)][-1]:.0f}" for f in FORMATS), flush=True)
        for fmt in ("hdf5", "lmdb"):
            if recipe == "raw":
                pagecache.prepare([paths[fmt]], a.page_cache)
            res[(recipe, "torch-" + fmt)] = [run_torch(paths[fmt], fmt, recipe, a.threads,
                                                       max(2, epochs // 4))]
            print(f"  {recipe} DataLoader {fmt}: {res[(recipe, 'torch-' + fmt)][0]:.0f}",
                  flush=True)
    med = {k: statistics.median(v) for k, v in res.items()}
    print("\n| recipe | reader | samples/s (median of runs) | vs stoker .stk | stoker vs it |")
    print("|---|---|---|---|---|")
    for recipe in ("imagenet-train", "raw"):
        base = med[(recipe, "stk")]
        for fmt in FORMATS + ("torch-hdf5", "torch-lmdb"):
            v = med[(recipe, fmt)]
            name = {"stk": "stoker, .stk", "stk-nv": "stoker, .stk, verify=False", "hdf5": "stoker, HDF5 (vlen bytes, contiguous)",
                    "hdf5-lib": "stoker, HDF5 (vlen bytes, chunked: through libhdf5)",
                    "lmdb": "stoker, LMDB", "torch-hdf5": "h5py in DataLoader",
                    "torch-lmdb": "py-lmdb in DataLoader"}[fmt]
            vs = (f"{med[(recipe, fmt[6:])] / v:.2f}x (stoker {fmt[6:]})"
                  if fmt.startswith("torch") else "")
            print(f"| {recipe} | {name} | {v:.0f} | {v / base:.2f}x | {vs} |")


if __name__ == "__main__":
    main()

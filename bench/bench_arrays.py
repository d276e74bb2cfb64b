#!/usr/bin/env python3
"""uint8 image arrays through the transforms (no decode) against the same pixels as JPEGs in
.stk, side by side in one process.

    /usr/bin/python3 bench/bench_arrays.py [--images 300] [--threads 2] [--repeat 3] [--out DIR]

Generates --images photo-like 500x375 RGB images (seeded), stores them as
  - stk-jpeg: a .stk with `image` = the JPEG (quality 90, PIL) and `label`;
  - hdf5-u8:  an HDF5 file with `pixels` = uint8 (N, 375, 500, 3) (contiguous) and `label`;
  - npy-u8:   the same arrays as pixels.npy / label.npy;
then runs stoker.Loader(transforms="imagenet-train", shuffle, batch 64, --threads threads, one
epoch) over each, the formats interleaved in each repeat, and prints the median samples/s and
the ratio to stk-jpeg. The transform field is not named: `image` and `pixels` are picked.
"""
import argparse
import io
import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "build", "python"))
import stoker  # noqa: E402

H, W = 375, 500


def photo(i):
    r = np.random.default_rng(i)
    y, x = np.mgrid[0:H, 0:W].astype(np.float32)
    img = np.zeros((H, W, 3), np.float32)
    for c in range(3):
        a, b, p = r.uniform(-1, 1, 3)
        img[..., c] = (128 + 60 * np.sin(x / W * 3 * (1 + c) + a) * np.cos(y / H * 2 * (1 + b))
                       + 30 * np.sin((x + y) / 40 + p))
    for _ in range(6):
        x0, y0 = r.integers(0, W), r.integers(0, H)
        img[y0:y0 + r.integers(10, H // 3), x0:x0 + r.integers(10, W // 3)] = r.uniform(0, 255, 3)
    img += r.normal(0, 6, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def prepare(out, n):
    from PIL import Image
    stk, h5, npy = (os.path.join(out, f"arrays_{n}{s}") for s in (".stk", ".h5", "_npy"))
    if all(os.path.exists(p) for p in (stk, h5, npy)):
        return {"stk-jpeg": stk, "hdf5-u8": h5, "npy-u8": npy}
    px = np.stack([photo(i) for i in range(n)])
    labels = np.arange(n, dtype=np.int64) % 10

    def jpeg(a):
        b = io.BytesIO()
        Image.fromarray(a).save(b, "JPEG", quality=90)
        return b.getvalue()
    stoker.write_shard(stk, {"image": "bytes", "label": "int64"},
                       ({"image": jpeg(px[i]), "label": int(labels[i])} for i in range(n)))
    import h5py
    with h5py.File(h5, "w") as f:
        f["pixels"] = px
        f["label"] = labels
    os.makedirs(npy, exist_ok=True)
    np.save(os.path.join(npy, "pixels.npy"), px)
    np.save(os.path.join(npy, "label.npy"), labels)
    return {"stk-jpeg": stk, "hdf5-u8": h5, "npy-u8": npy}


def rate(path, threads):
    with stoker.Loader(path, 64, shuffle=True, seed=1, num_workers=threads,
                       transforms="imagenet-train") as L:
        t0, n = time.perf_counter(), 0
        for b in L:
            n += len(b["index"])
        return n / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=300)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default="/tmp/stoker_bench_arrays")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    paths = prepare(a.out, a.images)
    for name, p in paths.items():
        print(f"{name}: {p}, transform field {stoker.Dataset(p).image_field()!r}")
    got = {k: [] for k in paths}
    for _ in range(a.repeat):
        for name, p in paths.items():
            got[name].append(rate(p, a.threads))
    base = statistics.median(got["stk-jpeg"])
    print(f"\n| data ({a.images} images {W}x{H}, imagenet-train, {a.threads} threads) "
          "| samples/s (median) | vs stk-jpeg |\n|---|---|---|")
    for name, v in got.items():
        m = statistics.median(v)
        print(f"| {name} | {m:.0f} | {m / base:.2f}x |")


if __name__ == "__main__":
    main()

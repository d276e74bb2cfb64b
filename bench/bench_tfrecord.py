#!/usr/bin/env python3
"""TFRecord figures (issue 12), side by side in one run:

1. The same JPEGs as TFRecord (tf.train.Example: image/encoded, image/class/label) and as .stk
   (stoker.pack_image_folder), through stoker.Loader with the same recipe, threads and batch:
   imagenet-train (goal: TFRecord >= 0.9x .stk) and raw records (goal >= 0.8x).
2. A pure-Python TFRecord reader (struct + a tiny protobuf parse, as the `tfrecord` package
   does, no CRC check) in a torch DataLoader with workers, on the same file: raw, and
   imagenet-train with the equivalent torchvision transforms.
3. Index build: time to open a TFRecord file with no index (one scan of frame headers, each
   length CRC checked) per GB and per million records, from a cached `.idx`, and the memory the
   index takes per million records.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_tfrecord.py [--images 500]

Rows of part 1-2 are medians of --repeat interleaved runs, each in a fresh process.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python", "tests"))
from test_tfrecord import example, frame  # noqa: E402  (the test suite's writer)

ENV = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "build", "python"))

STOKER_LOOP = r"""
import sys, time, json
import torch
import stoker
data, field, recipe, threads, batch, epochs = sys.argv[1:7]
tr = None if recipe == "raw" else recipe
loader = stoker.Loader(data, batch_size=int(batch), shuffle=True, num_workers=int(threads),
                       transforms=tr, transform_field=field)
n = 0
t0 = time.perf_counter()
for e in range(int(epochs)):
    for b in loader:
        n += len(b["index"])
print(json.dumps({"samples_per_s": n / (time.perf_counter() - t0)}))
"""

PY_LOOP = r"""
import io, struct, sys, time, json
import torch
from PIL import Image
from torchvision import transforms as T

def varint(b, i):
    x = s = 0
    while True:
        c = b[i]; i += 1
        x |= (c & 0x7f) << s; s += 7
        if c < 0x80:
            return x, i

def fields(b, i, end):
    while i < end:
        k, i = varint(b, i)
        wt = k & 7
        if wt == 2:
            n, i = varint(b, i)
            yield k >> 3, b[i:i + n]; i += n
        elif wt == 0:
            v, i = varint(b, i); yield k >> 3, v
        elif wt == 5:
            yield k >> 3, b[i:i + 4]; i += 4
        elif wt == 1:
            yield k >> 3, b[i:i + 8]; i += 8
        else:
            raise ValueError("bad wire type")

def parse_example(b):
    out = {}
    for f, feats in fields(b, 0, len(b)):
        if f != 1: continue
        for g, entry in fields(feats, 0, len(feats)):
            if g != 1: continue
            key = val = None
            for h, v in fields(entry, 0, len(entry)):
                if h == 1: key = bytes(v).decode()
                elif h == 2: val = v
            for kind, lst in fields(val, 0, len(val)):
                vals = [v for _, v in fields(lst, 0, len(lst))]
                if kind == 1: out[key] = bytes(vals[0])
                elif kind == 3:
                    xs = []
                    for v in vals:
                        if isinstance(v, int):
                            xs.append(v)
                            continue
                        j = 0
                        while j < len(v):
                            x, j = varint(v, j); xs.append(x)
                    out[key] = xs
                elif kind == 2:
                    out[key] = list(struct.unpack(f"<{len(vals[0]) // 4}f", vals[0]))
    return out

class TFRecordDataset(torch.utils.data.Dataset):
    def __init__(self, path, transform):
        self.path, self.transform, self.f = path, transform, None
        self.index = []
        with open(path, "rb") as f:
            at = 0
            while True:
                h = f.read(12)
                if len(h) < 12: break
                n = struct.unpack("<Q", h[:8])[0]
                self.index.append((at + 12, n))
                at += n + 16
                f.seek(at)
    def __len__(self):
        return len(self.index)
    def __getitem__(self, i):
        if self.f is None:
            self.f = open(self.path, "rb")
        off, n = self.index[i]
        self.f.seek(off)
        ex = parse_example(memoryview(self.f.read(n)))
        label = ex["image/class/label"][0]
        img = ex["image/encoded"]
        if self.transform is None:
            return torch.frombuffer(bytearray(img), dtype=torch.uint8), label
        return self.transform(Image.open(io.BytesIO(img)).convert("RGB")), label

def collate_raw(items):
    return [x for x, _ in items], torch.tensor([y for _, y in items])

path, recipe, workers, batch, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
tf = None if recipe == "raw" else T.Compose([
    T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
dl = torch.utils.data.DataLoader(TFRecordDataset(path, tf), batch_size=batch, shuffle=True,
                                 num_workers=workers, persistent_workers=workers > 0,
                                 collate_fn=collate_raw if tf is None else None)
n = 0
t0 = time.perf_counter()
for e in range(epochs):
    for x, y in dl:
        n += len(y)
print(json.dumps({"samples_per_s": n / (time.perf_counter() - t0)}))
"""


def run(code, args):
    out = subprocess.run([sys.executable, "-c", code] + [str(a) for a in args], check=True,
                         capture_output=True, text=True, env=ENV)
    return json.loads(out.stdout.strip().splitlines()[-1])["samples_per_s"]


def jpeg_tree(out, n):
    tree = os.path.join(out, f"tf_jpegs_{n}")
    if not os.path.isdir(tree):
        subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gen_images.py"), tree,
                        "--classes", "10", "--per-class", str(n // 10)], check=True)
    return tree


def write_tfrecord_from_tree(tree, path):
    """image/encoded + image/class/label (the fields of TF's build_imagenet_data that the .stk
    from the same tree holds too; further small bytes features would each get a batch column
    padded to the largest frame, docs/formats.md "TFRecord")."""
    classes = sorted(os.listdir(tree))
    with open(path, "wb") as f:
        for label, c in enumerate(classes):
            for name in sorted(os.listdir(os.path.join(tree, c))):
                jpg = open(os.path.join(tree, c, name), "rb").read()
                f.write(frame(example({"image/encoded": jpg, "image/class/label": label})))


INDEX_CODE = r"""
import os, sys, time, json
import stoker
path = sys.argv[1]
def rss_kb():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
rss0 = rss_kb()
t0 = time.perf_counter()
ds = stoker.Dataset(path)
t = time.perf_counter() - t0
print(json.dumps({"s": t, "n": len(ds), "rss_kb": rss_kb() - rss0}))
"""


def index_figures(out, n_small, n_big):
    """Open time with no index (a scan) and with the cached .idx; memory of the index."""
    rows = []
    for name, n, size in (("small", n_small, 100), ("large", n_big, 100_000)):
        path = os.path.join(out, f"index_{name}_{n}.tfrecord")
        if not os.path.exists(path):
            blob = os.urandom(size)
            with open(path, "wb") as f:
                for i in range(n):
                    f.write(frame(example({"x": blob[: size - (i % 7)], "y": i})))
        gb = os.path.getsize(path) / 1e9
        res = {}
        for mode in ("scan", "idx"):
            if mode == "scan" and os.path.exists(path + ".idx"):
                os.remove(path + ".idx")
            res[mode] = json.loads(subprocess.run([sys.executable, "-c", INDEX_CODE, path],
                                                  check=True, capture_output=True, text=True,
                                                  env=ENV).stdout)
        rows.append((name, n, size, gb, res))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=500)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--index-records", type=int, default=1_000_000)
    ap.add_argument("--index-large", type=int, default=5000, help="100 KB records")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    sys.path.insert(0, os.path.join(ROOT, "build", "python"))
    import stoker
    tree = jpeg_tree(a.out, a.images)
    stk = os.path.join(a.out, f"tf_jpegs_{a.images}.stk")
    tfr = os.path.join(a.out, f"tf_jpegs_{a.images}.tfrecord")
    if not os.path.exists(stk):
        stoker.pack_image_folder(tree, stk)
    if not os.path.exists(tfr):
        write_tfrecord_from_tree(tree, tfr)
    common = [a.threads, a.batch_size, a.epochs]
    res = {}
    for rep in range(a.repeat):
        for recipe in ("imagenet-train", "raw"):
            for key, args in ((".stk", [stk, "image"]), ("TFRecord", [tfr, "image/encoded"])):
                res.setdefault((recipe, key), []).append(run(STOKER_LOOP, args + [recipe] + common))
            res.setdefault((recipe, "python"), []).append(run(PY_LOOP, [tfr, recipe] + common))
        print(f"repeat {rep + 1}/{a.repeat} done", file=sys.stderr)

    def med(v):
        return sorted(v)[len(v) // 2]

    print(f"\n{a.images} JPEGs ({os.path.getsize(tfr) / a.images / 1e3:.1f} KB mean), "
          f"{a.threads} threads/workers, batch {a.batch_size}, {a.epochs} epochs, "
          f"median of {a.repeat} interleaved runs [min-max]:\n")
    print("| recipe | .stk samples/s | TFRecord samples/s | TFRecord / .stk | pure-Python TFRecord "
          "in DataLoader samples/s | stoker TFRecord / pure-Python |")
    print("|---|---|---|---|---|---|")
    for recipe in ("imagenet-train", "raw"):
        s, t, p = (res[(recipe, k)] for k in (".stk", "TFRecord", "python"))
        ratios = sorted(x / y for x, y in zip(t, s))
        print(f"| {recipe} | {med(s):.0f} | {med(t):.0f} | {med(ratios):.2f}x "
              f"[{ratios[0]:.2f}-{ratios[-1]:.2f}] | {med(p):.0f} | {med(t) / med(p):.1f}x |")
    print("\nIndex build (open of a file with no `.idx`: one scan of the frame headers, each "
          "length CRC checked; then the same open from the `.idx` it wrote):\n")
    print("| file | records | record size | GB | scan s | scan s/GB | scan s per 1M records | "
          "open from .idx s | RSS growth of the open, per 1M records |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, n, size, gb, r in index_figures(a.out, a.index_records, a.index_large):
        sc, ix = r["scan"], r["idx"]
        print(f"| {name} | {n} | {size} B | {gb:.3f} | {sc['s']:.3f} | {sc['s'] / gb:.2f} | "
              f"{sc['s'] / n * 1e6:.2f} | {ix['s']:.3f} | "
              f"{sc['rss_kb'] / 1024 / n * 1e6:.1f} MiB |")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Generate an ImageFolder tree of photo-like JPEGs (nothing is downloaded).

Each image is built from what makes real photos cost what they cost to decode: smooth
low-frequency colour fields (sky, walls), a few hard-edged shapes (objects), fine texture noise
(foliage, fabric) and sensor noise, at ImageNet-like sizes (mostly 500x375 / 375x500 / 500x333,
some others between 300 and 640 px a side) and JPEG qualities 75-95. `--profile small` gives
~57 KB files (the issue's ~59 KB), `--profile imagenet` ~105 KB (ImageNet's mean file size).

    /usr/bin/python3 bench/gen_images.py OUT --classes 10 --per-class 100 [--profile small]
        [--max-side 512 --quality 90]

--max-side N re-encodes the photographs as FFCV's ImageNet benchmark datasets are written
(ffcv.writer with RGBImageField(max_resolution=N, jpeg_quality=Q)): each is generated at an
ImageNet-like size (40% of the sizes drawn from have a side over 512 px), saved at its profile's
quality as the original, then decoded, shrunk so that its longer side is at most N (area
averaging, as FFCV's cv2.INTER_AREA) and saved again at --quality (default 90), 4:2:0.

Deterministic for a given --seed. Uses all cores (one process per core).
"""
import argparse
import io
import os
import sys
from multiprocessing import Pool

import numpy as np
from PIL import Image, ImageDraw

SIZES = [(500, 375)] * 6 + [(375, 500)] * 3 + [(500, 333)] * 2 + [(333, 500), (640, 480),
                                                                 (480, 640), (400, 300),
                                                                 (300, 400), (500, 400),
                                                                 (600, 450)]

# --max-side: ImageNet's larger originals too (its images reach 2,000+ px a side), so that the
# re-encoding shrinks some (40% of these sizes have a side over 512)
SIZES_LARGE = SIZES + [(800, 600), (600, 800), (1024, 768), (768, 1024), (1280, 960),
                       (1600, 1200), (640, 427)]

GRAIN_SIGMA, GRAIN_CHROMA = 6.0, 0.35

PROFILES = {
    # texture amplitude, noise sigma, quality range
    "small": (36.0, 6.5, (75, 95)),
    "imagenet": (56.0, 9.5, (88, 96)),
    # photographs with sensor grain (issue 15): little texture, pixel-scale noise mostly in luma
    # (GRAIN_CHROMA of it in each channel independently), quality ~90, 4:2:0
    "grain": (12.0, GRAIN_SIGMA, (89, 91)),
}


def smooth_field(rng, h, w, cells):
    """A smooth random RGB field: a coarse random grid upsampled bicubically."""
    gh, gw = max(2, h // cells), max(2, w // cells)
    grid = rng.integers(0, 256, size=(gh, gw, 3), dtype=np.uint8)
    return np.asarray(Image.fromarray(grid).resize((w, h), Image.BICUBIC), dtype=np.float32)


def make_image(rng, w, h, label, profile):
    tex_amp, noise, (qlo, qhi) = PROFILES[profile]
    base = smooth_field(rng, h, w, 120) * 0.7 + smooth_field(rng, h, w, 30) * 0.3
    # a class-dependent tint, so classes differ a little (a real classifier could learn it)
    tint = np.array([(label * 53) % 90, (label * 29) % 90, (label * 71) % 90], np.float32)
    base = base * 0.75 + tint
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    base += (yy / h * rng.uniform(-40, 40))[..., None]  # lighting gradient
    img = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(3, 9))):  # objects with hard edges
        x0, y0 = int(rng.integers(0, w - 20)), int(rng.integers(0, h - 20))
        x1 = min(w, x0 + int(rng.integers(20, w // 2)))
        y1 = min(h, y0 + int(rng.integers(20, h // 2)))
        color = tuple(int(c) for c in rng.integers(0, 256, 3))
        if rng.random() < 0.5:
            draw.ellipse([x0, y0, x1, y1], fill=color)
        else:
            draw.rectangle([x0, y0, x1, y1], fill=color)
    arr = np.asarray(img, dtype=np.float32)
    # fine texture: band-limited noise at two scales, strongest in the lower half (foliage)
    tex = smooth_field(rng, h, w, 3) - 128.0
    mask = np.clip((yy - h * 0.35) / (h * 0.3), 0.2, 1.0)[..., None]
    arr += tex * (tex_amp / 128.0) * mask
    if profile == "grain":  # sensor grain: shared by the channels (luma), a little chroma
        arr += rng.normal(0, noise, size=(h, w, 1)).astype(np.float32)
        arr += rng.normal(0, noise * GRAIN_CHROMA, size=arr.shape).astype(np.float32)
    else:
        arr += rng.normal(0, noise, size=arr.shape).astype(np.float32)
    quality = int(rng.integers(qlo, qhi + 1))
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)), quality


def reencode(img, q, max_side, quality):
    """The original saved at quality q, decoded, its longer side shrunk to max_side, saved again
    at `quality` (what FFCV's writer does to an ImageNet JPEG)."""
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=q, subsampling="4:2:0")
    img = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    w, h = img.size
    if max(w, h) > max_side:
        k = max_side / max(w, h)
        img = img.resize((max(1, round(w * k)), max(1, round(h * k))), Image.BOX)
    return img, quality


def work(args):
    out, cls, idx, seed, profile, max_side, quality = args
    rng = np.random.default_rng([seed, cls, idx])
    sizes = SIZES_LARGE if max_side else SIZES
    w, h = sizes[int(rng.integers(0, len(sizes)))]
    img, q = make_image(rng, w, h, cls, profile)
    if max_side:
        img, q = reencode(img, q, max_side, quality)
    path = os.path.join(out, f"class_{cls:03d}", f"img_{idx:05d}.jpg")
    img.save(path, quality=q, subsampling="4:2:0")
    return os.path.getsize(path), img.size[0] * img.size[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="output directory (an ImageFolder tree)")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--per-class", type=int, default=100)
    ap.add_argument("--profile", choices=sorted(PROFILES), default="small")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    ap.add_argument("--max-side", type=int, default=0,
                    help="re-encode as FFCV's benchmark data: longer side at most this (0: off)")
    ap.add_argument("--quality", type=int, default=90, help="with --max-side: JPEG quality")
    a = ap.parse_args()
    if a.classes < 1 or a.per_class < 1:
        ap.error("--classes and --per-class must be >= 1")
    if a.max_side < 0 or not 1 <= a.quality <= 100:
        ap.error("--max-side must be >= 0 and --quality in 1..100")
    for c in range(a.classes):
        os.makedirs(os.path.join(a.out, f"class_{c:03d}"), exist_ok=True)
    jobs = [(a.out, c, i, a.seed, a.profile, a.max_side, a.quality) for c in range(a.classes)
            for i in range(a.per_class)]
    total = pixels = 0
    with Pool(a.jobs) as pool:
        for k, (size, npix) in enumerate(pool.imap_unordered(work, jobs, chunksize=8), 1):
            total += size
            pixels += npix
            if sys.stderr.isatty():
                print(f"\rgenerating {k}/{len(jobs)} images", end="", file=sys.stderr)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    print(f"{len(jobs)} JPEGs in {a.classes} classes, {total / len(jobs) / 1000:.1f} KB mean, "
          f"{total / pixels:.3f} bytes per pixel, {total / 1e6:.1f} MB -> {a.out}")


if __name__ == "__main__":
    main()

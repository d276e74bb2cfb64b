#!/usr/bin/env python3
"""Generate videos (nothing is downloaded): pans and zooms over bench/gen_images.py's photos.

Each video is a camera moving over one photo-like image (a slow pan with a zoom in or out), so
its frames cost what real footage costs to encode and decode (smooth fields, hard edges, texture,
sensor noise, motion), encoded by Debian's ffmpeg (libx264, libx265, libvpx-vp9, libaom-av1,
mpeg4) at a chosen size, frame rate, GOP size and B-frame count. A variable frame rate is made by
giving each frame its own timestamp (`vfr=True`: intervals of 1, 2 and 3 frame periods).

As a library (tests/data/gen_video_fixtures.py, python/tests/test_video.py, bench/bench_video.py):
    encode(path, n_frames=48, size=(160, 96), fps=25, codec="h264", gop=12, bframes=2, seed=0)
As a program: a class-per-folder tree (the Kinetics/UCF101 layout) of .mp4 files:
    /usr/bin/python3 bench/gen_videos.py OUT --classes 4 --per-class 8 [--seconds 4]

Deterministic for a given seed (the encoders run single-threaded).
"""
import argparse
import os
import subprocess
import sys
from multiprocessing import Pool

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_images import make_image  # noqa: E402

# codec name -> (ffmpeg encoder, extra arguments)
CODECS = {
    "h264": ("libx264", ["-preset", "veryfast", "-pix_fmt", "yuv420p", "-threads", "1"]),
    "hevc": ("libx265", ["-preset", "ultrafast", "-pix_fmt", "yuv420p",
                         "-x265-params", "log-level=error:pools=none:frame-threads=1"]),
    "vp9": ("libvpx-vp9", ["-deadline", "realtime", "-cpu-used", "8", "-pix_fmt", "yuv420p",
                           "-threads", "1"]),
    "av1": ("libaom-av1", ["-cpu-used", "8", "-usage", "realtime", "-pix_fmt", "yuv420p",
                           "-threads", "1"]),
    "mpeg4": ("mpeg4", ["-q:v", "4", "-pix_fmt", "yuv420p"]),
}


def frames(n_frames, size, seed):
    """n_frames RGB frames (uint8 [H, W, 3]) of a camera panning and zooming over a photo."""
    w, h = size
    rng = np.random.default_rng(seed)
    img, _ = make_image(rng, w * 2, h * 2, seed % 7, "small")
    zoom_in = rng.random() < 0.5
    dx, dy = rng.uniform(-1, 1, 2)
    for i in range(n_frames):
        t = i / max(1, n_frames - 1)
        z = 1.8 - 0.6 * t if zoom_in else 1.2 + 0.6 * t  # the window is z * (w, h) of the photo
        cw, ch = w * z, h * z
        cx = w + dx * (w - cw / 2) * (t - 0.5)
        cy = h + dy * (h - ch / 2) * (t - 0.5)
        box = (cx - cw / 2, cy - ch / 2, cx + cw / 2, cy + ch / 2)
        yield np.asarray(img.resize((w, h), Image.BILINEAR, box=box))


def encode(path, n_frames=48, size=(160, 96), fps=25, codec="h264", gop=12, bframes=2, seed=0,
           vfr=False, pattern=None):
    """Write a video of n_frames frames to path (the container from its extension).

    pattern: None for the photo pan, or an ffmpeg lavfi source ("testsrc2", "mandelbrot", ...).
    vfr: frame i lasts 1, 2 or 3 periods of 1/fps in turn (the container's timestamps say so).
    """
    enc, extra = CODECS[codec]
    w, h = size
    args = ["ffmpeg", "-hide_banner", "-loglevel", "error", "-y"]
    if pattern:
        args += ["-f", "lavfi", "-i", f"{pattern}=size={w}x{h}:rate={fps}", "-frames:v",
                 str(n_frames)]
    else:
        args += ["-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{w}x{h}", "-r", str(fps),
                 "-i", "-"]
    if vfr:
        # frame N shown at the sum of its predecessors' durations (1, 2, 3 periods in turn)
        args += ["-vf", f"setpts='(6*floor(N/3)+gte(mod(N,3),1)+2*gte(mod(N,3),2))/({fps}*TB)'",
                 "-fps_mode", "vfr", "-video_track_timescale", str(fps * 6)]
    args += ["-c:v", enc, "-g", str(gop)] + extra
    if codec in ("h264", "hevc", "mpeg4"):
        args += ["-bf", str(bframes)]
    args += [path]
    if pattern:
        subprocess.run(args, check=True)
        return
    p = subprocess.Popen(args, stdin=subprocess.PIPE)
    try:
        for f in frames(n_frames, size, seed):
            p.stdin.write(f.tobytes())
    finally:
        p.stdin.close()
    if p.wait() != 0:
        raise RuntimeError(f"ffmpeg failed writing {path}")


def _work(job):
    path, n, size, fps, codec, gop, seed = job
    encode(path, n_frames=n, size=size, fps=fps, codec=codec, gop=gop, seed=seed)
    return os.path.getsize(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="output directory (a class-per-folder tree of videos)")
    ap.add_argument("--classes", type=int, default=4)
    ap.add_argument("--per-class", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--fps", type=int, default=25)
    ap.add_argument("--size", default="340x256", help="WxH (Kinetics is commonly 340x256)")
    ap.add_argument("--codec", choices=sorted(CODECS), default="h264")
    ap.add_argument("--gop", type=int, default=25)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    a = ap.parse_args()
    w, h = (int(v) for v in a.size.split("x"))
    ext = {"vp9": ".webm"}.get(a.codec, ".mkv" if a.codec == "hevc" else ".mp4")
    jobs = []
    for c in range(a.classes):
        os.makedirs(os.path.join(a.out, f"class_{c:03d}"), exist_ok=True)
        for i in range(a.per_class):
            path = os.path.join(a.out, f"class_{c:03d}", f"vid_{i:04d}{ext}")
            jobs.append((path, int(a.seconds * a.fps), (w, h), a.fps, a.codec, a.gop,
                         a.seed * 100003 + c * 1009 + i))
    with Pool(a.jobs) as pool:
        total = sum(pool.imap_unordered(_work, jobs))
    print(f"{len(jobs)} videos in {a.classes} classes, {total / len(jobs) / 1000:.1f} KB mean, "
          f"{total / 1e6:.1f} MB -> {a.out}")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""gen_video_fixtures.py OUTDIR: videos and PyAV references for tests/unit/decode/test_video_decode.c.

1. Encodes small videos with Debian's ffmpeg (bench/gen_videos.py: a camera panning over a
   photo-like image, or an ffmpeg test pattern): H.264 in MP4 with B-frames, H.265 in Matroska,
   VP9 in WebM, AV1 in MP4, MPEG-4 part 2 in AVI with B-frames, a variable frame rate H.264 in
   MP4 and in Matroska, an odd frame size (rows not a multiple of 16 bytes), one long GOP; then
   damaged and unsupported ones: the H.264 file truncated, the same with bytes overwritten in
   its last GOP, an audio-only MP4, Motion JPEG in AVI, and bytes that are no video at all.
2. For every good video NAME, writes NAME.ref, PyAV's decode of it (the reference the decoder
   must equal bit for bit: the same libavcodec, the same libswscale settings): a header of
   uint32 n_frames, width, height, tb_num, tb_den (little-endian), n_frames int64 pts in
   presentation order (frame.pts, what torchvision.io.read_video's timestamps are), then the
   frames' RGB24 pixels (frame.to_ndarray(format="rgb24")), tightly packed.

Deterministic; uses Debian's ffmpeg, python3-av, python3-numpy and python3-pil.
"""
import os
import struct
import subprocess
import sys

import av
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import gen_videos  # noqa: E402

GOOD = [
    # name, keyword arguments of gen_videos.encode
    ("h264.mp4", dict(n_frames=40, codec="h264", gop=12, bframes=2, seed=1)),
    ("hevc.mkv", dict(n_frames=30, codec="hevc", gop=10, bframes=2, seed=2)),
    ("vp9.webm", dict(n_frames=30, codec="vp9", gop=10, seed=3)),
    ("av1.mp4", dict(n_frames=20, size=(96, 64), codec="av1", gop=8, seed=4)),
    ("mpeg4.avi", dict(n_frames=30, codec="mpeg4", gop=10, bframes=2, seed=5)),
    ("vfr.mp4", dict(n_frames=30, codec="h264", gop=10, bframes=2, seed=6, vfr=True)),
    ("vfr.mkv", dict(n_frames=30, codec="h264", gop=10, bframes=0, seed=7, vfr=True)),
    ("odd.mp4", dict(n_frames=20, size=(150, 90), codec="h264", gop=20, seed=8)),
    ("pattern.mp4", dict(n_frames=60, size=(128, 72), codec="h264", gop=60, bframes=3,
                         pattern="testsrc2")),
]


def reference(path):
    with av.open(path) as c:
        frames = [(f.pts, f.to_ndarray(format="rgb24")) for f in c.decode(video=0)]
        tb = c.streams.video[0].time_base
    frames.sort(key=lambda pf: pf[0])
    h, w, _ = frames[0][1].shape
    with open(path + ".ref", "wb") as f:
        f.write(struct.pack("<5I", len(frames), w, h, tb.numerator, tb.denominator))
        f.write(np.array([p for p, _ in frames], dtype="<i8").tobytes())
        for _, a in frames:
            f.write(np.ascontiguousarray(a).tobytes())


def ffmpeg(*args):
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", *args], check=True)


def main():
    out = sys.argv[1]
    for name, kw in GOOD:
        path = os.path.join(out, name)
        gen_videos.encode(path, **kw)
        reference(path)
    data = open(os.path.join(out, "h264.mp4"), "rb").read()
    # truncated: the moov atom is at the end of an ffmpeg MP4 unless moved; cut a faststart copy
    fast = os.path.join(out, "fast.mp4")
    ffmpeg("-i", os.path.join(out, "h264.mp4"), "-c", "copy", "-movflags", "+faststart", fast)
    fdata = open(fast, "rb").read()
    with open(os.path.join(out, "truncated.mp4"), "wb") as f:
        f.write(fdata[: len(fdata) * 6 // 10])
    with open(os.path.join(out, "tail_cut.mp4"), "wb") as f:
        f.write(data[: len(data) * 6 // 10])  # moov at the end: the container itself is cut
    # corrupt: the last 40% of the media data overwritten with a pattern (headers intact)
    bad = bytearray(fdata)
    for i in range(len(bad) * 6 // 10, len(bad) - 16, 7):
        bad[i] = (bad[i] * 31 + 0x5A) & 0xFF
    with open(os.path.join(out, "corrupt.mp4"), "wb") as f:
        f.write(bad)
    ffmpeg("-f", "lavfi", "-i", "sine=frequency=440:duration=1", "-c:a", "aac",
           os.path.join(out, "audio_only.mp4"))
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=64x48:rate=10", "-frames:v", "5", "-c:v", "mjpeg",
           os.path.join(out, "mjpeg.avi"))
    with open(os.path.join(out, "not_video.mp4"), "wb") as f:
        f.write(b"hello, this is no video at all" * 20)


if __name__ == "__main__":
    main()

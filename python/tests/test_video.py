"""Video clips (issue 28) through stoker.Loader: frames against PyAV (python3-av, the same
libavcodec: bit-exact), timestamps against torchvision.io.read_video_timestamps, clip positions
(uniform in file order, random from the sample's stream), one set of augmentation parameters per
clip, the output layouts, and bad input (truncated, corrupt, no video stream, unsupported codec,
a video shorter than its clip) named or skipped and counted.

The videos are made here once per session (bench/gen_videos.py: a camera panning over the photo
generator's images, encoded by Debian's ffmpeg) and packed into WebDataset tars.
"""
import io
import os
import shutil
import subprocess
import sys
import tarfile

import numpy as np
import pytest

import stoker

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))

av = pytest.importorskip("av")
T = pytest.importorskip("torchvision.transforms")
import gen_videos  # noqa: E402

pytestmark = [
    pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg is not installed"),
    pytest.mark.skipif(not stoker._core.has_video(), reason="stoker was built without libavcodec"),
]

VIDEOS = {
    # name: gen_videos.encode arguments
    "h264.mp4": dict(n_frames=40, codec="h264", gop=12, bframes=2, seed=1),
    "hevc.mkv": dict(n_frames=30, codec="hevc", gop=10, bframes=2, seed=2),
    "vp9.webm": dict(n_frames=30, codec="vp9", gop=10, seed=3),
    "av1.mp4": dict(n_frames=20, codec="av1", gop=8, seed=4),
    "mpeg4.avi": dict(n_frames=30, codec="mpeg4", gop=10, bframes=2, seed=5),
    "vfr.mp4": dict(n_frames=30, codec="h264", gop=10, bframes=2, seed=6, vfr=True),
}
SIZE = (160, 96)


@pytest.fixture(scope="session")
def videos(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("videos"))
    out = {}
    for name, kw in VIDEOS.items():
        path = os.path.join(d, name)
        gen_videos.encode(path, size=SIZE, **kw)
        out[name] = path
    # damaged copies and inputs stoker refuses
    data = open(out["h264.mp4"], "rb").read()
    fast = os.path.join(d, "fast.mp4")
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-i", out["h264.mp4"],
                    "-c", "copy", "-movflags", "+faststart", fast], check=True)
    fdata = open(fast, "rb").read()
    out["truncated.mp4"] = os.path.join(d, "truncated.mp4")
    open(out["truncated.mp4"], "wb").write(fdata[: len(fdata) * 6 // 10])
    bad = bytearray(fdata)
    for i in range(len(bad) * 6 // 10, len(bad) - 16, 7):
        bad[i] = (bad[i] * 31 + 0x5A) & 0xFF
    out["corrupt.mp4"] = os.path.join(d, "corrupt.mp4")
    open(out["corrupt.mp4"], "wb").write(bytes(bad))
    out["audio_only.mp4"] = os.path.join(d, "audio_only.mp4")
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                    "sine=frequency=440:duration=1", "-c:a", "aac", out["audio_only.mp4"]],
                   check=True)
    out["mjpeg.avi"] = os.path.join(d, "mjpeg.avi")
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                    f"testsrc2=size={SIZE[0]}x{SIZE[1]}:rate=10", "-frames:v", "5", "-c:v",
                    "mjpeg", out["mjpeg.avi"]], check=True)
    # a still picture, losslessly coded: every decoded frame is the same
    from PIL import Image
    rng = np.random.default_rng(0)
    png = os.path.join(d, "still.png")
    Image.fromarray(rng.integers(0, 256, (SIZE[1], SIZE[0], 3), dtype=np.uint8)).save(png)
    out["still.mp4"] = os.path.join(d, "still.mp4")
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-loop", "1", "-i", png,
                    "-frames:v", "20", "-c:v", "libx264", "-qp", "0", "-pix_fmt", "yuv444p",
                    out["still.mp4"]], check=True)
    out["short.mp4"] = os.path.join(d, "short.mp4")
    gen_videos.encode(out["short.mp4"], n_frames=5, size=SIZE, seed=9)
    return out


def wds(tmp_path, paths, name="v.tar"):
    """A WebDataset tar of the videos: sample k holds its file as `video` and `cls` = k."""
    tar = os.path.join(str(tmp_path), name)
    with tarfile.open(tar, "w") as t:
        for k, p in enumerate(paths):
            for member, data in ((f"{k:04d}.video", open(p, "rb").read()),
                                 (f"{k:04d}.cls", str(k).encode())):
                info = tarfile.TarInfo(member)
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return tar


def pyav(path):
    """PyAV's frames (uint8 [N, H, W, 3]) and their pts in seconds, in presentation order."""
    with av.open(path) as c:
        fr = [(f.pts, f.to_ndarray(format="rgb24")) for f in c.decode(video=0)]
        tb = c.streams.video[0].time_base
    fr.sort(key=lambda x: x[0])
    return np.stack([a for _, a in fr]), np.array([float(p * tb) for p, _ in fr])


def full_frames():
    """The frames as decoded: a crop of the whole frame is an exact copy."""
    return T.Compose([T.CenterCrop((SIZE[1], SIZE[0]))])


@pytest.mark.parametrize("name", list(VIDEOS))
def test_frames_equal_pyav(videos, tmp_path, name):
    """K uniform clips per video (shuffle=False) hold PyAV's frames bit for bit at the frames
    the clip names (floor(k (n - span) / (K - 1)) + i * step), and video_pts equals
    torchvision.io.read_video_timestamps's times of those frames."""
    import torchvision.io
    path = videos[name]
    ref, ref_s = pyav(path)
    n, Tn, step, K = len(ref), 6, 3, 3
    span = (Tn - 1) * step + 1
    with stoker.Loader(wds(tmp_path, [path]), batch_size=K, frames_per_clip=Tn, frame_step=step,
                       clips_per_video=K, transforms=full_frames(), output="numpy") as loader:
        b = next(iter(loader))
    assert b["video"].shape == (K, Tn, SIZE[1], SIZE[0], 3) and b["video"].dtype == np.uint8
    pts, fps = torchvision.io.read_video_timestamps(path, pts_unit="sec")
    tv = np.array([float(p) for p in pts])
    for k in range(K):
        start = k * (n - span) // (K - 1)
        want = [start + i * step for i in range(Tn)]
        for i, f in enumerate(want):
            assert np.array_equal(b["video"][k, i], ref[f]), (name, k, i, f)
        assert np.array_equal(b["video_pts"][k], ref_s[want]), (name, k)
        assert np.allclose(b["video_pts"][k], tv[want], rtol=0, atol=1e-9), (name, k)


def test_frame_rate_follows_timestamps(videos, tmp_path):
    """frame_rate=F on a variable frame rate file: frame i of the clip is the last one shown at
    or before t0 + i / F (the container's timestamps), t0 the first frame's time for clip 0."""
    path = videos["vfr.mp4"]
    ref, ref_s = pyav(path)
    with stoker.Loader(wds(tmp_path, [path]), batch_size=2, frames_per_clip=8, frame_rate=25,
                       clips_per_video=2, transforms=full_frames(), output="numpy") as loader:
        b = next(iter(loader))
    for i in range(8):
        f = int(np.searchsorted(ref_s, ref_s[0] + i / 25 + 1e-9, side="right") - 1)
        assert np.array_equal(b["video"][0, i], ref[f])
        assert b["video_pts"][0, i] == ref_s[f]
    assert b["video_pts"][1, -1] == ref_s[-1]  # the last clip ends at the last frame


def test_one_augmentation_per_clip(videos, tmp_path):
    """RandomResizedCrop, flips and ColorJitter draw once per clip: on a still video every frame
    of a clip is the same image; clips differ from each other (and from epoch to epoch)."""
    tf = T.Compose([T.RandomResizedCrop(48), T.RandomHorizontalFlip(), T.RandomVerticalFlip(),
                    T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.ToTensor(),
                    T.Normalize([0.5] * 3, [0.25] * 3)])
    tar = wds(tmp_path, [videos["still.mp4"]] * 4)
    with stoker.Loader(tar, batch_size=4, frames_per_clip=5, frame_step=3, transforms=tf,
                       shuffle=True, seed=3, output="numpy") as loader:
        e0 = next(iter(loader))["video"]
        e1 = next(iter(loader))["video"]
    assert e0.shape == (4, 3, 5, 48, 48) and e0.dtype == np.float32
    for clip in np.concatenate([e0, e1]):
        for t in range(1, 5):
            assert np.array_equal(clip[:, t], clip[:, 0])
    flat = [c[:, 0].tobytes() for c in np.concatenate([e0, e1])]
    assert len(set(flat)) == 8


def test_random_starts_are_the_samples_own(videos, tmp_path):
    """Random clip starts come from the (seed, epoch, index) stream: the same seed gives the same
    clips, whatever the thread count; another epoch others; the starts spread over the video."""
    tar = wds(tmp_path, [videos["h264.mp4"]])

    def starts(seed, n_threads, epochs):
        out = []
        with stoker.Loader(tar, batch_size=4, frames_per_clip=4, frame_step=2,
                           clips_per_video=4, clip_sampling="random", seed=seed,
                           num_workers=n_threads, transforms=full_frames(),
                           output="numpy") as loader:
            for _ in range(epochs):
                for b in loader:
                    out += [round(p * 25) for p in b["video_pts"][:, 0]]
        return out

    a = starts(7, 1, 12)
    assert a == starts(7, 2, 12)
    assert a[:4] != a[4:8] or a[4:8] != a[8:12]
    # 40 frames, span 7: starts 0 .. 33 (their uniformity is tests/unit/xform/test_clip.c's)
    assert set(a) <= set(range(34)) and len(set(a)) >= 15


def test_later_epochs_from_the_kept_index(videos, tmp_path):
    """A loader keeps each video's frame index after its first clip (later epochs do not demux the
    file again): its clips in epochs 2 and 3 equal, byte for byte and timestamp for timestamp,
    those of fresh loaders started at that epoch (which index every video anew), with one and
    two threads (the thread plan's decoder threads differ)."""
    names = ["h264.mp4", "hevc.mkv", "vp9.webm", "vfr.mp4"]
    tar = wds(tmp_path, [videos[n] for n in names])

    def clips(loader):
        out = []
        for b in loader:
            out.append((b["video"].copy(), b["video_pts"].copy()))
        return out

    def make(n_threads):
        return stoker.Loader(tar, batch_size=2, frames_per_clip=4, frame_step=3,
                             clips_per_video=2, clip_sampling="random", seed=11, shuffle=True,
                             num_workers=n_threads, transforms=full_frames(), output="numpy")

    with make(2) as loader:
        kept = []
        for e in range(3):
            loader.set_epoch(e)
            kept.append(clips(loader))
    for e in (1, 2):
        for n_threads in (1, 2):
            with make(n_threads) as fresh:
                fresh.set_epoch(e)
                got = clips(fresh)
            assert len(got) == len(kept[e]) == 4
            for (v, p), (v2, p2) in zip(got, kept[e]):
                assert np.array_equal(v, v2) and np.array_equal(p, p2)


def test_reads_in_place_only_what_clips_need(videos, tmp_path):
    """A class-per-folder tree, a WebDataset tar of the same videos and a .stk shard packed from
    the tree are each read in place (a video file, a tar member, a .stk record's field: the
    container's header and, once the index is kept, the GOPs of each clip): the clips equal
    those of the same data read whole (STOKER_READ_WHOLE=1) and across the three, over two
    epochs of random clips from start to end; in the second epoch each reads well under the
    bytes of its whole reads."""
    root = tmp_path / "tree"
    (root / "long").mkdir(parents=True)
    big = (480, 288)  # frames that weigh more than libavformat's 32 KiB reads
    gen_videos.encode(str(root / "long" / "a.mp4"), n_frames=300, size=big, codec="h264", gop=12,
                      bframes=2, seed=21)
    gen_videos.encode(str(root / "long" / "b.mkv"), n_frames=200, size=big, codec="hevc", gop=10,
                      bframes=2, seed=22)
    stk = str(tmp_path / "v.stk")
    stoker.pack(str(root), stk)
    tar = wds(tmp_path, [str(root / "long" / "a.mp4"), str(root / "long" / "b.mkv")])
    kw = dict(batch_size=3, frames_per_clip=4, frame_step=2, clips_per_video=6, seed=5,
              shuffle=True, transforms=full_frames(), output="numpy", num_workers=2)
    got = {}
    for name, data in (("tree", str(root)), ("tar", tar), ("stk", stk)):
        for whole in (False, True):
            if whole:
                os.environ["STOKER_READ_WHOLE"] = "1"
            try:
                with stoker.Loader(data, **kw) as loader:
                    out, per_epoch, before = [], [], 0
                    for e in range(2):
                        loader.set_epoch(e)
                        for b in loader:
                            out.append((b["video"].copy(), b["video_pts"].copy()))
                        now = loader.stats()["bytes_read"]
                        per_epoch.append(now - before)
                        before = now
            finally:
                os.environ.pop("STOKER_READ_WHOLE", None)
            got[name, whole] = (out, per_epoch)
    for key, (out, _) in got.items():
        assert len(out) == 8, key
        _same(out, got["tree", False][0])
    starts = {round(p[0] * 25) for _, pts in got["tree", False][0] for p in pts}
    assert min(starts) < 60 and max(starts) > 180  # clips from the start to the end
    # 12 clips of 7 frames (and their GOP lead-in) of 500: far less than the 12 whole files the
    # whole reads read
    for name in ("tree", "tar", "stk"):
        assert got[name, False][1][1] * 3 < got[name, True][1][1], (name, got[name, False][1],
                                                                     got[name, True][1])


def test_in_place_records_are_checked(videos, tmp_path):
    """A .stk record read in place is checked against its checksum on its first read (a byte of
    its video changed: "checksum mismatch", named, or skipped and counted); a tar member read in
    place is of a shard checked as whole reads check it (one rewritten under the loader: named,
    by the version pin or by the member's header)."""
    root = _tree_of(videos, tmp_path / "tree", {"a": ["h264.mp4", "vp9.webm"]})
    stk = str(tmp_path / "v.stk")
    stoker.pack(str(root), stk)
    data = bytearray(open(stk, "rb").read())
    at = data.find(open(videos["vp9.webm"], "rb").read()[:64])
    assert at > 0
    data[at + 400] ^= 0x01
    open(stk, "wb").write(bytes(data))
    kw = dict(batch_size=2, frames_per_clip=4, transforms=full_frames(), output="numpy")
    with stoker.Loader(stk, **kw) as loader:
        with pytest.raises(stoker.StokerFormatError, match=r"record 1 .*checksum mismatch"):
            next(iter(loader))
    with stoker.Loader(stk, batch_size=1, frames_per_clip=4, transforms=full_frames(),
                       output="numpy", on_error="skip") as loader:
        got = [int(b["index"][0]) for b in loader]
        assert got == [0, 0] and loader.stats()["skipped"] == 1
    tar = wds(tmp_path, [videos["h264.mp4"], videos["vp9.webm"]])
    ds_kw = dict(batch_size=2, frames_per_clip=4, transforms=full_frames(), output="numpy")
    with stoker.Loader(tar, **ds_kw) as loader:
        t = bytearray(open(tar, "rb").read())
        h = t.find(b"0001.video")
        t[h + 124:h + 136] = b"00000000017\0"  # the member's size in its header
        open(tar, "r+b").write(bytes(t))  # in place: the open shard is the same file
        with pytest.raises(stoker.Error, match=r"v\.tar sample .*(does not match|changed while open)"):
            for _ in loader:
                pass


def test_uniform_clips_in_file_order(videos, tmp_path):
    """shuffle=False, clips_per_video=K: the K clips of video 0, then video 1's, ...; labels and
    index follow."""
    paths = [videos["h264.mp4"], videos["hevc.mkv"], videos["vp9.webm"]]
    with stoker.Loader(wds(tmp_path, paths), batch_size=6, frames_per_clip=4,
                       clips_per_video=2, transforms=full_frames(), output="numpy") as loader:
        assert len(loader.dataset if hasattr(loader, "dataset") else []) in (0, 3, 6)
        b = next(iter(loader))
    assert list(b["cls"]) == [0, 0, 1, 1, 2, 2]
    assert list(b["index"]) == [0, 1, 2, 3, 4, 5]
    for k, p in enumerate(paths):
        _, s = pyav(p)
        assert b["video_pts"][2 * k, 0] == s[0] and b["video_pts"][2 * k + 1, -1] == s[-1]


def test_short_videos(videos, tmp_path):
    """A 5-frame video under a 4 x 2 clip (span 7): pad repeats the last frame, loop restarts,
    skip fails the record by name (and on_error="skip" replaces and counts it)."""
    ref, s = pyav(videos["short.mp4"])
    tar = wds(tmp_path, [videos["short.mp4"], videos["h264.mp4"]])
    kw = dict(batch_size=1, frames_per_clip=4, frame_step=2, transforms=full_frames(),
              output="numpy")
    with stoker.Loader(tar, short_video="pad", **kw) as loader:
        b = next(iter(loader))
    assert np.array_equal(b["video"][0, 3], ref[4]) and list(b["video_pts"][0]) == \
        [s[0], s[2], s[4], s[4]]
    with stoker.Loader(tar, short_video="loop", **kw) as loader:
        b = next(iter(loader))
    assert list(b["video_pts"][0]) == [s[0], s[2], s[4], s[1]]
    with stoker.Loader(tar, short_video="skip", **kw) as loader:
        with pytest.raises(stoker.StokerFormatError,
                           match=r"record 0.*the video has 5 frames; a clip of 4 frames every 2 "
                                 r"needs 7"):
            next(iter(loader))
    with stoker.Loader(tar, short_video="skip", on_error="skip", **kw) as loader:
        b = next(iter(loader))
        assert list(b["index"]) == [1] and loader.stats()["skipped"] == 1


@pytest.mark.parametrize("name,why", [
    ("truncated.mp4", "truncated"),
    ("corrupt.mp4", "H.264"),
    ("audio_only.mp4", "no video stream"),
    ("mjpeg.avi", "video codec 'mjpeg' is not supported"),
])
def test_bad_videos_named_or_skipped(videos, tmp_path, name, why):
    """A damaged or unusable video fails with the record and the reason; on_error="skip"
    replaces it with a good one and counts it."""
    tar = wds(tmp_path, [videos["h264.mp4"], videos[name], videos["h264.mp4"]])
    kw = dict(batch_size=3, frames_per_clip=8, frame_step=5, transforms=full_frames(),
              output="numpy")  # frames 0 .. 35 of 40: into the damaged part
    with stoker.Loader(tar, **kw) as loader:
        with pytest.raises(stoker.StokerFormatError) as e:
            next(iter(loader))
    msg = str(e.value)
    print(name, ":", msg)
    assert "record 1" in msg and why in msg
    with stoker.Loader(tar, on_error="skip", **kw) as loader:
        b = next(iter(loader))
        assert list(b["index"]) == [0, 2, 2] and loader.stats()["skipped"] == 1


def test_limits_and_arguments(videos, tmp_path):
    """max_pixels per frame, max_clip_pixels per clip; bad arguments and ops that do not fix
    the frame size named."""
    tar = wds(tmp_path, [videos["h264.mp4"]])
    with pytest.raises(stoker.StokerInvalidError, match="frame_step or frame_rate"):
        stoker.Loader(tar, 1, frames_per_clip=4, frame_step=2, frame_rate=5,
                      transforms=full_frames())
    with pytest.raises(stoker.StokerInvalidError, match="frames_per_clip must be a positive"):
        stoker.Loader(tar, 1, frames_per_clip=0, transforms=full_frames())
    with pytest.raises(stoker.StokerInvalidError, match="clip_sampling"):
        stoker.Loader(tar, 1, frames_per_clip=4, clip_sampling="middle",
                      transforms=full_frames())
    t = stoker._core.Transform([{"kind": "CenterCrop", "size": (96, 160)}], dtype="uint8",
                               layout="NHWC", media="video", frames_per_clip=4,
                               max_pixels=160 * 96 - 1)
    ds = stoker.Dataset(tar)
    with pytest.raises(stoker.StokerLimitError, match="exceeds the pixel limit"):
        next(iter(stoker._core.Loader(ds, batch_size=1, n_threads=1, transform=t)))
    t = stoker._core.Transform([{"kind": "CenterCrop", "size": (96, 160)}], dtype="uint8",
                               layout="NHWC", media="video", frames_per_clip=4,
                               max_clip_pixels=4 * 160 * 96 - 1)
    with pytest.raises(stoker.StokerLimitError,
                       match="a clip of 4 frames of 160x96 exceeds max_clip_pixels"):
        next(iter(stoker._core.Loader(ds, batch_size=1, n_threads=1, transform=t)))
    with pytest.raises(stoker.StokerInvalidError, match="output size is not fixed"):
        stoker.Loader(tar, 1, frames_per_clip=4, transforms=T.Compose([T.RandomHorizontalFlip()]))


def test_class_per_folder_tree_and_pack(videos, tmp_path):
    """A Kinetics/UCF101-style tree (ROOT/<class>/<video>): labels by sorted class name, files in
    torchvision's order, field `video`; `stoker.pack` of it gives .stk shards with the same clips."""
    root = tmp_path / "tree"
    layout = {"archery": ["h264.mp4", "vp9.webm"], "bowling": ["hevc.mkv"],
              "cooking": ["mpeg4.avi", "vfr.mp4"]}
    for cls, names in layout.items():
        (root / cls).mkdir(parents=True)
        for n in names:
            shutil.copy(videos[n], root / cls / n)
        (root / cls / "notes.txt").write_text("not a video")
    ds = stoker.Dataset(str(root))
    assert [f["name"] for f in ds.fields] == ["video", "label", "path"]
    kw = dict(batch_size=5, frames_per_clip=4, frame_step=2, transforms=full_frames(),
              output="numpy")
    with stoker.Loader(str(root), **kw) as loader:
        a = next(iter(loader))
    assert list(a["label"]) == [0, 0, 1, 2, 2]
    for k, n in enumerate(["h264.mp4", "vp9.webm", "hevc.mkv", "mpeg4.avi", "vfr.mp4"]):
        ref, s = pyav(videos[n])
        assert np.array_equal(a["video"][k, 0], ref[0]) and a["video_pts"][k, 0] == s[0]
    stk = str(tmp_path / "videos.stk")
    stoker.pack(str(root), stk)
    with stoker.Loader(stk, **kw) as loader:
        b = next(iter(loader))
    assert np.array_equal(a["video"], b["video"]) and np.array_equal(a["label"], b["label"])
    assert np.array_equal(a["video_pts"], b["video_pts"])


def _tree_of(videos, root, layout):
    for cls, names in layout.items():
        (root / cls).mkdir(parents=True, exist_ok=True)
        for n in names:
            shutil.copy(videos[n], root / cls / n)
    return root


def _epoch_clips(loader, epoch):
    """The clips of one epoch (video, video_pts) and the bytes the epoch read."""
    before = loader.stats()["bytes_read"]
    loader.set_epoch(epoch)
    out = [(b["video"].copy(), b["video_pts"].copy()) for b in loader]
    return out, loader.stats()["bytes_read"] - before


def _whole_clips(root, kw, epoch):
    """The clips of the tree read whole (STOKER_READ_WHOLE=1: no in-place read, no index file)."""
    os.environ["STOKER_READ_WHOLE"] = "1"
    try:
        with stoker.Loader(str(root), **kw) as loader:
            return _epoch_clips(loader, epoch)[0]
    finally:
        del os.environ["STOKER_READ_WHOLE"]


def _same(a, b):
    assert len(a) == len(b) > 0
    for (v, p), (v2, p2) in zip(a, b):
        assert np.array_equal(v, v2) and np.array_equal(p, p2)


TREE = {"a": ["h264.mp4", "vfr.mp4"], "b": ["hevc.mkv", "vp9.webm"]}
# one thread: the bytes a clip reads depend on libavcodec's frame threads (their delay reads
# packets ahead), which the thread plan sets from the threads at work
TREE_KW = dict(batch_size=2, frames_per_clip=4, frame_step=2, clips_per_video=2, seed=3,
               shuffle=True, transforms=full_frames(), output="numpy", num_workers=1)


def test_index_kept_beside_the_files(videos, tmp_path):
    """Each video's frame index is written beside it (`<video>.stkvidx`) by the loader that
    indexed it; a new loader's first epoch reads it instead of indexing the video again (the
    index files are not rewritten: a video indexed again would be) and gives the same clips, which
    are those of the files read whole."""
    root = _tree_of(videos, tmp_path / "tree", TREE)
    files = sorted(root.glob("*/*.*"))
    with stoker.Loader(str(root), **TREE_KW) as old:
        first, _ = _epoch_clips(old, 0)
    idx = [str(f) + ".stkvidx" for f in files]
    made = [(os.stat(p).st_ino, open(p, "rb").read()) for p in idx]
    assert all(len(b) > 32 and b[:8] == b"STKVIX01" for _, b in made)
    with stoker.Loader(str(root), **TREE_KW) as new:
        kept, _ = _epoch_clips(new, 0)
    _same(kept, first)
    assert [(os.stat(p).st_ino, open(p, "rb").read()) for p in idx] == made
    _same(kept, _whole_clips(root, TREE_KW, 0))


def test_index_file_stale_or_damaged_is_rebuilt(videos, tmp_path):
    """An index file is trusted only for the file it was made from, whole: a video rewritten
    since (another size and mtime), an index file damaged (a byte changed), truncated, emptied
    or copied from another video is ignored, the video indexed again and its index file
    rewritten; the clips are those of the files read whole."""
    root = _tree_of(videos, tmp_path / "tree", TREE)
    with stoker.Loader(str(root), **TREE_KW) as loader:
        _epoch_clips(loader, 0)
    idx = {n: str(root / c / n) + ".stkvidx" for c, names in TREE.items() for n in names}
    good = {n: open(p, "rb").read() for n, p in idx.items()}
    # h264.mp4 rewritten: another video under its name
    gen_videos.encode(str(root / "a" / "h264.mp4"), n_frames=33, size=SIZE, codec="h264",
                      gop=8, seed=77)
    data = bytearray(good["vfr.mp4"])
    data[len(data) // 2] ^= 0x40
    open(idx["vfr.mp4"], "wb").write(bytes(data))                  # damaged
    open(idx["hevc.mkv"], "wb").write(good["hevc.mkv"][:-11])     # truncated
    open(idx["vp9.webm"], "wb").write(good["h264.mp4"])           # another video's
    with stoker.Loader(str(root), **TREE_KW) as loader:
        got, _ = _epoch_clips(loader, 1)
    _same(got, _whole_clips(root, TREE_KW, 1))
    for n in ("vfr.mp4", "hevc.mkv", "vp9.webm"):
        assert open(idx[n], "rb").read() == good[n], n           # rebuilt as it was
    assert open(idx["h264.mp4"], "rb").read() != good["h264.mp4"]  # the new video's
    open(idx["vfr.mp4"], "wb").write(b"")                          # emptied
    with stoker.Loader(str(root), **TREE_KW) as loader:
        got, _ = _epoch_clips(loader, 2)
    _same(got, _whole_clips(root, TREE_KW, 2))
    assert open(idx["vfr.mp4"], "rb").read() == good["vfr.mp4"]


def test_index_in_the_cache_dir_where_the_directory_takes_none(videos, tmp_path):
    """Where an index file cannot be written beside its video (here its name is taken by a
    directory: a read-only directory does the same, but the tests run as root), the index goes
    to the cache directory (cache_dir=, STOKER_CACHE_DIR) and a new loader reads it there;
    without a cache directory it is kept in memory only."""
    root = _tree_of(videos, tmp_path / "tree", TREE)
    for c, names in TREE.items():
        for n in names:
            os.makedirs(str(root / c / n) + ".stkvidx" + "/taken")
    cache = tmp_path / "cache"
    kw = dict(TREE_KW, cache_dir=str(cache))
    with stoker.Loader(str(root), **kw) as old:
        first, _ = _epoch_clips(old, 0)
    entries = sorted(p for p in cache.rglob("*") if p.name.endswith("-stkvidx"))
    assert len(entries) == 4, sorted(cache.rglob("*"))
    made = [(p.stat().st_ino, p.read_bytes()) for p in entries]
    with stoker.Loader(str(root), **kw) as new:
        kept, _ = _epoch_clips(new, 0)
    _same(kept, first)
    assert [(p.stat().st_ino, p.read_bytes()) for p in entries] == made  # read, not rewritten
    with stoker.Loader(str(root), **dict(TREE_KW, cache_dir="")) as none:
        got, _ = _epoch_clips(none, 0)
    _same(got, first)
    assert not list(root.glob("*/*.stkvidx/*.*"))

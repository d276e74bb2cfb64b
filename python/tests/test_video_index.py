"""Video frame indexes kept across loaders (issue 28, video5): the index of a video that is a tar
member or a .stk record's field, kept in the cache directory under its shard's identity and its
place in the shard, so a new loader's first epoch reads what a later epoch reads; a remote video
tree's indexes in the remote cache (s3:// through the s3rver the remote tests use); one index
pass per video whatever the clips of it in flight at once (single flight, counted by the
loader's `indexed` counter), and index files that concurrent writers never leave torn.

Test verdicts come from counters (stats()["indexed"], bytes_read) and the files themselves,
never from the clock.
"""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import stoker

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from test_video import (TREE, TREE_KW, _epoch_clips, _same, _tree_of, _whole_clips,  # noqa: E402
                        full_frames, videos, wds)

assert videos  # the session fixture, used by name

PART = re.compile(r"-s[0-9a-f]{15}$")  # a part's cache entry: <sha256(key)>-s<hash>


def _parts(cache):
    return sorted(p for p in cache.rglob("*") if p.is_file() and PART.search(p.name))


NAMES = ["h264.mp4", "hevc.mkv", "vp9.webm", "vfr.mp4"]
KW = dict(batch_size=2, frames_per_clip=4, frame_step=2, clips_per_video=2, seed=3, shuffle=True,
          transforms=full_frames(), output="numpy", num_workers=1)


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """Two videos whose GOPs weigh more than libavformat's 32 KiB reads."""
    import gen_videos
    d = tmp_path_factory.mktemp("bigvideos")
    out = {"a": [], "b": []}
    for k, (cls, codec) in enumerate((("a", "h264"), ("b", "hevc"))):
        (d / cls).mkdir()
        p = d / cls / f"{codec}.mp4"
        gen_videos.encode(str(p), n_frames=150, size=(320, 192), codec=codec, gop=10, bframes=2,
                          seed=40 + k)
        out[cls].append(str(p))
    return out


def _data(videos, tmp_path, kind):
    """A tar or a .stk shard of 4 videos (videos: the session's, or big's)."""
    if "a" in videos:
        paths = videos["a"] + videos["b"]
        root = tmp_path / "tree"
        for p in paths:
            (root / os.path.basename(os.path.dirname(p))).mkdir(parents=True, exist_ok=True)
            os.link(p, root / os.path.basename(os.path.dirname(p)) / os.path.basename(p))
    else:
        paths = [videos[n] for n in NAMES]
        root = _tree_of(videos, tmp_path / "tree", TREE)
    if kind == "tar":
        return wds(tmp_path, paths)
    stk = str(tmp_path / "v.stk")
    stoker.pack(str(root), stk)
    return stk


def _run(data, kw, epochs=1, repeat=False):
    """Clips and bytes read per epoch (epoch 0 twice with repeat), and the videos indexed, of a
    new loader."""
    with stoker.Loader(data, **kw) as loader:
        out = [_epoch_clips(loader, 0 if repeat else e) for e in range(epochs)]
        return out, loader.stats()["indexed"]


@pytest.mark.parametrize("kind", ["tar", "stk"])
def test_member_and_record_index_kept_in_the_cache_dir(big, tmp_path, kind):
    """A tar member's or a .stk record's video index is kept in the cache directory: a new
    loader's first epoch indexes nothing (stats()["indexed"] 0, where the first loader indexed
    each of its 2 videos once), reads what the first loader read when it read the same epoch
    again from its memory (a tar: the header and the clip's GOPs, under half the whole videos the
    first epoch read), and gives the same clips; without a cache
    directory nothing is kept and each new loader indexes again."""
    data = _data(big, tmp_path, kind)
    cache = tmp_path / "cache"
    kw = dict(KW, cache_dir=str(cache), clips_per_video=1)
    (first, later), indexed = _run(data, kw, epochs=2, repeat=True)
    assert indexed == 2
    _same(later[0], first[0])
    parts = _parts(cache)
    assert len(parts) == 2, sorted(cache.rglob("*"))
    made = [(p.stat().st_ino, p.read_bytes()) for p in parts]
    assert all(b[:8] == b"STKVIX01" for _, b in made)
    (again,), indexed = _run(data, kw)
    assert indexed == 0
    _same(again[0], first[0])
    if kind == "tar":  # the header and the clip's GOPs (a .stk record is read whole to check
        # its checksum on a dataset's first read of it, index or not)
        assert again[1] * 2 < first[1], (first[1], later[1], again[1])
    assert [(p.stat().st_ino, p.read_bytes()) for p in parts] == made  # read, not rewritten
    (none,), indexed = _run(data, dict(kw, cache_dir=""))
    assert indexed == 2
    _same(none[0], first[0])


@pytest.mark.parametrize("kind", ["tar", "stk"])
def test_member_index_stale_or_damaged_is_rebuilt(videos, tmp_path, kind):
    """A kept member index is trusted only for the shard it was made from: the shard rewritten
    (another mtime, inode or size) indexes its videos again, into new entries; an entry damaged,
    truncated or emptied is ignored and rewritten; the clips are those of the data read whole."""
    data = _data(videos, tmp_path, kind)
    cache = tmp_path / "cache"
    kw = dict(KW, cache_dir=str(cache))
    (first,), _ = _run(data, kw)
    good = {p: p.read_bytes() for p in _parts(cache)}
    for k, (p, b) in enumerate(sorted(good.items())):
        bad = bytearray(b)
        if k == 0:
            bad[len(bad) // 2] ^= 0x40  # damaged
        elif k == 1:
            bad = bad[:-9]  # truncated
        elif k == 2:
            bad = b""  # emptied
        else:
            bad[20] ^= 0x01  # the identity: another shard's
        p.write_bytes(bytes(bad))
    (got,), indexed = _run(data, kw)
    assert indexed == 4
    _same(got[0], first[0])
    assert {p: p.read_bytes() for p in _parts(cache)} == good  # rewritten as they were
    # the shard replaced by a copy (another inode and mtime): indexed again, new entries
    blob = open(data, "rb").read()
    os.unlink(data)
    open(data, "wb").write(blob)
    (got,), indexed = _run(data, kw)
    assert indexed == 4
    _same(got[0], first[0])
    assert len(_parts(cache)) == 4  # same keys (path, place), the new identity inside
    assert {p: p.read_bytes() for p in _parts(cache)} != good
    (_,), indexed = _run(data, kw)
    assert indexed == 0
    os.environ["STOKER_READ_WHOLE"] = "1"
    try:
        (whole,), _ = _run(data, KW)
    finally:
        del os.environ["STOKER_READ_WHOLE"]
    _same(got[0], whole[0])


@pytest.mark.parametrize("kind", ["tree", "tar", "stk"])
def test_one_index_pass_per_video_with_its_clips_in_flight(videos, tmp_path, kind):
    """clips_per_video=8 clips of one video in one batch, on 2 threads: the video is indexed
    once (the other clips in flight wait for that index and read it: stats()["indexed"] is 1,
    every epoch, where each clip indexing it would count up to 8), and the clips are those of
    the data read whole."""
    if kind == "tree":
        data = str(_tree_of(videos, tmp_path / "tree", {"a": ["h264.mp4"]}))
    elif kind == "tar":
        data = wds(tmp_path, [videos["h264.mp4"]])
    else:
        root = _tree_of(videos, tmp_path / "tree", {"a": ["h264.mp4"]})
        data = str(tmp_path / "v.stk")
        stoker.pack(str(root), data)
    kw = dict(batch_size=8, frames_per_clip=3, frame_step=2, clips_per_video=8, seed=1,
              shuffle=True, transforms=full_frames(), output="numpy", num_workers=2,
              cache_dir="")
    (e0, e1), indexed = _run(data, kw, epochs=2)
    assert indexed == 1
    os.environ["STOKER_READ_WHOLE"] = "1"
    try:
        (w0, w1), indexed_whole = _run(data, kw, epochs=2)
    finally:
        del os.environ["STOKER_READ_WHOLE"]
    assert indexed_whole == 1
    _same(e0[0], w0[0])
    _same(e1[0], w1[0])


WRITER = r"""
import sys, time
import stoker
import torchvision.transforms as T
while open(sys.argv[2]).read() != "go":  # every writer starts once the file holds "go"
    time.sleep(0.001)
kw = dict(batch_size=2, frames_per_clip=4, frame_step=2, clips_per_video=2, seed=3,
          shuffle=True, transforms=T.Compose([T.CenterCrop((96, 160))]), output="numpy",
          num_workers=2)
with stoker.Loader(sys.argv[1], **kw) as loader:
    n = sum(len(b["video"]) for b in loader)
    print(n, loader.stats()["indexed"])
"""


def test_concurrent_writers_never_tear_an_index_file(videos, tmp_path):
    """Four processes index the same tree at once (each writes every video's `<video>.stkvidx`,
    racing on the same names, released together by one file's content, not a delay): every index
    file left is whole (a new loader indexes nothing and reads each: stats()["indexed"] 0), and no
    temporary file is left behind. Repeated over three rounds from no index files."""
    root = _tree_of(videos, tmp_path / "tree", TREE)
    gate = tmp_path / "gate"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(stoker.__path__[0])] + sys.path))
    for _ in range(3):
        for p in root.glob("*/*.stkvidx"):
            p.unlink()
        gate.write_text("wait")
        procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(root), str(gate)],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for _ in range(4)]
        gate.write_text("go")
        indexed = 0
        for p in procs:
            out, err = p.communicate(timeout=240)
            assert p.returncode == 0, err.decode()[-2000:]
            assert out.split()[0] == b"8"  # its 8 clips (indexed itself or read from a file)
            indexed += int(out.split()[1])
        assert indexed >= 4  # every video indexed (by one process or more)
        idx = sorted(root.glob("*/*.stkvidx"))
        assert len(idx) == 4
        assert not [p for p in root.rglob("*") if ".tmp." in p.name]
        with stoker.Loader(str(root), **TREE_KW) as loader:
            got, _ = _epoch_clips(loader, 0)
            assert loader.stats()["indexed"] == 0
        _same(got, _whole_clips(root, TREE_KW, 0))


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    from s3util import S3Server, s3rver_command
    cmd = s3rver_command()
    if not cmd:
        pytest.skip("s3rver cannot be installed here (npm)")
    srv = S3Server(cmd, tmp_path_factory.mktemp("s3video") / "root").start()
    try:
        yield srv
    finally:
        srv.stop()


def test_remote_video_tree_index_in_the_remote_cache(videos, s3, tmp_path, monkeypatch):
    """A class-per-folder tree of videos on S3 (s3rver): the first loader indexes each video once
    and keeps its index in the remote cache (an aux entry `stkvidx` under the object's URL, ETag
    and size); a second loader indexes none (stats()["indexed"] 0) and its first epoch reads
    no more than the first's; an object replaced by another video (another ETag and size) is
    indexed again, alone, and its clips are the new video's; the clips equal the local tree's
    read whole."""
    from s3util import anonymous_endpoint
    anonymous_endpoint(monkeypatch, s3.endpoint)
    root = _tree_of(videos, tmp_path / "tree", TREE)
    for p in sorted(root.glob("*/*.*")):
        s3.put(f"vtree/{p.parent.name}/{p.name}", p.read_bytes())
    cache = tmp_path / "cache"
    kw = dict(TREE_KW, cache_dir=str(cache))

    def entries():
        return sorted(p for p in cache.rglob("*") if p.name.endswith("-stkvidx"))

    (first,), indexed = _run("s3://data/vtree/", kw)
    assert indexed == 4
    assert len(entries()) == 4, sorted(cache.rglob("*"))
    made = [(p.stat().st_ino, p.read_bytes()) for p in entries()]
    assert all(b[:8] == b"STKVIX01" for _, b in made)
    _same(first[0], _whole_clips(root, TREE_KW, 0))
    (again,), indexed = _run("s3://data/vtree/", kw)
    assert indexed == 0
    _same(again[0], first[0])
    assert again[1] <= first[1], (first[1], again[1])  # (small videos: 32 KiB reads cover them)
    assert [(p.stat().st_ino, p.read_bytes()) for p in entries()] == made
    # another video under h264.mp4's key
    import gen_videos
    gen_videos.encode(str(root / "a" / "h264.mp4"), n_frames=33, size=(160, 96), codec="h264",
                      gop=8, seed=77)
    s3.put("vtree/a/h264.mp4", (root / "a" / "h264.mp4").read_bytes())
    (changed,), indexed = _run("s3://data/vtree/", kw)
    assert indexed == 1
    assert len(entries()) == 5  # the new version's entry beside the old one's
    _same(changed[0], _whole_clips(root, TREE_KW, 0))
    (_,), indexed = _run("s3://data/vtree/", kw)
    assert indexed == 0
    # without a cache directory nothing is kept: each loader indexes every video
    (_,), indexed = _run("s3://data/vtree/", dict(TREE_KW, cache_dir=""))
    assert indexed == 4

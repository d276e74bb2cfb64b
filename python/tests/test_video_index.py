"""Video frame indexes kept across loaders (issue 28, video5 and video6): the indexes of a shard's
videos (tar members, gzipped or not, and .stk records' fields) kept beside the shard as one table
(`<shard>.stkvidx`), or in the cache directory where the shard's directory takes none, checked
against the shard's identity, so a new loader's first epoch reads what a later epoch reads; a
class-per-folder tree's in a second process (no video probed again); a remote video tree's
indexes in the remote cache (s3:// through the s3rver the remote tests use); one index pass per
video whatever the clips of it in flight at once (single flight, counted by the loader's
`indexed` counter), and index files that concurrent writers never leave torn.

Test verdicts come from counters (stats()["indexed"], bytes_read) and the files themselves,
never from the clock.
"""
import os
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


def _stats(data, kw, epochs=1, repeat=False):
    """As _run, with the loader's whole stats()."""
    with stoker.Loader(data, **kw) as loader:
        out = [_epoch_clips(loader, 0 if repeat else e) for e in range(epochs)]
        return out, loader.stats()


def _table(data):
    """The shard's index table beside it (`<shard>.stkvidx`): (inode, bytes), or None."""
    p = data + ".stkvidx"
    return (os.stat(p).st_ino, open(p, "rb").read()) if os.path.isfile(p) else None


@pytest.mark.parametrize("kind", ["tar", "stk"])
def test_shard_index_kept_beside_the_shard(big, tmp_path, kind):
    """The indexes of a shard's videos (tar members, .stk records' fields) are kept beside the
    shard as one table, `<shard>.stkvidx`, written by the loader that indexed them, with no cache
    directory: a new loader's first epoch indexes nothing (stats()["indexed"] 0 and
    index_loaded 2, where the first loader indexed each of its 2 videos once), reads what the
    first loader read when it read the same epoch again from its memory (a tar: the header and
    the clip's GOPs, under half the whole videos the first epoch read), gives the same clips, and
    leaves the table as it found it (read, not rewritten)."""
    data = _data(big, tmp_path, kind)
    kw = dict(KW, cache_dir="", clips_per_video=1)
    (first, later), st = _stats(data, kw, epochs=2, repeat=True)
    assert (st["indexed"], st["index_loaded"], st["index_unsaved"]) == (2, 0, 0)
    _same(later[0], first[0])
    made = _table(data)
    assert made and made[1][:8] == b"STKPTAB1" and made[1][32:40] == b"STKVIX01"
    assert not [p for p in tmp_path.iterdir() if ".tmp." in p.name]
    (again,), st = _stats(data, kw)
    assert (st["indexed"], st["index_loaded"]) == (0, 2)
    _same(again[0], first[0])
    if kind == "tar":  # the header and the clip's GOPs (a .stk record is read whole to check
        # its checksum on a dataset's first read of it, index or not)
        assert again[1] * 2 < first[1], (first[1], later[1], again[1])
    assert _table(data) == made  # read, not rewritten


@pytest.mark.parametrize("kind", ["tar", "stk"])
def test_shard_index_in_the_cache_dir_where_the_directory_takes_none(big, tmp_path, kind):
    """Where the shard's directory takes no table (here its name is taken by a directory: a
    read-only directory does the same, but the tests run as root), the table goes to the cache
    directory (one entry `<sha256("local:" + shard path)>-stkvidx`) and a new loader reads it
    there; without a cache directory the indexes stay in the loader's memory, counted in
    stats()["index_unsaved"], and the clips are the same."""
    data = _data(big, tmp_path, kind)
    os.makedirs(data + ".stkvidx/taken")
    cache = tmp_path / "cache"
    kw = dict(KW, cache_dir=str(cache), clips_per_video=1)
    (first,), st = _stats(data, kw)
    assert (st["indexed"], st["index_unsaved"]) == (2, 0)
    entries = sorted(p for p in cache.rglob("*") if p.name.endswith("-stkvidx"))
    assert len(entries) == 1, sorted(cache.rglob("*"))
    made = (entries[0].stat().st_ino, entries[0].read_bytes())
    assert made[1][:8] == b"STKPTAB1"
    (again,), st = _stats(data, kw)
    assert (st["indexed"], st["index_loaded"]) == (0, 2)
    _same(again[0], first[0])
    assert (entries[0].stat().st_ino, entries[0].read_bytes()) == made
    (none,), st = _stats(data, dict(kw, cache_dir=""))
    assert (st["indexed"], st["index_loaded"], st["index_unsaved"]) == (2, 0, 2)
    _same(none[0], first[0])
    assert os.listdir(data + ".stkvidx") == ["taken"]


@pytest.mark.parametrize("kind", ["tar", "stk"])
def test_shard_index_stale_or_damaged_is_rebuilt(videos, tmp_path, kind):
    """A shard's table is trusted only whole and only for the shard it was made from: damaged (a
    byte changed), truncated, emptied, or another shard's (its identity changed), it is ignored,
    every video indexed again and the table rewritten as it was; the shard replaced by a copy
    (another inode and mtime) indexes its videos again into a new table; the clips are those of
    the data read whole."""
    data = _data(videos, tmp_path, kind)
    kw = dict(KW, cache_dir="")
    (first,), st = _run(data, kw)
    assert st == 4
    good = _table(data)[1]
    damaged = bytearray(good)
    damaged[len(good) // 2] ^= 0x40
    for bad in (bytes(damaged), good[:-9], b""):  # damaged, truncated, emptied
        open(data + ".stkvidx", "wb").write(bytes(bad))
        (got,), indexed = _run(data, kw)
        assert indexed == 4, bytes(bad[:40])
        _same(got[0], first[0])
        assert _table(data)[1] == good  # rewritten as it was
    # the shard replaced by a copy (another inode and mtime): the table is another shard's
    blob = open(data, "rb").read()
    os.unlink(data)
    open(data, "wb").write(blob)
    (got,), indexed = _run(data, kw)
    assert indexed == 4
    _same(got[0], first[0])
    assert _table(data)[1] != good  # the new identity inside
    (_,), indexed = _run(data, kw)
    assert indexed == 0
    os.environ["STOKER_READ_WHOLE"] = "1"
    try:
        (whole,), _ = _run(data, KW)
    finally:
        del os.environ["STOKER_READ_WHOLE"]
    _same(got[0], whole[0])


def test_gzipped_member_index_kept(videos, tmp_path):
    """Tar members gzipped (`k.mp4.gz`, gunzipped whole at read): each one's index is kept in the
    shard's table under the member's place in the tar and its gunzipped length, so a new loader
    indexes none of them (index_loaded 4); a member replaced by another video of another length
    (the tar rewritten) is indexed again; the clips equal those of the same videos in a plain
    tar."""
    import gzip
    import io
    import tarfile
    paths = [videos[n] for n in NAMES]

    def gz_tar(name, paths):
        tar = str(tmp_path / name)
        with tarfile.open(tar, "w") as t:
            for k, p in enumerate(paths):
                for member, b in ((f"{k:04d}.mp4.gz", gzip.compress(open(p, "rb").read())),
                                  (f"{k:04d}.cls", str(k).encode())):
                    info = tarfile.TarInfo(member)
                    info.size = len(b)
                    t.addfile(info, io.BytesIO(b))
        return tar

    data = gz_tar("g.tar", paths)
    plain = wds(tmp_path, paths, "plain.tar")
    kw = dict(KW, cache_dir="")
    (first,), st = _stats(data, kw)
    assert (st["indexed"], st["index_loaded"]) == (4, 0)
    assert _table(data)[1][:8] == b"STKPTAB1"
    (ref,), _ = _stats(plain, kw)
    _same(first[0], ref[0])
    (again,), st = _stats(data, kw)
    assert (st["indexed"], st["index_loaded"]) == (0, 4)
    _same(again[0], first[0])
    # the tar rewritten with member 1 replaced by member 0's video
    data = gz_tar("g.tar", [paths[0], paths[0]] + paths[2:])
    (changed,), st = _stats(data, kw)
    assert (st["indexed"], st["index_loaded"]) == (4, 0)  # another tar: its table is stale
    (ref,), _ = _stats(wds(tmp_path, [paths[0], paths[0]] + paths[2:], "plain2.tar"), kw)
    _same(changed[0], ref[0])


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


def test_concurrent_writers_never_tear_a_shard_table(videos, tmp_path):
    """Four processes index the same tar at once, each writing its table beside it
    (`v.tar.stkvidx`, merged with what the file holds, atomically), released together by one
    file's content: the table left is whole and lists every video (a new loader indexes none:
    stats()["indexed"] 0, index_loaded 4), and no temporary file is left behind. Three rounds."""
    data = _data(videos, tmp_path, "tar")
    gate = tmp_path / "gate"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(stoker.__path__[0])] + sys.path), STOKER_CACHE_DIR="")
    for _ in range(3):
        if os.path.exists(data + ".stkvidx"):
            os.unlink(data + ".stkvidx")
        gate.write_text("wait")
        procs = [subprocess.Popen([sys.executable, "-c", WRITER, data, str(gate)],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for _ in range(4)]
        gate.write_text("go")
        for p in procs:
            out, err = p.communicate(timeout=240)
            assert p.returncode == 0, err.decode()[-2000:]
            assert out.split()[0] == b"8"
        assert _table(data)[1][:8] == b"STKPTAB1"
        assert not [p for p in tmp_path.iterdir() if ".tmp." in p.name]
        (got,), st = _stats(data, dict(KW, cache_dir=""))
        assert (st["indexed"], st["index_loaded"]) == (0, 4)
    os.environ["STOKER_READ_WHOLE"] = "1"
    try:
        (whole,), _ = _run(data, KW)
    finally:
        del os.environ["STOKER_READ_WHOLE"]
    _same(got[0], whole[0])


OPENER = r"""
import json, sys
import stoker
import torchvision.transforms as T
kw = dict(batch_size=2, frames_per_clip=4, frame_step=2, clips_per_video=1, seed=3,
          shuffle=False, transforms=T.Compose([T.CenterCrop((96, 160))]), output="numpy",
          num_workers=1, cache_dir="")
with stoker.Loader(sys.argv[1], **kw) as loader:
    opened = dict(loader.stats())
    n = sum(len(b["video"]) for b in loader)
    st = loader.stats()
    print(json.dumps({"open": [opened[k] for k in ("bytes_read", "indexed", "index_loaded")],
                      "epoch": [st[k] for k in ("indexed", "index_loaded")], "n": n}))
"""


def test_tree_second_process_probes_no_video(videos, tmp_path):
    """A class-per-folder tree of 8 videos: a process opening it reads no video's bytes and
    indexes nothing at open (stats() once the Loader is made: bytes_read, indexed and
    index_loaded all 0: no file probed), then its epoch indexes each video once and writes its
    `<video>.stkvidx` beside it; a second process opening the tree again reads nothing at open,
    and its epoch indexes no video (indexed 0) and reads each one's index file once
    (index_loaded 8)."""
    layout = {"a": ["h264.mp4", "vfr.mp4", "hevc.mkv", "vp9.webm"],
              "b": ["h264.mp4", "vfr.mp4", "hevc.mkv", "vp9.webm"]}
    root = _tree_of(videos, tmp_path / "tree", layout)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(stoker.__path__[0])] + sys.path))

    def child():
        import json
        out = subprocess.run([sys.executable, "-c", OPENER, str(root)], env=env,
                             capture_output=True, timeout=240)
        assert out.returncode == 0, out.stderr.decode()[-2000:]
        return json.loads(out.stdout)

    first = child()
    assert first == {"open": [0, 0, 0], "epoch": [8, 0], "n": 8}
    assert len(list(root.glob("*/*.stkvidx"))) == 8
    second = child()
    assert second == {"open": [0, 0, 0], "epoch": [0, 8], "n": 8}


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

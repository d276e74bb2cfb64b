"""WebDataset tar shards read directly (format "wds"): one sample per key, one field per
extension; exactly-once epochs over shuffled ranks, equality with the same records packed to
.stk, resume, the index cache beside the shards, and bad inputs that must fail with the shard,
key and byte offset named. Shards are written here with Python's tarfile (ustar, GNU long
names and PAX headers, as real shards have)."""
import io
import os
import tarfile

import numpy as np
import pytest

import stoker

N = 24


def _sample(i):
    rng = np.random.default_rng(i)
    return {"jpg": rng.integers(0, 255, 50 + i * 7, dtype=np.uint8).tobytes(),
            "cls": str(i % 5).encode(),
            "seg.png": bytes([i]) * (3 + i % 4),
            "json": b'{"i": %d}' % i}


def _add(tf, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = 1700000000
    tf.addfile(ti, io.BytesIO(data))


def _write(path, items, fmt=tarfile.USTAR_FORMAT):
    """items: (key, {ext: bytes}) in order, or (name, bytes) for a raw member."""
    with tarfile.open(path, "w", format=fmt) as tf:
        for key, val in items:
            if isinstance(val, dict):
                for ext, data in val.items():
                    _add(tf, f"{key}.{ext}", data)
            else:
                _add(tf, key, val)
    return str(path)


def _shards(root, n=N, per=8, fmts=(tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT,
                                    tarfile.PAX_FORMAT)):
    root.mkdir(exist_ok=True)
    paths = []
    for s in range(0, n, per):
        k = s // per
        # a long directory forces GNU 'L' entries / PAX path= records in those formats
        d = "d" * 120 + "/" if k else "train/"
        items = [(f"{d}s{i:05d}", _sample(i)) for i in range(s, min(n, s + per))]
        paths.append(_write(root / f"shard-{k:06d}.tar", items, fmts[k % len(fmts)]))
    return paths


@pytest.fixture
def shards(tmp_path):
    return _shards(tmp_path / "wds")


def test_fields_and_values(shards, tmp_path):
    pattern = str(tmp_path / "wds" / "shard-{000000..000002}.tar")
    ds = stoker.Dataset(pattern)
    assert ds.format == "wds" and len(ds) == N and "wds" in stoker.formats()
    assert [(f["name"], f["kind"]) for f in ds.fields] == [
        ("__key__", "bytes"), ("cls", "int64"), ("jpg", "bytes"), ("json", "bytes"),
        ("seg.png", "bytes")]
    for i in range(N):
        r = ds[i]
        want = _sample(i)
        assert r["cls"] == i % 5 and r["jpg"] == want["jpg"] and r["json"] == want["json"]
        assert r["seg.png"] == want["seg.png"]
        assert r["__key__"].decode().endswith(f"s{i:05d}")
    assert ds[9]["__key__"] == ("d" * 120 + "/s00009").encode()  # GNU long name
    assert ds[17]["__key__"] == ("d" * 120 + "/s00017").encode()  # PAX path=
    assert "shard-000001.tar sample" in ds.describe(9)
    # the directory and a list give the same dataset
    assert len(stoker.Dataset(str(tmp_path / "wds"))) == N
    assert len(stoker.Dataset(shards[:2])) == 16


def test_equals_packed(shards, tmp_path):
    out = tmp_path / "packed.stk"
    assert stoker.pack(shards, out)["records"] == N
    direct, packed = stoker.Dataset(shards), stoker.Dataset(str(out))
    assert direct.fields == packed.fields
    assert all(direct[i] == packed[i] for i in range(N))


def test_loader_exactly_once_two_ranks(shards):
    loaders = [stoker.Loader(shards, 5, shuffle=True, seed=11, num_workers=2, rank=rank,
                             world_size=2) for rank in range(2)]
    orders = []
    for epoch in range(2):
        seen = []
        for loader in loaders:
            for b in loader:
                idx = b["index"].numpy().tolist()
                assert b["cls"].numpy().tolist() == [i % 5 for i in idx]
                keys = b.bytes("__key__")
                assert [k.decode()[-6:] for k in keys] == [f"s{i:05d}" for i in idx]
                seen += idx
        assert sorted(seen) == list(range(N)), epoch  # 12 + 12: no padding needed
        orders.append(seen)
    assert orders[0] != orders[1]  # a new permutation each epoch
    for loader in loaders:
        loader.close()


def test_resume_mid_epoch(shards):
    kw = dict(shuffle=True, seed=5, num_workers=2, rank=0, world_size=1)
    full = stoker.Loader(shards, 4, **kw)
    ref = [b["index"].numpy().tolist() for b in full]
    full.close()
    a = stoker.Loader(shards, 4, **kw)
    it = iter(a)
    first = [next(it)["index"].numpy().tolist() for _ in range(2)]
    state = a.state_dict()
    a.close()
    b = stoker.Loader(shards, 4, **kw)
    b.load_state_dict(state)
    rest = [x["index"].numpy().tolist() for x in b]
    b.close()
    assert first + rest == ref


def test_index_cache(tmp_path):
    root = tmp_path / "c"
    root.mkdir()
    p = _write(root / "a.tar", [(f"k{i}", {"cls": b"%d" % i, "txt": b"x" * i}) for i in range(5)])
    ds = stoker.Dataset(p)
    assert len(ds) == 5 and os.path.exists(p + ".stkidx")
    assert ds.metadata == {"index": "scanned", "members": 10}
    ds = stoker.Dataset(p)
    assert ds.metadata == {"index": "cached", "members": 10}
    assert [ds[i]["cls"] for i in range(5)] == list(range(5))
    # a rewritten shard re-indexes (size and mtime differ from the cached ones)
    _write(root / "a.tar", [(f"k{i}", {"cls": b"%d" % (i * 2), "txt": b"yy" * i})
                            for i in range(7)])
    os.utime(p, ns=(1, 1))
    ds = stoker.Dataset(p)
    assert ds.metadata["index"] == "scanned"
    assert len(ds) == 7 and [ds[i]["cls"] for i in range(7)] == [2 * i for i in range(7)]
    # same size, other bytes, other mtime: re-indexed
    _write(root / "a.tar", [(f"j{i}", {"cls": b"%d" % (i * 3), "txt": b"zz" * i})
                            for i in range(7)])
    os.utime(p, ns=(2, 2))
    ds = stoker.Dataset(p)
    assert ds.metadata["index"] == "scanned"
    assert [ds[i]["__key__"] for i in range(7)] == [b"j%d" % i for i in range(7)]
    # a corrupt cache is ignored and rebuilt
    with open(p + ".stkidx", "r+b") as f:
        f.seek(60)
        f.write(b"\xff\xff\xff")
    ds = stoker.Dataset(p)
    assert ds.metadata["index"] == "scanned"
    assert [ds[i]["txt"] for i in range(7)] == [b"zz" * i for i in range(7)]
    # a read-only directory: indexed in memory
    ro = tmp_path / "ro"
    ro.mkdir()
    q = _write(ro / "b.tar", [("k0", {"cls": b"1"})])
    os.chmod(ro, 0o555)
    try:
        assert stoker.Dataset(q)[0]["cls"] == 1
        if os.geteuid() != 0:  # root writes anyway
            assert stoker.Dataset(q).metadata["index"] == "scanned"
            assert not os.path.exists(q + ".stkidx")
    finally:
        os.chmod(ro, 0o755)


def test_truncated_mid_member(shards, tmp_path):
    data = open(shards[0], "rb").read()
    bad = tmp_path / "trunc.tar"
    bad.write_bytes(data[:512 + 20])  # inside the first member's data
    with pytest.raises(stoker.StokerFormatError,
                       match=r"trunc.tar: truncated tar: member 'train/s00000.jpg' at byte 0 "
                             r"needs 50 bytes of data but the file ends 20 bytes after its header"):
        stoker.Dataset(str(bad))
    bad.write_bytes(data[:512 * 5 + 3])  # inside the padding of the 3rd member
    with pytest.raises(stoker.StokerFormatError, match=r"trunc.tar: truncated tar: the file ends "
                       r"inside the padding of member 'train/s00000.seg.png' at byte 2048"):
        stoker.Dataset(str(bad))
    bad.write_bytes(data[:512 * 6 + 300])  # inside the next header
    with pytest.raises(stoker.StokerFormatError,
                       match=r"trunc.tar: truncated tar: 300 stray bytes at byte 3072"):
        stoker.Dataset(str(bad))


def test_not_a_tar(tmp_path):
    bad = tmp_path / "x.tar"
    bad.write_bytes(b"this is not a tar file at all " * 40)
    with pytest.raises(stoker.StokerFormatError, match=r"x.tar: not a tar file at byte 0"):
        stoker.Dataset(str(bad))
    with pytest.raises(stoker.StokerFormatError, match=r"x.tar: not a tar file"):
        stoker.Dataset(str(bad), format="wds")


def test_split_across_shards(tmp_path):
    a = _write(tmp_path / "a.tar", [("k0", {"jpg": b"a"}), ("k1", {"jpg": b"b"})])
    b = _write(tmp_path / "b.tar", [("k1", {"cls": b"1"}), ("k2", {"jpg": b"c", "cls": b"2"})])
    with pytest.raises(stoker.StokerFormatError,
                       match=r"b.tar: sample 'k1' at byte 0 continues the last sample of .*a.tar"):
        stoker.Dataset([a, b])


def test_not_adjacent(tmp_path):
    p = _write(tmp_path / "n.tar", [("k0.jpg", b"a"), ("k1.jpg", b"b"), ("k0.cls", b"0")])
    with pytest.raises(stoker.StokerFormatError,
                       match=r"n.tar: sample 'k0': its files are not adjacent \(member 'k0.cls' "
                             r"at byte 2048"):
        stoker.Dataset(p)
    d = _write(tmp_path / "d.tar", [("k0.jpg", b"a"), ("k0.jpg", b"b")])
    with pytest.raises(stoker.StokerFormatError, match=r"d.tar: sample 'k0' has two 'jpg'"):
        stoker.Dataset(d)


def test_missing_field_raises_or_skips(tmp_path):
    items = [(f"k{i}", {"jpg": b"j" * (i + 1), "cls": b"%d" % i}) for i in range(10)]
    items[4] = ("k4", {"jpg": b"only"})
    p = _write(tmp_path / "m.tar", items)
    ds = stoker.Dataset(p)
    assert len(ds) == 10
    with pytest.raises(stoker.StokerFormatError,
                       match=r"m.tar sample 'k4' \(record 4 of the shard, global 4\) at byte "
                             r"\d+: no 'cls' member"):
        ds[4]
    with pytest.raises(stoker.StokerFormatError, match="k4"):
        list(stoker.Loader(p, 5, num_workers=1, rank=0, world_size=1))
    loader = stoker.Loader(p, 5, num_workers=1, rank=0, world_size=1, on_error="skip")
    idx = [i for b in loader for i in b["index"].numpy().tolist()]
    assert 4 not in idx and len(idx) == 10 and loader.stats()["skipped"] == 1
    loader.close()


def test_non_numeric_cls(tmp_path):
    p = _write(tmp_path / "c.tar", [("k0", {"cls": b"3"}), ("k1", {"cls": b"dog"})])
    ds = stoker.Dataset(p)
    assert ds[0]["cls"] == 3
    with pytest.raises(stoker.StokerFormatError,
                       match=r"c.tar sample 'k1' .* at byte 1024: field 'cls' at byte 1536 is "
                             r"not an ASCII integer \('dog'\)"):
        ds[1]


def test_stale_index_detected(tmp_path):
    import os
    p = _write(tmp_path / "s.tar", [("k0", {"txt": b"abc"}), ("k1", {"txt": b"defg"})])
    os.utime(p, (1e9, 1e9))  # written before the run (a rewrite changes the time)
    ds = stoker.Dataset(p)
    with open(p, "r+b") as f:  # the shard changes under an open dataset
        f.write(b"\0" * 2048)
    with pytest.raises(stoker.StokerIOError, match=r"s\.tar .*changed while open"):
        ds[1]
    os.utime(p, (1e9, 1e9))  # the same damage with the time as it was (bits rotting on disk)
    with pytest.raises(stoker.StokerFormatError, match="does not match the index"):
        ds[1]


def _npy(a):
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def test_gz_members_gunzipped(tmp_path):
    """`json.gz` is the field `json`, gunzipped (as webdataset does); `cls.gz` an int; plain
    and gzipped members of one field mix; the index cache keeps what the gunzip needs."""
    import gzip
    items = [(f"k{i}", {"json.gz": gzip.compress(b'{"i": %d}' % i * (i + 1)),
                        "cls.gz" if i % 2 else "cls": (gzip.compress(b"%d" % i) if i % 2
                                                       else b"%d" % i),
                        "txt": b"t%d" % i}) for i in range(6)]
    p = _write(tmp_path / "g.tar", items)
    for opened in range(2):  # scanned, then from the cache
        ds = stoker.Dataset(p)
        assert ds.shards[0]["metadata"].startswith('{"index": "%s"'
                                                   % ("cached" if opened else "scanned"))
        assert [(f["name"], f["kind"]) for f in ds.fields] == [
            ("__key__", "bytes"), ("cls", "int64"), ("json", "bytes"), ("txt", "bytes")]
        for i in range(6):
            r = ds[i]
            assert r["json"] == b'{"i": %d}' % i * (i + 1) and r["cls"] == i
    loader = stoker.Loader(p, 4, num_workers=2, rank=0, world_size=1)
    got = sorted(len(j) for b in loader for j in b.bytes("json"))
    assert got == sorted(len(b'{"i": %d}' % i) * (i + 1) for i in range(6))
    loader.close()
    out = tmp_path / "g.stk"
    stoker.pack(p, out)
    packed = stoker.Dataset(str(out))
    assert all(packed[i] == ds[i] for i in range(6))


def test_gz_bad_members(tmp_path):
    import gzip
    good = gzip.compress(b"hello world" * 10)
    corrupt = good[:12] + bytes(b ^ 0x55 for b in good[12:-8]) + good[-8:]
    trailer_lies = good[:-4] + (5).to_bytes(4, "little")
    members = [good, b"not gzip at all, but long enough", corrupt, trailer_lies, good + good]
    p = _write(tmp_path / "b.tar", [(f"k{i}", {"txt.gz": m}) for i, m in enumerate(members)])
    ds = stoker.Dataset(p)
    assert ds[0]["txt"] == b"hello world" * 10
    for i, why in [(1, "not valid gzip data"), (2, "not valid gzip data"),
                   (3, "more than the 5 bytes its gzip trailer says"),
                   (4, "bytes after the gzip stream")]:
        with pytest.raises(stoker.StokerFormatError,
                           match=r"b.tar sample 'k%d' .*: field 'txt' \(member 'k%d.txt.gz' at "
                                 r"byte \d+\): .*%s" % (i, i, why)):
            ds[i]
    loader = stoker.Loader(p, 5, num_workers=1, rank=0, world_size=1, on_error="skip")
    idx = [i for b in loader for i in b["index"].numpy().tolist()]
    assert set(idx) == {0} and loader.stats()["skipped"] == 4  # skipped ones are replaced
    loader.close()


def test_npy_members_are_arrays(tmp_path):
    """`.npy` members (and `.npy.gz`) become array fields of their dtype and shape."""
    import gzip
    arrs = [np.arange(12, dtype=np.float32).reshape(3, 4) + i for i in range(5)]
    items = [(f"k{i}", {"npy": _npy(arrs[i]), "lbl.npy.gz": gzip.compress(_npy(np.int16(i))),
                        "cls": b"%d" % i}) for i in range(5)]
    p = _write(tmp_path / "n.tar", items)
    ds = stoker.Dataset(p)
    f = {x["name"]: x for x in ds.fields}
    assert f["npy"]["kind"] == "array" and f["npy"]["dtype"] == "float32"
    assert tuple(f["npy"]["shape"]) == (3, 4)
    assert f["lbl.npy"]["dtype"] == "int16" and tuple(f["lbl.npy"]["shape"]) == (1,)
    for i in range(5):
        assert np.array_equal(ds[i]["npy"], arrs[i]) and ds[i]["lbl.npy"].tolist() == [i]
    loader = stoker.Loader(p, 5, num_workers=2, rank=0, world_size=1)
    b = next(iter(loader))
    assert tuple(b["npy"].shape) == (5, 3, 4)
    assert np.array_equal(np.sort(b["npy"].numpy()[:, 0, 0]), np.arange(5, dtype=np.float32))
    loader.close()


def test_npy_members_inconsistent(tmp_path):
    items = [("k0", {"npy": _npy(np.zeros((2, 2), np.uint8))}),
             ("k1", {"npy": _npy(np.zeros((2, 3), np.uint8))}),
             ("k2", {"npy": _npy(np.zeros((2, 2), np.float64))}),
             ("k3", {"npy": b"\x93NUMPY garbage"}),
             ("k4", {"npy": _npy(np.zeros((2, 2), np.uint8))[:-1]})]
    p = _write(tmp_path / "i.tar", items)
    ds = stoker.Dataset(p)
    assert ds[0]["npy"].shape == (2, 2)
    for i, why in [(1, r"a uint8 \[2, 3\] array where the dataset's field is uint8 \[2, 2\]"),
                   (2, r"a float64 \[2, 2\] array where"), (3, "not a .npy file|corrupt .npy"),
                   (4, "3 bytes of data where its header says 4")]:
        with pytest.raises(stoker.StokerFormatError,
                           match=r"i.tar sample 'k%d' .*member 'k%d.npy' at byte \d+\): .*(%s)"
                                 % (i, i, why)):
            ds[i]
    # the first sample's .npy defines the field: a bad one there fails the open, naming it
    bad = _write(tmp_path / "f.tar", [("k0", {"npy": _npy(np.array([1, "a"], dtype=object))})])
    with pytest.raises(stoker.StokerNotSupportedError,
                       match=r"f.tar: member 'k0.npy' at byte 0: object dtype"):
        stoker.Dataset(bad)

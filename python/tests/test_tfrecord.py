"""TFRecord files read directly (issue 12): frames and tf.train.Example written by this file (no
tensorflow): exact epochs, shuffle and ranks through stoker.Loader, every field equal to the same
records packed to .stk, mid-epoch resume, the DALI text index (read, validated, written as a
cache), and bad input (length CRC, data CRC, truncated last frame, a garbage protobuf) each an
error naming the file, record and byte offset."""
import json
import os
import struct

import numpy as np
import pytest

import stoker

try:
    import crcmod.predefined
    _crc = crcmod.predefined.mkCrcFun("crc-32c")
except ImportError:  # pure Python: slow, fine for the tests' small records
    _T = []
    for _i in range(256):
        _c = _i
        for _ in range(8):
            _c = (_c >> 1) ^ (0x82F63B78 if _c & 1 else 0)
        _T.append(_c)

    def _crc(data):
        c = 0xFFFFFFFF
        for b in data:
            c = (c >> 8) ^ _T[(c ^ b) & 0xFF]
        return c ^ 0xFFFFFFFF


def masked_crc(data):
    c = _crc(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# ---- a tiny writer: protobuf wire format for tf.train.Example, and TFRecord frames ----

def _varint(v):
    v &= (1 << 64) - 1  # int64 is two's complement on the wire
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _ld(field, payload):
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def feature(value, packed=True):
    """A tf.train.Feature: bytes -> bytes_list, int/list of int -> int64_list, float/list of
    float -> float_list; packed=False writes repeated values one by one."""
    vals = value if isinstance(value, (list, tuple)) else [value]
    if isinstance(vals[0], bytes):
        body, kind = b"".join(_ld(1, v) for v in vals), 1
    elif isinstance(vals[0], float):
        kind = 2
        body = (_ld(1, b"".join(struct.pack("<f", v) for v in vals)) if packed else
                b"".join(b"\x0d" + struct.pack("<f", v) for v in vals))
    else:
        kind = 3
        body = (_ld(1, b"".join(_varint(v) for v in vals)) if packed else
                b"".join(b"\x08" + _varint(v) for v in vals))
    return _ld(kind, body)


def example(features, packed=True, junk=False):
    """A serialized tf.train.Example of {key: value}; junk=True adds unknown fields the reader
    must skip (every wire type) at each level."""
    unknown = (_varint(9 << 3 | 0) + _varint(300) + _varint(10 << 3 | 1) + b"\0" * 8 +
               _ld(11, b"skip me") + _varint(12 << 3 | 5) + b"\0" * 4) if junk else b""
    entries = b"".join(_ld(1, _ld(1, k.encode()) + _ld(2, feature(v, packed) + unknown) + unknown)
                       for k, v in features.items())
    return unknown + _ld(1, entries + unknown)


def frame(data):
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", masked_crc(n)) + data + struct.pack("<I", masked_crc(data))


def write_tfrecord(path, examples):
    """Write serialized examples as TFRecord frames; returns each frame's byte offset."""
    offsets, at = [], 0
    with open(path, "wb") as f:
        for e in examples:
            fr = frame(e)
            offsets.append(at)
            f.write(fr)
            at += len(fr)
    return offsets


# ---- fixtures ----

def _records(n, seed=0):
    rng = np.random.default_rng(seed)
    return [{"image/encoded": rng.integers(0, 255, 20 + i % 7, dtype=np.uint8).tobytes(),
             "image/class/label": int(rng.integers(-5, 1000)),
             "bbox": [float(x) for x in rng.random(4, dtype=np.float32)],
             "score": float(np.float32(rng.random())),
             "ids": [int(x) for x in rng.integers(-2**62, 2**62, 3)]} for i in range(n)]


def _shards(root, recs, per=7, ext=".tfrecord"):
    os.makedirs(root, exist_ok=True)
    paths = []
    for s in range(0, len(recs), per):
        p = os.path.join(root, f"train-{s // per:03d}{ext}")
        write_tfrecord(p, [example(r, packed=(s // per) % 2 == 0, junk=s == 0)
                           for r in recs[s:s + per]])
        paths.append(p)
    return paths


@pytest.fixture
def data(tmp_path):
    recs = _records(40)
    _shards(str(tmp_path / "tf"), recs)
    return str(tmp_path / "tf"), recs


def _check_record(got, rec):
    assert got["image/encoded"] == rec["image/encoded"]
    assert got["image/class/label"] == rec["image/class/label"]
    assert np.array_equal(np.asarray(got["bbox"]), np.array(rec["bbox"], np.float32))
    assert np.float32(got["score"]) == np.float32(rec["score"])
    assert np.asarray(got["ids"]).tolist() == rec["ids"]


# ---- reading ----

def test_schema_fields_and_values(data):
    root, recs = data
    ds = stoker.Dataset(root)
    assert ds.format == "tfrecord" and len(ds) == 40
    assert [f["name"] for f in ds.fields] == ["bbox", "ids", "image/class/label",
                                              "image/encoded", "score"]
    kinds = {f["name"]: f["kind"] for f in ds.fields}
    assert kinds["image/encoded"] == "bytes" and kinds["score"] == "float32"
    assert kinds["image/class/label"] == "int64" and kinds["bbox"] == "array"
    for i in range(40):
        _check_record(ds[i], recs[i])
    assert ds.describe(9) == \
        f"{root}/train-001.tfrecord record 2 (global 9) at byte {_off(root, 1, 2)}"


def _off(root, shard, local):
    """Byte offset of frame `local` in train-<shard>.tfrecord, from the frames' lengths."""
    with open(f"{root}/train-{shard:03d}.tfrecord", "rb") as f:
        b = f.read()
    at = 0
    for _ in range(local):
        at += struct.unpack_from("<Q", b, at)[0] + 16
    return at


def test_detection_by_content_and_glob(data, tmp_path):
    root, recs = data
    plain = tmp_path / "noext-00000-of-00001"  # TF's own naming: no extension
    write_tfrecord(plain, [example(r) for r in recs[:3]])
    ds = stoker.Dataset(str(plain))
    assert ds.format == "tfrecord" and len(ds) == 3
    g = stoker.Dataset(root + "/train-00[0-1].tfrecord")
    assert len(g) == 14
    assert len(stoker.Dataset(root + "/train-{000..002}.tfrecord")) == 21
    assert "tfrecord" in stoker.formats()


def test_equal_to_packed_stk(data, tmp_path):
    root, _ = data
    ds = stoker.Dataset(root)
    out = tmp_path / "p.stk"
    assert stoker.pack(root, out)["records"] == 40
    packed = stoker.Dataset(str(out))
    assert [f["name"] for f in packed.fields] == [f["name"] for f in ds.fields]
    for i in range(40):
        a, b = ds[i], packed[i]
        assert a.keys() == b.keys()
        for k in a:
            assert np.array_equal(np.asarray(a[k]), np.asarray(b[k])), (i, k)


def _epoch(loader):
    return [int(x) for b in loader for x in b["index"].tolist()]


def test_loader_exactly_once_shuffle_and_ranks(data):
    root, recs = data
    loader = stoker.Loader(root, 6, shuffle=True, seed=5, num_workers=2, rank=0, world_size=1)
    seen = []
    for epoch in range(2):
        got = []
        for b in loader:
            for j, i in enumerate(b["index"].tolist()):
                got.append(i)
                assert b["image/class/label"][j].item() == recs[i]["image/class/label"]
                assert b["ids"][j].tolist() == recs[i]["ids"]
        assert sorted(got) == list(range(40)), epoch
        seen.append(got)
    assert seen[0] != seen[1] and seen[0] != list(range(40))  # shuffled, per epoch
    loader.close()
    ranks = [_epoch(stoker.Loader(root, 4, shuffle=True, seed=5, rank=r, world_size=2))
             for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) == 20
    assert sorted(ranks[0] + ranks[1]) == list(range(40))


def test_resume_mid_epoch(data):
    root, _ = data
    full = _epoch(stoker.Loader(root, 4, shuffle=True, seed=9, num_workers=2))
    loader = stoker.Loader(root, 4, shuffle=True, seed=9, num_workers=2)
    it = iter(loader)
    head = [int(x) for _ in range(3) for x in next(it)["index"].tolist()]
    state = json.loads(json.dumps(loader.state_dict()))
    loader.close()
    resumed = stoker.Loader(root, 4, shuffle=True, seed=1, num_workers=1)
    resumed.load_state_dict(state)
    assert head + _epoch(resumed) == full
    other = stoker.Loader(root + "/train-000.tfrecord", 4)
    with pytest.raises(stoker.Error, match="fingerprint|different dataset|another dataset"):
        other.load_state_dict(state)


def test_index_cache_written_and_used(data, tmp_path):
    root, recs = data
    idx = root + "/train-000.tfrecord.idx"
    assert not os.path.exists(idx)
    assert len(stoker.Dataset(root)) == 40
    assert os.path.exists(idx)  # written by the first open (the directory is writable)
    pairs = [tuple(map(int, line.split())) for line in open(idx).read().splitlines()]
    assert [o for o, _ in pairs] == [_off(root, 0, k) for k in range(7)]
    assert all(o + n == o2 for (o, n), (o2, _) in zip(pairs, pairs[1:]))
    # an index that covers the file is used as it is; a stale one cannot mislead a read
    idx1 = root + "/train-001.tfrecord.idx"
    pairs = [tuple(map(int, line.split())) for line in open(idx1).read().splitlines()]
    merged = [(0, pairs[0][1] + pairs[1][1])] + pairs[2:]
    open(idx1, "w").write("".join(f"{o} {n}\n" for o, n in merged))
    ds = stoker.Dataset(root)
    assert len(ds) == 39
    with pytest.raises(stoker.StokerFormatError, match=r"train-001.tfrecord record 0 \(global 7\) "
                       r"at byte 0: frame length differs from the index"):
        ds[7]
    open(idx1, "w").write("0 16\n")
    assert len(stoker.Dataset(root)) == 40
    # an index that does not describe the file is ignored (the file is scanned)
    open(idx, "w").write("0 16\n")
    assert len(stoker.Dataset(root)) == 40
    # read-only directory: the index stays in memory
    ro = tmp_path / "ro"
    _shards(str(ro), recs[:5])
    os.chmod(ro, 0o555)
    try:
        assert len(stoker.Dataset(str(ro))) == 5
        assert os.geteuid() == 0 or not os.path.exists(ro / "train-000.tfrecord.idx")
    finally:
        os.chmod(ro, 0o755)


# ---- bad input ----

def _one_file(tmp_path, recs, name="t.tfrecord"):
    p = str(tmp_path / name)
    write_tfrecord(p, [example(r) for r in recs])
    return p, bytearray(open(p, "rb").read())


def test_wrong_length_crc(tmp_path):
    recs = _records(5)
    p, b = _one_file(tmp_path, recs)
    at = sum(len(frame(example(r))) for r in recs[:2])
    b[at + 8] ^= 1
    open(p, "wb").write(b)
    with pytest.raises(stoker.StokerFormatError,
                       match=rf"t\.tfrecord record 2 at byte {at}: length CRC mismatch"):
        stoker.Dataset(p, format="tfrecord")


def test_wrong_data_crc_is_skippable(tmp_path):
    recs = _records(10)
    p, b = _one_file(tmp_path, recs)
    at = sum(len(frame(example(r))) for r in recs[:4])
    b[at + 20] ^= 0x40  # inside the image bytes
    open(p, "wb").write(b)
    ds = stoker.Dataset(p)
    with pytest.raises(stoker.StokerFormatError,
                       match=rf"t\.tfrecord record 4 \(global 4\) at byte {at}: data CRC mismatch"):
        ds[4]
    loader = stoker.Loader(p, 5, on_error="skip")
    got = _epoch(loader)
    assert len(got) == 10 and 4 not in got
    assert loader.stats()["skipped"] == 1
    with pytest.raises(stoker.Error, match="data CRC mismatch"):
        _epoch(stoker.Loader(p, 5))


def test_truncated_last_frame(tmp_path):
    recs = _records(4)
    p, b = _one_file(tmp_path, recs)
    at = sum(len(frame(example(r))) for r in recs[:3])
    for cut in (5, 20, len(b) - at - 2):
        open(p, "wb").write(b[:len(b) - cut])
        with pytest.raises(stoker.StokerFormatError,
                           match=rf"t\.tfrecord record 3 at byte {at}: truncated frame"):
            stoker.Dataset(p)
        if os.path.exists(p + ".idx"):
            os.remove(p + ".idx")


def test_garbage_protobuf_and_schema_mismatch(tmp_path):
    recs = _records(6)
    exs = [example(r) for r in recs]
    exs[2] = b"\x0a\xff\xff\xff\xff\x0f garbage"  # features with a length past the end
    exs[3] = example({**recs[3], "extra": 1})
    r4 = dict(recs[4])
    del r4["score"]
    exs[4] = example(r4)
    exs[5] = example({**recs[5], "ids": [1, 2]})
    p = str(tmp_path / "g.tfrecord")
    offs = write_tfrecord(p, exs)
    ds = stoker.Dataset(p)
    _check_record(ds[1], recs[1])
    for i, why in [(2, "not a tf.train.Example .*overruns"), (3, "feature 'extra' is not in"),
                   (4, "feature 'score' is missing"),
                   (5, "feature 'ids' is a int64 list of 2 values, the schema says int64 of 3")]:
        with pytest.raises(stoker.StokerFormatError,
                           match=rf"g\.tfrecord record {i} \(global {i}\) at byte {offs[i]}: {why}"):
            ds[i]
    loader = stoker.Loader(p, 3, on_error="skip")
    assert sorted(set(_epoch(loader))) == [0, 1] and loader.stats()["skipped"] == 4


def test_unsupported_first_record(tmp_path):
    p = str(tmp_path / "u.tfrecord")
    write_tfrecord(p, [example({"tags": [b"a", b"b"]})])
    with pytest.raises(stoker.StokerNotSupportedError, match="feature 'tags' has a bytes_list of 2"):
        stoker.Dataset(p)
    write_tfrecord(p, [b"\x0a\x00"])
    with pytest.raises(stoker.StokerFormatError, match="u.tfrecord record 0 .*no features"):
        stoker.Dataset(p)

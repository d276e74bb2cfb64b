"""LMDB environments read directly (format "lmdb"): one record per key in bytewise key order,
fields __key__ and value; and stoker.pack_records for pickled values C cannot read. Environments
are written here with py-lmdb (Debian's python3-lmdb)."""
import io
import os
import pickle

import numpy as np
import pytest

import stoker
from source_checks import check_equals_packed, check_exactly_once, check_resume

lmdb = pytest.importorskip("lmdb")

N = 41


def _values(n=N):
    rng = np.random.default_rng(1)
    return {str(i).encode(): rng.integers(0, 256, 10 + 37 * i, dtype=np.uint8).tobytes()
            for i in range(n)}


def _write(path, items, **kw):
    env = lmdb.open(str(path), map_size=1 << 26, **kw)
    with env.begin(write=True) as t:
        for k, v in items.items():
            t.put(k, v)
    env.close()
    return str(path)


@pytest.fixture
def env(tmp_path):
    return _write(tmp_path / "db", _values())


def test_keys_in_bytewise_order_and_values(env):
    ds = stoker.Dataset(env)
    assert ds.format == "lmdb" and len(ds) == N
    assert [f["name"] for f in ds.fields] == ["__key__", "value"]
    vals = _values()
    keys = sorted(vals)  # b"10" < b"2"
    assert [ds[i]["__key__"] for i in range(N)] == keys
    assert all(ds[i]["value"] == vals[keys[i]] for i in range(N))
    assert ds.describe(2) == f"{env}/data.mdb key '{keys[2].decode()}' (record 2)"
    assert stoker.Dataset(os.path.join(env, "data.mdb")).format == "lmdb"  # the file itself


def test_subdir_false_environment(tmp_path):
    path = _write(tmp_path / "one.lmdb", {b"a": b"1", b"b": b"22"}, subdir=False)
    ds = stoker.Dataset(path)  # detected by the magic in the meta page
    assert ds.format == "lmdb" and [ds[i]["value"] for i in range(2)] == [b"1", b"22"]


def test_loader_semantics(env, tmp_path):
    """Exactly once with shuffle over two ranks, equal to its packed copy, resumable."""
    check_exactly_once(env, N)
    check_equals_packed(env, tmp_path, N)
    check_resume(env)


def test_not_an_environment(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(stoker.StokerFormatError, match="empty: not an LMDB environment"):
        stoker.Dataset(str(empty), format="lmdb")
    bogus = tmp_path / "bogus"
    bogus.mkdir()
    (bogus / "data.mdb").write_bytes(b"\0" * 8192)
    with pytest.raises(stoker.StokerFormatError, match="bogus/data.mdb: not an LMDB environment"):  # the file itself
        stoker.Dataset(str(bogus))
    f = tmp_path / "x.bin"
    f.write_bytes(b"hello" * 100)
    with pytest.raises(stoker.StokerFormatError, match="x.bin: not an LMDB environment"):
        stoker.Dataset(str(f), format="lmdb")


def _jpeg(i):
    from PIL import Image
    buf = io.BytesIO()
    arr = np.full((8 + i % 3, 10, 3), (i * 7) % 256, np.uint8)
    Image.fromarray(arr).save(buf, format="JPEG")
    return buf.getvalue()


def test_pack_records_from_pickled_lmdb(tmp_path):
    """The torchvision-era layout: value = pickle.dumps((jpeg_bytes, label)), converted with
    the three lines of docs/formats.md."""
    n = 23
    items = {f"{i:05d}".encode(): pickle.dumps((_jpeg(i), i % 4)) for i in range(n)}
    items[b"__len__"] = pickle.dumps(n)  # folder2lmdb's meta keys
    src = _write(tmp_path / "pickled", items)
    out = tmp_path / "shards"
    # -- the documented conversion --
    env = lmdb.open(src, readonly=True, lock=False)
    recs = ({"image": img, "label": lab} for k, v in env.begin().cursor()
            if not k.startswith(b"__") for img, lab in [pickle.loads(v)])
    r = stoker.pack_records(recs, out, shard_size=4096)
    env.close()
    assert r["records"] == n and r["shards"] > 1
    ds = stoker.Dataset(str(out))
    assert len(ds) == n and len(ds.shards) == r["shards"]
    assert [f["kind"] for f in ds.fields] == ["bytes", "int64"]
    assert all(ds[i]["image"] == _jpeg(i) and ds[i]["label"] == i % 4 for i in range(n))
    if stoker.has_transforms():
        ld = stoker.Loader(str(out), 8, transforms=[stoker.transforms.Resize((4, 4)),
                                                    stoker.transforms.ToTensor()],
                           num_workers=2, rank=0, world_size=1)
        assert sum(b["image"].shape[0] for b in ld) == n
        ld.close()
    with pytest.raises(stoker.StokerStateError, match="not empty"):
        stoker.pack_records([{"a": 1}], out)


def test_pack_records_schema_inference(tmp_path):
    recs = [{"k": f"r{i}", "x": np.full((2, 3), i, np.int16), "s": i * 0.5, "b": bytearray(b"z")}
            for i in range(5)]
    r = stoker.pack_records(recs, tmp_path / "one.stk")
    assert r == {"records": 5, "shards": 1, "bytes": r["bytes"]}
    ds = stoker.Dataset(str(tmp_path / "one.stk"))
    kinds = {f["name"]: (f["kind"], f["dtype"], tuple(f["shape"])) for f in ds.fields}
    assert kinds["x"] == ("array", "int16", (2, 3)) and kinds["s"][0] == "float32"
    assert ds[3]["k"] == b"r3" and ds[3]["x"].tolist() == [[3] * 3] * 2 and ds[3]["s"] == 1.5
    with pytest.raises(stoker.StokerInvalidError, match="field 'o': cannot store a dict"):
        stoker.pack_records([{"o": {}}], tmp_path / "two.stk")
    with pytest.raises(stoker.StokerInvalidError, match="no records"):
        stoker.pack_records([], tmp_path / "three.stk")

"""stoker._core and the Dataset/Writer layer: version check, exception table, reading back what
was written, and zero-copy export of batch tensors through the buffer protocol."""
import gc
import json
import os
import weakref

import numpy as np
import pytest
import torch

import stoker
from stoker import _core
from conftest import FIELDS, MAIN_N, SMALL_N, bf16_bits, payload, record


def test_version_and_constants():
    assert _core.version() == stoker.__version__
    major, minor, patch = (int(x) for x in stoker.__version__.split("."))
    assert _core.VERSION_NUMBER == major * 10000 + minor * 100 + patch
    assert _core.strerror(_core.EFORMAT) == "malformed or corrupt data"
    assert _core.strerror(12345) == "unknown status code"


def test_exception_table():
    table = {
        _core.EINVAL: (stoker.StokerInvalidError, ValueError),
        _core.ENOMEM: (stoker.StokerMemoryError, MemoryError),
        _core.EIO: (stoker.StokerIOError, OSError),
        _core.EFORMAT: (stoker.StokerFormatError, None),
        _core.ELIMIT: (stoker.StokerLimitError, None),
        _core.ENOTSUP: (stoker.StokerNotSupportedError, None),
        _core.ESTATE: (stoker.StokerStateError, RuntimeError),
        _core.ECANCELED: (stoker.StokerCanceledError, None),
        _core.EBUSY: (stoker.StokerBusyError, stoker.StokerLimitError),  # old except still works
    }
    for status, (cls, builtin) in table.items():
        assert issubclass(cls, stoker.Error)
        assert cls.status == status
        if builtin:
            assert issubclass(cls, builtin)
    assert len({cls for cls, _ in table.values()}) == len(table)


def test_missing_file_is_oserror(tmp_path):
    missing = str(tmp_path / "nope.stk")
    with pytest.raises(stoker.StokerIOError) as e:
        stoker.Dataset(missing)
    assert isinstance(e.value, OSError)
    assert missing in str(e.value)


def test_not_a_shard(tmp_path):
    p = tmp_path / "junk.stk"
    p.write_bytes(b"this is not a shard at all" * 10)
    with pytest.raises(stoker.StokerFormatError) as e:
        stoker.Dataset(str(p))
    assert "junk.stk" in str(e.value)


def test_dataset_reads_back_what_was_written(ds_main):
    ds = stoker.Dataset(ds_main)
    assert len(ds) == MAIN_N
    assert [f["name"] for f in ds.fields] == list(FIELDS)
    kinds = {f["name"]: (f["kind"], f["dtype"], f["shape"]) for f in ds.fields}
    assert kinds["data"] == ("bytes", "uint8", (None,))
    assert kinds["label"] == ("int64", "int64", ())
    assert kinds["vec"] == ("array", "float32", (2, 3))
    assert kinds["bf"] == ("array", "bfloat16", (2,))
    shards = ds.shards
    assert len(shards) == 3
    assert [s["first_record"] for s in shards] == [0, 334, 668]
    assert sum(s["n_records"] for s in shards) == MAIN_N
    assert ds.metadata == {"test": True}
    assert len(ds.fingerprint) == 16
    for i in (0, 1, 333, 334, 999, -1):
        r, want = ds[i], record(i % MAIN_N)
        assert r["data"] == want["data"]
        assert r["label"] == want["label"]
        assert r["score"] == want["score"]
        np.testing.assert_array_equal(r["vec"], want["vec"])
        np.testing.assert_array_equal(r["half"], want["half"])
        np.testing.assert_array_equal(r["bf"], want["bf"])
    with pytest.raises(IndexError):
        ds[MAIN_N]
    ds.close()
    ds.close()
    assert ds.closed
    with pytest.raises(stoker.StokerStateError):
        len(ds)


def test_writer_errors(tmp_path):
    with pytest.raises(stoker.StokerInvalidError):
        stoker.Writer(tmp_path / "a.stk", {"x": "complex"})
    with pytest.raises(stoker.StokerInvalidError):
        stoker.Writer(tmp_path / "a.stk", {})
    w = stoker.Writer(tmp_path / "a.stk", {"x": "bytes", "v": ("int16", (3,))})
    with pytest.raises(stoker.StokerInvalidError):
        w.add({"x": b"1"})  # missing field
    with pytest.raises(stoker.StokerInvalidError):
        w.add({"x": b"1", "v": np.zeros(4, np.int16)})  # wrong shape
    with pytest.raises(stoker.StokerInvalidError):
        w.add({"x": "text", "v": np.zeros(3, np.int16)})  # str is not bytes
    w.add({"x": bytearray(b"ok"), "v": [1, 2, 3]})
    assert w.n_records == 1
    w.abort()
    assert not (tmp_path / "a.stk").exists()
    assert not [p for p in os.listdir(tmp_path)]  # no temporary left behind


def test_writer_context_manager_commits_or_discards(tmp_path):
    with stoker.Writer(tmp_path / "ok.stk", {"x": "int64"}) as w:
        w.add([5])
    assert len(stoker.Dataset(str(tmp_path / "ok.stk"))) == 1
    with pytest.raises(RuntimeError):
        with stoker.Writer(tmp_path / "bad.stk", {"x": "int64"}) as w:
            w.add([5])
            raise RuntimeError("boom")
    assert not (tmp_path / "bad.stk").exists()
    w = stoker.Writer(tmp_path / "dropped.stk", {"x": "int64"})
    w.add([1])
    del w
    gc.collect()
    assert sorted(os.listdir(tmp_path)) == ["ok.stk"]  # nor its temporary file


def test_epoch_order_matches_sampler():
    order = stoker.epoch_order(100, shuffle=True, seed=3, epoch=1)
    assert sorted(order) == list(range(100))
    assert order != list(range(100))
    assert order == stoker.epoch_order(100, True, 3, 1)
    assert order != stoker.epoch_order(100, True, 3, 2)
    assert stoker.epoch_order(10) == list(range(10))


def _first_batch(path, **kw):
    core = _core.Loader(path, batch_size=8, n_threads=2, rank=0, world=1, **kw)
    b = next(core)
    return core, b


def test_buffer_protocol_formats_and_zero_copy(ds_small):
    core, b = _first_batch(ds_small)
    assert (b.n_samples, b.epoch, b.number) == (8, 0, 0)
    tensors = {name: (t, lengths) for name, t, lengths in b.tensors()}
    assert list(tensors) == list(FIELDS) + ["index"]
    expect = {"data": ("B", "uint8"), "label": ("q", "int64"), "score": ("f", "float32"),
              "vec": ("f", "float32"), "half": ("e", "float16"), "bf": ("H", "bfloat16"),
              "index": ("q", "int64")}
    for name, (fmt, dtype) in expect.items():
        t = tensors[name][0]
        m = memoryview(t)
        assert m.format == fmt and t.dtype == dtype
        assert m.shape == t.shape and m.shape[0] == 8
        assert not m.readonly and m.c_contiguous
        a = np.asarray(t)
        assert a.ctypes.data == t.address  # numpy: no copy
        if a.dtype == np.uint16:  # torch 1.13 has no uint16: bfloat16 goes through int16
            a = a.view(np.int16)
        assert torch.from_numpy(a).data_ptr() == t.address  # torch: no copy
        assert torch.frombuffer(t, dtype=torch.uint8).data_ptr() == t.address
    assert tensors["vec"][0].shape == (8, 2, 3)
    assert tensors["data"][0].shape[1] % 64 == 0
    lengths = np.asarray(tensors["data"][1])
    data = np.asarray(tensors["data"][0])
    for j in range(8):
        assert data[j, :lengths[j]].tobytes() == payload(j)
    np.testing.assert_array_equal(np.asarray(tensors["half"][0])[3], record(3)["half"])
    bf = torch.from_numpy(np.asarray(tensors["bf"][0]).view(np.int16)).view(torch.bfloat16)
    assert bf[5].tolist() == [5.0, -5.0]
    np.testing.assert_array_equal(np.asarray(tensors["bf"][0])[5], bf16_bits([5, -5]))
    core.close()


def test_slot_released_when_last_view_dies(ds_small):
    core = _core.Loader(ds_small, batch_size=10, n_threads=1, n_slots=2, rank=0, world=1)
    b = next(core)
    wb = weakref.ref(b)
    label = np.asarray(b.tensors()[1][1])
    view = label[3:5]  # a view of a view keeps the slot too
    del b
    gc.collect()
    assert wb() is not None  # still referenced through the numpy view
    b2 = next(core)  # 2 slots: holding one while taking the next is fine
    del b2
    with pytest.raises(stoker.StokerBusyError) as e:  # batch 2 needs batch 0's slot
        next(core)
    assert e.value.status == _core.EBUSY and "release the oldest batch" in str(e.value)
    assert view.tolist() == [21, 28]
    del label, view
    gc.collect()
    assert wb() is None
    assert np.asarray(next(core).tensors()[-1][1]).tolist() == list(range(20, 30))
    core.close()


def test_core_loader_iterates_epochs(ds_small):
    core = _core.Loader(ds_small, batch_size=30, n_threads=2, rank=0, world=1)
    assert len(core) == 4
    for epoch in range(2):
        got = [np.asarray(b.tensors()[-1][1]).tolist() for b in core]  # StopIteration at END
        assert sum(got, []) == list(range(SMALL_N))
        assert core.epoch == epoch + 1
    st = json.loads(core.save_state())
    assert st["epoch"] == 2 and st["consumed"] == 0
    core.close()
    with pytest.raises(stoker.StokerStateError):
        next(core)


def _tree(root, classes, n):
    for i in range(n):
        d = os.path.join(root, classes[i % len(classes)])
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "f%d.jpg" % i), "wb") as f:
            f.write(bytes([i % 256]) * (50 + i))


def test_packs_not_mixed_unless_concat(tmp_path):
    """Shards of two packs (another dataset id / class list) are one dataset only with
    concat=True; a packed directory carries its manifest (issue 17)."""
    _tree(tmp_path / "a", ["cat", "dog"], 10)
    _tree(tmp_path / "b", ["x", "y", "z"], 12)
    stoker.pack_image_folder(tmp_path / "a", str(tmp_path / "pa"), shard_size=600)
    stoker.pack_image_folder(tmp_path / "b", str(tmp_path / "pb"), shard_size=600)
    assert os.path.exists(tmp_path / "pa" / "stoker-manifest.json")
    a, b = str(tmp_path / "pa"), str(tmp_path / "pb")
    assert len(stoker.Dataset(a)) == 10 and stoker.Dataset(a).classes == ["cat", "dog"]
    with pytest.raises(stoker.StokerInvalidError, match="a shard of a different dataset"):
        stoker.Dataset([a, b])
    ds = stoker.Dataset([a, b], concat=True)
    assert len(ds) == 22


def test_metadata_must_be_json(tmp_path):
    with pytest.raises(stoker.StokerInvalidError, match="metadata is not valid JSON"):
        stoker.write_shard(str(tmp_path / "m.stk"), [("data", "bytes")], [{"data": b"x"}],
                           metadata="{not json")

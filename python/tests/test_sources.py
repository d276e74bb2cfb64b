"""Record sources from Python (issue 11's seams): one Dataset and one Loader for every format.
An ImageFolder tree read directly gives exactly the records its packed .stk gives (the same
reader feeds both packers); .npy files load as fields; brace ranges and format= work; bad input
gets errors that name the file."""
import os

import numpy as np
import pytest
from PIL import Image
from torchvision.datasets import ImageFolder

import stoker


def _tree(root, n=20):
    """ImageFolder tree: n tiny JPEGs in 3 classes, a nested subfolder, a non-image file."""
    rng = np.random.default_rng(0)
    for i in range(n):
        cls = root / f"c{i % 3}" / ("deep" if i % 5 == 0 else "")
        cls.mkdir(parents=True, exist_ok=True)
        arr = rng.integers(0, 255, (12 + i % 4, 16, 3), dtype=np.uint8)
        Image.fromarray(arr).save(cls / f"im{i:02d}.JPG" if i == 7 else cls / f"im{i:02d}.jpg")
    (root / "c0" / "readme.txt").write_text("not an image")
    return str(root)


@pytest.fixture
def tree(tmp_path):
    return _tree(tmp_path / "tree")


def test_formats_listed():
    fmts = stoker.formats()  # each new format adds itself before imagefolder, which stays last
    assert fmts[:2] == ["stk", "npy"] and fmts[-1] == "imagefolder"
    assert {"hdf5", "lmdb", "tfrecord", "wds"} <= set(fmts)


def test_imagefolder_read_directly_equals_packed(tree, tmp_path):
    direct = stoker.Dataset(tree)
    assert direct.format == "imagefolder"
    assert [f["name"] for f in direct.fields] == ["image", "label", "path"]
    ref = ImageFolder(tree)
    assert len(direct) == len(ref.samples) == 20
    assert [direct[i]["path"].decode() for i in range(20)] == \
        [os.path.relpath(p, tree) for p, _ in ref.samples]
    assert [direct[i]["label"] for i in range(20)] == [c for _, c in ref.samples]
    assert direct.classes == ref.classes
    out = tmp_path / "packed.stk"
    assert stoker.pack_image_folder(tree, out) == 20
    packed = stoker.Dataset(str(out))
    assert packed.format == "stk" and packed.classes == ref.classes
    assert all(packed[i] == direct[i] for i in range(20))
    assert direct.describe(7) == f"{ref.samples[7][0]} (record 7)"
    assert any(p.endswith("im07.JPG") for p, _ in ref.samples)  # upper-case extension kept


def test_loader_over_imagefolder_exactly_once(tree):
    loader = stoker.Loader(tree, 6, shuffle=True, seed=3, num_workers=2, rank=0,
                           world_size=1)
    for epoch in range(2):
        idx = np.concatenate([b["index"].numpy() for b in loader])
        assert sorted(idx.tolist()) == list(range(20)), epoch
    loader.close()


def test_loader_over_imagefolder_with_transform_matches_packed(tree, tmp_path):
    if not stoker.has_transforms():
        pytest.skip("no image pipeline")
    out = tmp_path / "p.stk"
    stoker.pack_image_folder(tree, out)
    kw = dict(transforms=[stoker.transforms.Resize((8, 8)), stoker.transforms.ToTensor()],
              num_workers=2, rank=0, world_size=1)
    a = np.concatenate([b["image"].numpy() for b in stoker.Loader(tree, 5, **kw)])
    b = np.concatenate([b["image"].numpy() for b in stoker.Loader(str(out), 5, **kw)])
    assert a.shape == (20, 3, 8, 8) and np.array_equal(a, b)


def test_pack_progress_and_shards(tree, tmp_path):
    calls = []
    r = stoker.pack(tree, tmp_path / "shards", shard_size=4096,
                    progress=lambda d, t, b: calls.append((d, t)))
    assert r["records"] == 20 and r["shards"] > 1
    assert calls[-1] == (20, 20) and all(t == 20 for _, t in calls)
    ds = stoker.Dataset(str(tmp_path / "shards"))
    assert len(ds) == 20 and len(ds.shards) == r["shards"]
    with pytest.raises(stoker.StokerStateError, match="already exists|not empty"):
        stoker.pack(tree, tmp_path / "shards", shard_size=4096)


def _npy_dir(root, n=10):
    root.mkdir()
    np.save(root / "x.npy", np.arange(n * 12, dtype=np.uint8).reshape(n, 2, 2, 3))
    np.save(root / "label.npy", np.arange(n, dtype=np.int64) * 7)
    np.save(root / "w.npy", np.linspace(0, 1, n, dtype=np.float32))
    return root


def test_npy_directory(tmp_path):
    root = _npy_dir(tmp_path / "arrays")
    ds = stoker.Dataset(str(root))
    assert ds.format == "npy" and len(ds) == 10
    kinds = {f["name"]: f["kind"] for f in ds.fields}
    assert kinds == {"label": "int64", "w": "float32", "x": "array"}
    assert ds[3]["label"] == 21
    assert np.array_equal(ds[3]["x"], np.arange(36, 48, dtype=np.uint8).reshape(2, 2, 3))
    loader = stoker.Loader(str(root), 4, num_workers=2, rank=0, world_size=1)
    got = np.concatenate([b["label"].numpy() for b in loader])
    assert got.tolist() == [7 * i for i in range(10)]


def test_npy_bad_input(tmp_path):
    root = tmp_path / "bad"
    root.mkdir()
    np.save(root / "a.npy", np.zeros((5, 2), np.float32))
    np.save(root / "b.npy", np.zeros((6,), np.int64))
    with pytest.raises(stoker.StokerInvalidError, match="b.npy has 6 rows but .*a.npy has 5"):
        stoker.Dataset(str(root))
    f = tmp_path / "f.npy"
    np.save(f, np.asfortranarray(np.zeros((4, 3), np.float32)))
    with pytest.raises(stoker.StokerNotSupportedError, match="Fortran"):
        stoker.Dataset(str(f))
    o = tmp_path / "o.npy"
    np.save(o, np.array([1, "a"], dtype=object), allow_pickle=True)
    with pytest.raises(stoker.StokerNotSupportedError, match="object dtype"):
        stoker.Dataset(str(o))


def test_npy_dict_names_the_fields(tmp_path):
    """The NumPy dict form: one field per key, named by the key whatever the file is called;
    the Loader takes the dict too (exactly once over an epoch, shuffled)."""
    n = 12
    feats = np.arange(n * 6, dtype=np.float32).reshape(n, 2, 3)
    np.save(tmp_path / "features-v2.npy", feats)
    np.save(tmp_path / "targets.npy", np.arange(n, dtype=np.int64) * 3)
    data = {"feat": str(tmp_path / "features-v2.npy"), "label": tmp_path / "targets.npy"}
    ds = stoker.Dataset(data)
    assert ds.format == "npy" and len(ds) == n
    assert [f["name"] for f in ds.fields] == ["feat", "label"]
    assert np.array_equal(ds[5]["feat"], feats[5]) and ds[5]["label"] == 15
    loader = stoker.Loader(data, 5, shuffle=True, seed=1, num_workers=2, rank=0, world_size=1)
    got = np.concatenate([b["label"].numpy() for b in loader])
    assert sorted(got.tolist()) == [3 * i for i in range(n)]
    loader.close()
    # a glob naming exactly one file is that file
    assert len(stoker.Dataset({"f": str(tmp_path / "features-*.npy")})) == n


def test_npy_dict_bad_input(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((5, 2), np.float32))
    np.save(tmp_path / "b.npy", np.zeros((6,), np.int64))
    np.save(tmp_path / "c.npy", np.zeros((5,), np.int64))
    a, b = str(tmp_path / "a.npy"), str(tmp_path / "b.npy")
    with pytest.raises(stoker.StokerInvalidError, match="b.npy has 6 rows but .*a.npy has 5"):
        stoker.Dataset({"x": a, "y": b})
    with pytest.raises(stoker.StokerInvalidError, match=r"field 'x': .*\*.npy names 3 files"):
        stoker.Dataset({"x": str(tmp_path / "*.npy")})
    with pytest.raises(stoker.StokerInvalidError, match="is a directory"):
        stoker.Dataset({"x": str(tmp_path)})
    with pytest.raises(stoker.StokerInvalidError, match="character outside"):
        stoker.Dataset({"bad name": a})
    with pytest.raises(TypeError, match="field names"):
        stoker.Dataset({1: a})
    with pytest.raises(stoker.StokerIOError, match="missing.npy"):
        stoker.Dataset({"x": str(tmp_path / "missing.npy")})
    stoker.write_shard(tmp_path / "s.stk", {"v": "int64"}, [{"v": 1}])
    with pytest.raises(stoker.StokerInvalidError, match="format stk takes no field names"):
        stoker.Dataset({"v": str(tmp_path / "s.stk")})


def test_brace_range_and_format_override(tmp_path):
    for k in range(3):
        stoker.write_shard(tmp_path / f"s-{k:02d}.stk", {"v": "int64"}, [{"v": k * 10 + j}
                                                                        for j in range(4)])
    ds = stoker.Dataset(str(tmp_path / "s-{00..02}.stk"))
    assert len(ds) == 12 and [ds[i]["v"] for i in (0, 4, 11)] == [0, 10, 23]
    with pytest.raises(stoker.StokerIOError, match="s-03.stk"):
        stoker.Dataset(str(tmp_path / "s-{00..03}.stk"))
    with pytest.raises(stoker.StokerInvalidError, match="unknown format 'tar'.*stk.*imagefolder"):
        stoker.Dataset(str(tmp_path), format="tar")
    (tmp_path / "notes.dat").write_bytes(b"hello")  # (a .bin is nanoGPT's token file name)
    with pytest.raises(stoker.StokerInvalidError, match="notes.dat: unknown format"):
        stoker.Dataset(str(tmp_path / "notes.dat"))
    np.save(tmp_path / "a.npy", np.zeros(4, np.int64))
    with pytest.raises(stoker.StokerInvalidError, match="s-00.stk is stk but .*a.npy is npy"):
        stoker.Dataset([str(tmp_path / "s-00.stk"), str(tmp_path / "a.npy")])


def test_fifo_in_tree_is_skipped_not_opened(tree):
    os.mkfifo(os.path.join(tree, "c1", "pipe.jpg"))
    ds = stoker.Dataset(tree)  # would block forever if the FIFO were opened
    assert len(ds) == 20
    assert ds.metadata["n_skipped"] == 1 and ds.metadata["skipped"] == ["c1/pipe.jpg"]


def test_shard_truncated_while_open_is_an_error_not_sigbus(tmp_path):
    path = tmp_path / "t.stk"
    stoker.write_shard(path, {"data": "bytes"}, [{"data": bytes([i]) * 4000} for i in range(50)])
    loader = stoker.Loader(str(path), 10, num_workers=1, prefetch=1, rank=0, world_size=1)
    with open(path, "r+b") as f:
        f.truncate(4096)
    with pytest.raises(stoker.Error, match=r"t\.stk record \d+ .*changed while open"):
        for _ in loader:
            pass
    loader.close()

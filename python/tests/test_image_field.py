"""The field transforms apply to, and uint8 image arrays as their input (issue 12).

transform_field left out: WebDataset's `jpg`, TFRecord's `image/encoded` and LMDB's `value`
(sniffed: a JPEG in record 0) are picked, as are HDF5 and NumPy uint8 image arrays; several
candidates or none raise ValueError naming them. Arrays go through the same ops as decoded
images: equal bit for bit to the same pixels stored as PNG (decoded exactly), and within PIL's
rounding of torchvision on the same pixels (PSNR, as test_xform_vs_torchvision does for JPEG)."""
import io
import os
import tarfile

import numpy as np
import pytest

import stoker
from test_tfrecord import example, write_tfrecord

torch = pytest.importorskip("torch")
T = pytest.importorskip("torchvision.transforms")
Image = pytest.importorskip("PIL.Image")

N = 6
H, W = 72, 96
MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def _pixels(n=N, h=H, w=W, channels=3, seed=0):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    out = np.empty((n, h, w, channels), np.uint8)
    for i in range(n):
        for c in range(channels):
            a, b = rng.uniform(0.02, 0.2, 2)
            out[i, :, :, c] = (128 + 90 * np.sin(x * a + c + i) * np.cos(y * b)
                               + rng.normal(0, 8, (h, w))).clip(0, 255)
    return out


def _encode(img, fmt="JPEG"):
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buf.getvalue()


def _tar(path, samples):
    """A WebDataset shard: samples is a list of {ext: bytes}."""
    with tarfile.open(path, "w") as tf:
        for i, s in enumerate(samples):
            for ext, data in s.items():
                info = tarfile.TarInfo(f"{i:06d}.{ext}")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return str(path)


def _epoch(data, transforms, **kw):
    """One epoch in order, batched whole: the batch dict with numpy values."""
    with stoker.Loader(data, batch_size=N, num_workers=2, seed=3, transforms=transforms,
                       **kw) as L:
        b = next(iter(L))
        return {k: np.asarray(v) for k, v in b.items()}


# ---- the pick ----

def test_wds_jpg_picked(tmp_path):
    px = _pixels()
    shard = _tar(tmp_path / "s.tar", [{"jpg": _encode(px[i]), "cls": str(i).encode(),
                                       "json": b'{"a": 1}'} for i in range(N)])
    assert stoker.Dataset(shard).image_field() == "jpg"
    auto = _epoch(shard, "imagenet-val")
    named = _epoch(shard, "imagenet-val", transform_field="jpg")
    assert auto["jpg"].shape == (N, 3, 224, 224) and auto["jpg"].dtype == np.float32
    assert np.array_equal(auto["jpg"], named["jpg"])
    assert auto["cls"].tolist() == list(range(N))


def test_tfrecord_image_encoded_picked(tmp_path):
    px = _pixels()
    path = tmp_path / "d.tfrecord"
    write_tfrecord(path, [example({"image/encoded": _encode(px[i]), "image/format": b"jpeg",
                                   "image/class/label": i}) for i in range(N)])
    assert stoker.Dataset(str(path)).image_field() == "image/encoded"
    b = _epoch(str(path), "imagenet-val")
    assert b["image/encoded"].shape == (N, 3, 224, 224)
    assert b["image/format"].dtype == np.uint8  # the other bytes field is left as it is


def test_lmdb_value_sniffed_as_jpeg(tmp_path):
    lmdb = pytest.importorskip("lmdb")
    px = _pixels()
    env = lmdb.open(str(tmp_path / "db"), map_size=1 << 26)
    with env.begin(write=True) as t:
        for i in range(N):
            t.put(f"{i:04d}".encode(), _encode(px[i]))
    env.close()
    path = str(tmp_path / "db")
    assert stoker.Dataset(path).image_field() == "value"
    auto = _epoch(path, "imagenet-val")
    assert np.array_equal(auto["value"], _epoch(path, "imagenet-val",
                                                transform_field="value")["value"])


def test_ambiguous_and_none(tmp_path):
    px = _pixels(n=2)
    two = _tar(tmp_path / "two.tar", [{"jpg": _encode(px[i]), "png": _encode(px[i], "PNG")}
                                      for i in range(2)])
    with pytest.raises(ValueError, match=r"2 fields are named as encoded images \('jpg', "
                                         r"'png'\).*transform_field="):
        stoker.Loader(two, batch_size=2, transforms="imagenet-val")
    with stoker.Loader(two, batch_size=2, transforms="imagenet-val", transform_field="png") as L:
        assert np.asarray(next(iter(L))["png"]).shape == (2, 3, 224, 224)
    d = tmp_path / "npy"
    d.mkdir()
    np.save(d / "feat.npy", np.zeros((4, 8, 8, 3), np.float32))
    np.save(d / "label.npy", np.arange(4))
    with pytest.raises(ValueError, match=r"no field for the transforms.*'feat' \(float32 array\)"
                                         r".*'label' \(int64\).*transform_field="):
        stoker.Loader(str(d), batch_size=2, transforms="imagenet-val")
    with pytest.raises(ValueError, match=r"field 'feat' is a float32 array of shape \(8, 8, 3\)"):
        stoker.Loader(str(d), batch_size=2, transforms="imagenet-val", transform_field="feat")
    with pytest.raises(ValueError, match=r"'nope' is not in the dataset \(its fields: feat, "
                                         r"label\)"):
        stoker.Loader(str(d), batch_size=2, transforms="imagenet-val", transform_field="nope")


# ---- uint8 arrays through the transforms ----

RRC = T.Compose([T.RandomResizedCrop(48), T.RandomHorizontalFlip(), T.ToTensor(),
                 T.Normalize(MEAN, STD)])


def _h5(path, **arrays):
    h5py = pytest.importorskip("h5py")
    with h5py.File(path, "w") as f:
        for k, v in arrays.items():
            f[k] = v
    return str(path)


def _psnr01(a, b):
    mse = float(np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(1.0 / mse)


def _unnormalise(x):
    return x * np.array(STD, np.float32)[:, None, None] + np.array(MEAN, np.float32)[:, None, None]


def test_hdf5_array_equals_png_path(tmp_path):
    """RandomResizedCrop + flip + Normalize on an HDF5 (N, H, W, 3) uint8 dataset: the same
    tensors as the same pixels stored as PNG in a WebDataset shard (same seed, same records)."""
    px = _pixels()
    h5 = _h5(tmp_path / "d.h5", images=px, labels=np.arange(N))
    assert stoker.Dataset(h5).image_field() == "images"
    got = _epoch(h5, RRC)
    shard = _tar(tmp_path / "p.tar", [{"png": _encode(px[i], "PNG")} for i in range(N)])
    want = _epoch(shard, RRC)
    assert got["images"].shape == (N, 3, 48, 48)
    assert np.array_equal(got["images"], want["png"])
    assert got["labels"].tolist() == list(range(N))


def test_numpy_chw_and_gray_equal_png_path(tmp_path):
    px = _pixels()
    gray = _pixels(channels=1, seed=1)[..., 0]
    d = tmp_path / "npy"
    d.mkdir()
    np.save(d / "chw.npy", np.ascontiguousarray(px.transpose(0, 3, 1, 2)))
    np.save(d / "label.npy", np.arange(N))
    assert stoker.Dataset(str(d)).image_field() == "chw"
    shard = _tar(tmp_path / "p.tar", [{"png": _encode(px[i], "PNG"),
                                       "gray.png": _encode(gray[i], "PNG")} for i in range(N)])
    want = _epoch(shard, RRC, transform_field="png")["png"]
    assert np.array_equal(_epoch(str(d), RRC)["chw"], want)
    # grayscale (N, H, W): one channel replicated to RGB, as a grayscale PNG is decoded
    g = tmp_path / "gray"
    g.mkdir()
    np.save(g / "gray.npy", gray)
    assert stoker.Dataset(str(g)).image_field() == "gray"
    got = _epoch(str(g), RRC)["gray"]
    assert got.shape == (N, 3, 48, 48)
    assert np.array_equal(got, _epoch(shard, RRC, transform_field="gray.png")["gray.png"])


VAL = T.Compose([T.Resize(64), T.CenterCrop(56), T.ToTensor(), T.Normalize(MEAN, STD)])
FULL_RRC = T.Compose([T.RandomResizedCrop(40, scale=(1.0, 1.0), ratio=(W / H, W / H)),
                      T.ToTensor(), T.Normalize(MEAN, STD)])


@pytest.mark.parametrize("tv", [VAL, FULL_RRC], ids=["resize-centercrop", "resizedcrop-whole"])
def test_arrays_match_torchvision(tmp_path, tv):
    """The same pixels through torchvision (PIL images from the arrays, .convert("RGB") as
    ImageFolder does): within PIL's 8-bit rounding, as for decoded JPEGs (>= 40 dB; the
    RandomResizedCrop covers the whole image, so its box is the same as torchvision's)."""
    px = _pixels()
    gray = _pixels(channels=1, seed=2)[..., 0]
    h5 = _h5(tmp_path / "d.h5", rgb=px, gray=gray)
    worst = float("inf")
    for field, imgs in (("rgb", px), ("gray", gray)):
        got = _epoch(h5, tv, transform_field=field)[field]
        for i in range(N):
            want = tv(Image.fromarray(imgs[i]).convert("RGB")).numpy()
            assert got[i].shape == want.shape
            db = _psnr01(_unnormalise(got[i]), _unnormalise(want))
            assert db >= 40.0, (field, i, db)
            worst = min(worst, db)
    print(f"worst PSNR {worst:.1f} dB")

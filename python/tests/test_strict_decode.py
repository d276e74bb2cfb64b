"""Strict decoding and the formats of torchvision's IMG_EXTENSIONS (issue 16, items 2 and 3).

* Corrupt JPEGs: photo-like JPEGs (bench/gen_images.py's generator) with random byte runs
  written at random offsets of their entropy-coded data, fixed seed. File by file, stoker's
  strict decode (the default) must reject at least every file PIL rejects
  (Image.open(...).load() raising), through a full-image transform and through a small window
  (RandomResizedCrop-like, where the corruption is often below the window); strict=False keeps
  libjpeg's lenient recovery. The counts are printed (pytest -s).
* Loader level: on_error="skip" skips and counts the corrupt records, on_error="raise" names the
  record and its libjpeg message. The check to the image's end is made on a record's first read
  only: the records rejected then are rejected in every later epoch too, and a later (trusted)
  read gives the bytes a first read gives.
* WebP, BMP, PPM/PGM and TIFF written by PIL decode through the loader exactly as PIL decodes
  them (Image.open(...).convert("RGB")).
"""
import io
import os
import sys

import numpy as np
import pytest
from PIL import Image

import stoker
from stoker import transforms as T

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from gen_images import make_image  # noqa: E402

needs_pipeline = pytest.mark.skipif(not stoker.has_transforms(),
                                    reason="this build has no image pipeline")

W, H = 192, 144
N_CORRUPT = 72


def _entropy_start(data):
    """Offset just past the first SOS header: where the entropy-coded data begins."""
    i = data.index(b"\xff\xda")
    return i + 2 + (data[i + 2] << 8 | data[i + 3])


def _pil_rejects(path):
    try:
        with Image.open(path) as im:
            im.load()
        return None
    except Exception as e:  # noqa: BLE001 - PIL raises OSError, SyntaxError, ValueError...
        return f"{type(e).__name__}: {e}"


@pytest.fixture(scope="module")
def corrupt(tmp_path_factory):
    """An ImageFolder of N_CORRUPT corrupted JPEGs (class "c") plus 4 clean ones (class "ok"),
    packed; returns (folder, shard, names of the corrupt files in record order, PIL verdicts)."""
    root = tmp_path_factory.mktemp("corrupt")
    (root / "c").mkdir()
    (root / "ok").mkdir()
    rng = np.random.default_rng(20260516)
    for k in range(N_CORRUPT + 4):
        im, q = make_image(rng, W, H, k % 7, "small")
        buf = io.BytesIO()
        im.save(buf, "JPEG", quality=q)
        data = bytearray(buf.getvalue())
        if k >= N_CORRUPT:
            (root / "ok" / f"{k:03d}.jpg").write_bytes(data)
            continue
        start, end = _entropy_start(data), len(data) - 2
        for _ in range(int(rng.integers(1, 5))):  # 1-4 runs of 1-96 random bytes
            n = int(rng.integers(1, 97))
            at = int(rng.integers(start, end - n))
            data[at:at + n] = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        (root / "c" / f"{k:03d}.jpg").write_bytes(data)
    names = sorted(os.listdir(root / "c"))
    pil = [_pil_rejects(str(root / "c" / n)) for n in names]
    shard = str(tmp_path_factory.mktemp("corrupt_packed") / "corrupt.stk")
    assert stoker.pack_image_folder(str(root), shard) == N_CORRUPT + 4
    return str(root), shard, names, pil


def _verdicts(shard, transforms, strict):
    """Per record: None if the record decodes, else the error message."""
    out = []
    loader = stoker.Loader(shard, 1, rank=0, world_size=1, num_workers=1, transforms=transforms,
                           output="numpy", strict=strict)
    it = iter(loader)
    for _ in range(len(loader)):
        try:
            next(it)
            out.append(None)
        except stoker.StokerFormatError as e:
            out.append(str(e))
    loader.close()
    return out


FULL = [T.CenterCrop((H, W)), T.ToDtype("uint8")]  # the whole image, no resampling
WINDOW = [T.RandomResizedCrop(48, scale=(0.05, 0.2)), T.ToDtype("uint8")]  # small windows


@needs_pipeline
@pytest.mark.parametrize("ops", [FULL, WINDOW], ids=["full", "window"])
def test_strict_rejects_what_pil_rejects(corrupt, ops):
    _, shard, names, pil = corrupt
    strict = _verdicts(shard, ops, True)
    lenient = _verdicts(shard, ops, False)
    assert strict[N_CORRUPT:] == [None] * 4 and lenient[N_CORRUPT:] == [None] * 4
    missed = [(names[i], pil[i]) for i in range(N_CORRUPT) if pil[i] and strict[i] is None]
    assert not missed, f"PIL rejects these, strict stoker decodes them: {missed}"
    # lenient never rejects a file strict accepts
    assert all(s is not None for s, l in zip(strict, lenient) if l is not None)
    n_pil = sum(p is not None for p in pil)
    n_strict = sum(s is not None for s in strict[:N_CORRUPT])
    n_lenient = sum(v is not None for v in lenient[:N_CORRUPT])
    print(f"\n{N_CORRUPT} corrupt JPEGs ({'full image' if ops is FULL else 'small windows'}): "
          f"PIL rejects {n_pil}, stoker strict {n_strict}, stoker lenient {n_lenient}")
    assert n_pil > 0 and n_strict > n_lenient
    for s in strict:
        assert s is None or "JPEG: " in s, s


@needs_pipeline
def test_loader_skip_and_raise(corrupt):
    _, shard, names, _ = corrupt
    n_bad = sum(s is not None for s in _verdicts(shard, FULL, True))
    skip = stoker.Loader(shard, 4, rank=0, world_size=1, transforms=FULL, on_error="skip",
                         output="numpy")
    got = np.concatenate([np.array(b["index"]) for b in skip])
    assert skip.stats()["skipped"] == n_bad
    assert len(got) == N_CORRUPT + 4  # the bad ones replaced by good records
    skip.close()

    loader = stoker.Loader(shard, 1, rank=0, world_size=1, transforms=FULL, output="numpy")
    with pytest.raises(stoker.StokerFormatError) as e:
        for _ in loader:
            pass
    msg = str(e.value)
    assert "corrupt.stk" in msg and "record " in msg and "JPEG: " in msg, msg
    loader.close()

    # strict=False: every record is delivered, as before strict decoding
    lenient_bad = sum(v is not None for v in _verdicts(shard, FULL, False))
    lenient = stoker.Loader(shard, 4, rank=0, world_size=1, transforms=FULL, output="numpy",
                            strict=False, on_error="skip")
    assert sum(len(b["index"]) for b in lenient) == N_CORRUPT + 4
    assert lenient.stats()["skipped"] == lenient_bad < n_bad
    lenient.close()


def _epoch_outputs(shard, epochs, first_epoch=0, **kw):
    """Per epoch: {record index: image bytes} and the skipped count of that epoch."""
    loader = stoker.Loader(shard, 8, rank=0, world_size=1, transforms=WINDOW, output="numpy",
                           shuffle=True, seed=11, num_workers=2, **kw)
    loader.set_epoch(first_epoch)
    out, skipped = [], 0
    for _ in range(epochs):
        got = {}
        for b in loader:
            for i, img in zip(np.asarray(b["index"]).tolist(), np.asarray(b["image"])):
                got[i] = img.tobytes()
        now = loader.stats()["skipped"]
        out.append((got, now - skipped))
        skipped = now
    loader.close()
    return out


@needs_pipeline
def test_checked_once_over_epochs(corrupt):
    _, shard, _, _ = corrupt
    runs = _epoch_outputs(shard, 3, on_error="skip")
    first, n_skipped = runs[0]
    bad = set(range(N_CORRUPT + 4)) - set(first)
    # small windows end above most of the damage: epoch 0 (first reads, to the end) rejects them
    assert n_skipped == len(bad) > 0
    for got, n in runs[1:]:  # trusted reads stop after the window: the same records rejected
        assert set(got) == set(first) and n == n_skipped
    # a trusted read (epoch 1 of one loader) gives the bytes of a first read (a loader that
    # starts at epoch 1)
    fresh = _epoch_outputs(shard, 1, first_epoch=1, on_error="skip")[0][0]
    assert set(fresh) == set(runs[1][0])
    assert all(fresh[i] == runs[1][0][i] for i in fresh)


def test_strict_option_plumbing():
    assert T.compile([T.CenterCrop(8)]).strict is True
    assert T.compile([T.CenterCrop(8)], strict=False).strict is False
    assert T.compile(T.Compose([T.CenterCrop(8)], strict=False)).strict is False
    assert T.compile("imagenet-val").strict is True
    assert T.compile("imagenet-val", strict=False).strict is False
    built = T.compile([T.CenterCrop(8)])
    with pytest.raises(ValueError, match="strict"):
        T.compile(built, strict=False)
    with pytest.raises(ValueError, match="strict"):
        stoker._core.Transform("imagenet-val", strict=False)


# ---- the other formats of IMG_EXTENSIONS ----

def _photo(w, h, seed):
    im, _ = make_image(np.random.default_rng(seed), w, h, seed % 5, "small")
    return im


FORMATS = [  # (file name, how PIL writes it)
    ("a.webp", lambda im: dict(format="WEBP", quality=85)),
    ("b.webp", lambda im: dict(format="WEBP", lossless=True)),
    ("c.bmp", lambda im: dict(format="BMP")),
    ("d.ppm", lambda im: dict(format="PPM")),
    ("e.tif", lambda im: dict(format="TIFF")),
    ("f.tiff", lambda im: dict(format="TIFF", compression="tiff_lzw")),
    ("g.tif", lambda im: dict(format="TIFF", compression="jpeg")),
    ("h.jpg", lambda im: dict(format="JPEG", quality=90)),
    ("i.png", lambda im: dict(format="PNG")),
]
GRAY = [("j.pgm", dict(format="PPM")), ("k.bmp", dict(format="BMP")),
        ("l.tif", dict(format="TIFF"))]
PALETTE = [("m.bmp", dict(format="BMP")), ("n.tif", dict(format="TIFF"))]


@needs_pipeline
def test_formats_decode_as_pil(tmp_path):
    """Every IMG_EXTENSIONS format packs and decodes through the loader to PIL's pixels."""
    root = tmp_path / "imgs" / "x"
    root.mkdir(parents=True)
    files = []
    for i, (name, kw) in enumerate(FORMATS):
        _photo(W, H, i).save(root / name, **kw(None))
        files.append(name)
    for i, (name, kw) in enumerate(GRAY):
        _photo(W, H, 50 + i).convert("L").save(root / name, **kw)
        files.append(name)
    for i, (name, kw) in enumerate(PALETTE):
        _photo(W, H, 60 + i).convert("P").save(root / name, **kw)
        files.append(name)
    shard = str(tmp_path / "formats.stk")
    assert stoker.pack_image_folder(str(tmp_path / "imgs"), shard) == len(files)
    loader = stoker.Loader(shard, len(files), rank=0, world_size=1, output="numpy",
                           transforms=T.Compose(FULL, layout="NHWC", exact=True))
    batch = next(iter(loader))
    paths = [p.decode() for p in batch.bytes("path")]
    images = np.asarray(batch["image"])
    loader.close()
    for i, name in enumerate(sorted(files)):
        assert paths[i] == "x/" + name, (paths[i], name)
        with Image.open(root / name) as im:
            want = np.asarray(im.convert("RGB"))
        diff = int(np.abs(images[i].astype(int) - want).max())
        assert diff == 0, f"{name}: max difference {diff} from PIL"


@needs_pipeline
@pytest.mark.parametrize("marker", [b"\xff\xdb", b"\xff\xda", b"\xff\xd9"],
                         ids=["before-DQT", "before-SOS", "before-EOI"])
def test_extraneous_bytes_before_marker(tmp_path, marker):
    """Bytes between a segment and the next marker (libjpeg's "N extraneous bytes before marker"
    warning, which real ImageNet files carry): PIL accepts the file, strict stoker decodes it to
    the same pixels as the file without them (docs/images.md "Strict decoding")."""
    rng = np.random.default_rng(7)
    im, q = make_image(rng, W, H, 3, "small")
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=q)
    clean = buf.getvalue()
    at = clean.rindex(marker) if marker == b"\xff\xd9" else clean.index(marker)
    dirty = clean[:at] + b"\x00garbage\x01\x02" * 3 + clean[at:]
    for name, data in (("clean", clean), ("dirty", dirty)):
        (tmp_path / "c").mkdir(exist_ok=True)
        (tmp_path / "c" / f"{name}.jpg").write_bytes(data)
    assert _pil_rejects(str(tmp_path / "c" / "dirty.jpg")) is None
    with Image.open(tmp_path / "c" / "dirty.jpg") as a, \
            Image.open(tmp_path / "c" / "clean.jpg") as b:
        assert np.array_equal(np.asarray(a.convert("RGB")), np.asarray(b.convert("RGB")))
    loader = stoker.Loader(str(tmp_path), 2, rank=0, world_size=1, num_workers=1,
                           transforms=FULL, output="numpy", strict=True)
    batch = next(iter(loader))
    names = [os.path.basename(loader.dataset.describe(int(i)).split(" (record ")[0])
             for i in batch["index"]]
    images = dict(zip(names, batch["image"]))
    loader.close()
    assert np.array_equal(images["clean.jpg"], images["dirty.jpg"])
    with Image.open(tmp_path / "c" / "clean.jpg") as b:  # CHW, as ToDtype gives it
        assert np.array_equal(images["clean.jpg"].transpose(1, 2, 0), np.asarray(b.convert("RGB")))


@needs_pipeline
def test_packed_error_names_original_file(tmp_path):
    """A packed image that cannot be decoded is named by its record and by the file it was packed
    from (the `path` field stoker pack writes), on raise and in skip's count."""
    src = tmp_path / "src"
    for cls in ("cat", "dog"):
        (src / cls).mkdir(parents=True)
        for k in range(3):
            im, q = make_image(np.random.default_rng(k), 64, 48, k, "small")
            im.save(src / cls / f"{k}.jpg", "JPEG", quality=q)
    (src / "dog" / "x.jpg").write_bytes(b"this is not an image at all" * 4)
    out = tmp_path / "packed"
    stoker.pack(str(src), str(out))
    ops = [T.Resize((32, 32)), T.ToDtype("uint8")]
    loader = stoker.Loader(str(out), 8, rank=0, world_size=1, num_workers=1, transforms=ops,
                           output="numpy")
    with pytest.raises(stoker.StokerFormatError) as e:
        next(iter(loader))
    loader.close()
    msg = str(e.value)
    assert ".stk record " in msg and "(dog/x.jpg)" in msg and "not a" in msg, msg
    loader = stoker.Loader(str(out), 8, rank=0, world_size=1, num_workers=1, transforms=ops,
                           output="numpy", on_error="skip")
    assert sum(len(b["index"]) for b in loader) == 7 and loader.stats()["skipped"] == 1
    loader.close()


@needs_pipeline
@pytest.mark.parametrize("fmt", ["png", "jpg"])
def test_memory_budget_refuses_a_huge_image_from_a_small_file(tmp_path, fmt):
    """A 5000x5000 image in a file of a few hundred KB (a decode buffer of 75 MB) under a
    memory_budget of 48 MB: that record fails, named, instead of allocating; on_error="skip"
    skips and counts it; the small images around it decode."""
    (tmp_path / "c").mkdir()
    for k in range(3):
        im, q = make_image(np.random.default_rng(k), 64, 48, k, "small")
        im.save(tmp_path / "c" / f"{k}.{fmt}", quality=q) if fmt == "jpg" else \
            im.save(tmp_path / "c" / f"{k}.{fmt}")
    big = tmp_path / "c" / f"1big.{fmt}"
    Image.new("RGB", (5000, 5000), (200, 30, 30)).save(big, quality=20) if fmt == "jpg" else \
        Image.new("RGB", (5000, 5000), (200, 30, 30)).save(big)
    assert big.stat().st_size < 1 << 20
    # a JPEG shrunk this much decodes at 1/8 scale (a 1.2 MB buffer, within the budget): exact=
    # decodes it at full scale
    ops = T.Compose([T.Resize((32, 32)), T.ToDtype("uint8")], exact=fmt == "jpg")
    kw = dict(rank=0, world_size=1, num_workers=1, transforms=ops, output="numpy",
              memory_budget=48 << 20)
    loader = stoker.Loader(str(tmp_path), 1, **kw)
    with pytest.raises(stoker.StokerLimitError) as e:
        for _ in loader:
            pass
    loader.close()
    msg = str(e.value)
    assert f"1big.{fmt}" in msg and "over the memory budget of 50331648 bytes" in msg, msg
    loader = stoker.Loader(str(tmp_path), 4, on_error="skip", **kw)
    assert sum(len(b["index"]) for b in loader) == 4 and loader.stats()["skipped"] == 1
    loader.close()
    # without a budget it decodes
    loader = stoker.Loader(str(tmp_path), 4, **dict(kw, memory_budget=None))
    assert sum(len(b["index"]) for b in loader) == 4 and loader.stats()["skipped"] == 0
    loader.close()

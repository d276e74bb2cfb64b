"""stoker.transforms: building C transforms from stoker ops, recipes and torchvision Compose, and
the loader running them on packed JPEG/PNG ImageFolder data (shapes, dtypes, labels, agreement
with torchvision, determinism, decode errors). Pixel-exactness against torchvision is the
business of test_xform_vs_torchvision.py; here the check is that the front end wires the right
pipeline."""
import io
import os

import numpy as np
import pytest
import torch
import torchvision.transforms as TV
from torchvision.datasets import ImageFolder
from PIL import Image

import stoker
from stoker import transforms as T

needs_pipeline = pytest.mark.skipif(not stoker.has_transforms(),
                                    reason="this build has no image pipeline")

SIZES = [(80, 60), (60, 90), (100, 100), (123, 77), (64, 48), (90, 120)]


def _image(i):
    w, h = SIZES[i % len(SIZES)]
    rng = np.random.default_rng(i)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 // w, yy * 255 // h, (xx + yy) * 127 // (w + h) + 40 * (i % 3)],
                    -1)
    arr = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
    return Image.fromarray(arr)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """An ImageFolder tree of 24 small images in 3 classes (JPEG, plus a few PNG)."""
    root = tmp_path_factory.mktemp("imgs")
    for i in range(24):
        cls = root / f"class_{i % 3}"
        cls.mkdir(exist_ok=True)
        ext = "png" if i % 8 == 5 else "jpg"
        _image(i).save(cls / f"img_{i:03d}.{ext}", quality=90)
    (root / "class_0" / "notes.txt").write_text("not an image")
    return str(root)


@pytest.fixture(scope="module")
def packed(folder, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("packed") / "imgs.stk")
    assert stoker.pack_image_folder(folder, out) == 24
    return out


def _make(data, bs, **kw):
    return stoker.Loader(data, bs, rank=0, world_size=1, **kw)


# ---- building transforms (no pipeline needed to build the op list) ----

def test_torchvision_compose_maps_onto_ops():
    tv = TV.Compose([TV.RandomResizedCrop(96, scale=(0.2, 1.0)), TV.RandomHorizontalFlip(0.3),
                     TV.ColorJitter(0.4, 0.4, 0.4, 0.1), TV.ToTensor(),
                     TV.Normalize(T.IMAGENET_MEAN, T.IMAGENET_STD)])
    ops = []
    T._flatten(tv, ops)
    assert [type(o).__name__ for o in ops] == ["RandomResizedCrop", "RandomHorizontalFlip",
                                              "ColorJitter", "ToTensor", "Normalize"]
    assert ops[0].size == (96, 96) and ops[0].scale == (0.2, 1.0)
    assert ops[1].p == 0.3
    assert ops[2].to_dict() == {"kind": "ColorJitter", "brightness": pytest.approx(0.4),
                                "contrast": pytest.approx(0.4),
                                "saturation": pytest.approx(0.4), "hue": pytest.approx(0.1)}
    assert ops[4].mean == T.IMAGENET_MEAN
    resize = []
    T._flatten(TV.Resize(256), resize)
    assert resize[0].size == (256, 0)  # shorter side
    T._flatten(TV.Resize((32, 48)), resize)
    assert resize[1].size == (32, 48)
    flips = []
    T._flatten(TV.Compose([TV.RandomVerticalFlip(0.2), TV.RandomHorizontalFlip(0.7)]), flips)
    assert flips == [T.RandomVerticalFlip(0.2), T.RandomHorizontalFlip(0.7)]
    assert flips[0].to_dict() == {"kind": "RandomVerticalFlip", "p": 0.2}


def test_unsupported_transform_is_named():
    with pytest.raises(ValueError) as e:
        T.compile(TV.Compose([TV.RandomPerspective(), TV.ToTensor()]))
    msg = str(e.value)
    assert "RandomPerspective" in msg and "imagenet-train" in msg
    assert all(n in msg for n in T.SUPPORTED)  # the list comes from the C op table
    assert isinstance(e.value, stoker.Error)
    with pytest.raises(ValueError, match="bilinear"):
        T.compile(TV.Compose([TV.Resize(32, interpolation=TV.InterpolationMode.NEAREST)]))
    with pytest.raises(ValueError, match="max_size"):
        T.Resize(32, max_size=64)
    with pytest.raises(ValueError, match="symmetric"):
        T.ColorJitter(brightness=(0.5, 1.2))
    with pytest.raises(ValueError, match="recipe"):
        T.compile("imagenet-test")
    with pytest.raises(ValueError, match="dtype"):
        T.ConvertImageDtype(torch.int32)
    with pytest.raises(TypeError, match="Loader"):
        T.Resize(32)(Image.new("RGB", (4, 4)))
    with pytest.raises(ValueError):
        T.compile(lambda x: x)


# One example of each C op's stoker.transforms class, built with its required arguments.
EXAMPLES = {"RandomResizedCrop": T.RandomResizedCrop(24), "Resize": T.Resize(20),
            "CenterCrop": T.CenterCrop(16), "Grayscale": T.Grayscale(3),
            "RandomPosterize": T.RandomPosterize(4), "RandomSolarize": T.RandomSolarize(128),
            "RandomAdjustSharpness": T.RandomAdjustSharpness(2), "GaussianBlur": T.GaussianBlur(3),
            "RandomCrop": T.RandomCrop(16), "Pad": T.Pad(2), "RandomErasing": T.RandomErasing(),
            "RandomApply": T.RandomApply([T.RandomInvert()]),
            "RandomChoice": T.RandomChoice([T.RandomInvert()]),
            "RandomOrder": T.RandomOrder([T.RandomInvert()]),
            "RandomRotation": T.RandomRotation(10), "RandomAffine": T.RandomAffine(10),
            "Normalize": T.Normalize(T.IMAGENET_MEAN, T.IMAGENET_STD)}


def test_supported_is_the_c_op_table():
    """SUPPORTED is the C library's op table plus the Python-only markers, and every C op has
    a stoker.transforms class whose parameters are the C row's."""
    names = stoker._core.op_names()
    assert "RandomVerticalFlip" in names and len(set(names)) == len(names)
    assert T.SUPPORTED == tuple(names) + T.MARKERS
    for name in names:
        cls = getattr(T, name)
        assert issubclass(cls, T.Op) and name in T.__all__ and T._BY_TV_NAME[name] is cls
        op = EXAMPLES.get(name) or cls()
        params = {p[0]: p for p in stoker._core.op_params(name)}
        d = op.to_dict()
        assert d.pop("kind") == name
        assert set(d) == set(params), name
        for key, value in d.items():  # each value has the count the C row wants
            count = params[key][2]
            assert (len(value) if isinstance(value, tuple) else 1) == count, (name, key)
    assert stoker._core.op_params("Resize") == (("size", "int64", 2),)
    with pytest.raises(ValueError, match="RandomVerticalFlip"):
        stoker._core.op_params("RandomPerspective")


def test_op_dicts_are_parsed_from_the_c_table():
    """stoker._core.Transform reads op dicts through the C table: unknown ops and parameters,
    and values of the wrong shape or type, are named."""
    crop = {"kind": "CenterCrop", "size": (8, 8)}
    with pytest.raises(ValueError) as e:
        stoker._core.Transform([{"kind": "RandomPerspective", "distortion_scale": 0.5}, crop])
    assert "RandomPerspective" in str(e.value)
    assert all(n in str(e.value) for n in stoker._core.op_names())
    with pytest.raises(ValueError, match=r"Resize has no parameter 'sise' \(its parameters: size"):
        stoker._core.Transform([{"kind": "Resize", "sise": (8, 8)}, crop])
    with pytest.raises(ValueError, match="'size' needs 2 integers"):
        stoker._core.Transform([{"kind": "Resize", "size": (8.5, 8)}, crop])
    with pytest.raises(ValueError, match="'mean' needs 3 numbers"):
        stoker._core.Transform([crop, {"kind": "Normalize", "mean": (0.5, 0.5)}])
    with pytest.raises(ValueError, match="'p' needs a number"):
        stoker._core.Transform([crop, {"kind": "RandomVerticalFlip", "p": "half"}])
    with pytest.raises(ValueError, match="'kind'"):
        stoker._core.Transform([{"size": (8, 8)}])


def _fake_v2(name, **attrs):
    """An object whose class is named like torchvision.transforms.v2's `name`."""
    cls = type(name, (), {"__module__": "torchvision.transforms.v2._fake"})
    obj = cls()
    obj.__dict__.update(attrs)
    return obj


def test_torchvision_v2_class_names_convert():
    """v2 transforms convert by class name as v1's do (v2's attributes: ColorJitter ranges as
    tuples or None, ToDtype with a dtype dict and `scale`, ToImage, ToPureTensor)."""
    v2 = [_fake_v2("RandomResizedCrop", size=[32, 32], scale=(0.5, 1.0), ratio=(0.75, 1.33),
                   interpolation=None, antialias=True),
          _fake_v2("RandomVerticalFlip", p=0.25),
          _fake_v2("ColorJitter", brightness=(0.6, 1.4), contrast=None, saturation=None,
                   hue=(-0.1, 0.1)),
          _fake_v2("ToImage"), _fake_v2("ToDtype", dtype=torch.float16, scale=True),
          _fake_v2("Normalize", mean=[0.5, 0.5, 0.5], std=[0.2, 0.2, 0.2], inplace=False),
          _fake_v2("ToPureTensor")]
    ops, dtype, layout, _, _ = T._ops_and_options(_fake_v2("Compose", transforms=v2), None, None,
                                               None)
    assert [type(o).__name__ for o in ops] == ["RandomResizedCrop", "RandomVerticalFlip",
                                               "ColorJitter", "Normalize"]
    assert ops[0].size == (32, 32) and ops[1].p == 0.25 and dtype == "float16"
    assert ops[2].brightness == pytest.approx(0.4) and ops[2].contrast == 0
    ops, dtype, _, _, _ = T._ops_and_options(
        [T.Resize((8, 8)), _fake_v2("ToDtype", dtype={"others": None, _fake_v2("Image").__class__:
                                                      torch.uint8}, scale=False)],
        None, None, None)
    assert dtype == "uint8"
    with pytest.raises(ValueError, match="scale=False"):
        T.compile([T.Resize((8, 8)), _fake_v2("ToDtype", dtype=torch.float32, scale=False)])
    with pytest.raises(ValueError) as e:
        T.compile(_fake_v2("Compose", transforms=[_fake_v2("RandomPerspective", p=0.5)]))
    msg = str(e.value)
    assert "torchvision.transforms.v2._fake.RandomPerspective" in msg
    assert all(n in msg for n in T.SUPPORTED)
    try:
        from torchvision.transforms import v2 as TV2
    except ImportError:
        return  # torchvision < 0.15: the fakes above stand in for it
    ops, dtype, _, _, _ = T._ops_and_options(
        TV2.Compose([TV2.RandomResizedCrop(24), TV2.RandomVerticalFlip(0.3),
                     TV2.RandomHorizontalFlip(), TV2.ToImage(),
                     TV2.ToDtype(torch.float32, scale=True), TV2.Normalize(T.IMAGENET_MEAN,
                                                                            T.IMAGENET_STD)]),
        None, None, None)
    assert [type(o).__name__ for o in ops] == ["RandomResizedCrop", "RandomVerticalFlip",
                                               "RandomHorizontalFlip", "Normalize"]
    assert dtype == "float32"


def test_ops_alias_and_recipes_build():
    assert stoker.ops is T
    tr = T.imagenet_train()
    assert [type(o).__name__ for o in tr.transforms] == [
        "RandomResizedCrop", "RandomHorizontalFlip", "ToTensor", "Normalize"]
    va = T.imagenet_val(96)
    assert va.transforms[0].size == (110, 0) and va.transforms[1].size == (96, 96)


@needs_pipeline
def test_compiled_outputs():
    assert T.compile("imagenet-train").output == {"dtype": "float32", "shape": (3, 224, 224)}
    assert T.compile("imagenet_val").output == {"dtype": "float32", "shape": (3, 224, 224)}
    t = T.compile([T.Resize(40), T.CenterCrop((32, 24)), T.PILToTensor()])
    assert t.output == {"dtype": "uint8", "shape": (3, 32, 24)}
    t = T.compile(T.Compose([T.RandomResizedCrop(16), T.ToDtype("bfloat16")], layout="NHWC"))
    assert t.output == {"dtype": "bfloat16", "shape": (16, 16, 3)}
    t = T.compile(TV.Compose([TV.RandomResizedCrop(20), TV.PILToTensor(),
                              TV.ConvertImageDtype(torch.float16)]))
    assert t.output == {"dtype": "float16", "shape": (3, 20, 20)}
    with pytest.raises(ValueError, match="fixed"):
        T.compile([T.Resize(32)])  # the output size is not fixed
    with pytest.raises(ValueError):
        T.compile([T.CenterCrop(8), T.PILToTensor(), T.Normalize(T.IMAGENET_MEAN,
                                                                 T.IMAGENET_STD)])


# ---- packing ----

def test_pack_image_folder(packed, folder):
    ds = stoker.Dataset(packed)
    assert len(ds) == 24
    assert [f["name"] for f in ds.fields] == ["image", "label", "path"]
    assert ds.classes == ["class_0", "class_1", "class_2"]
    ref = ImageFolder(folder)
    assert [os.path.relpath(p, folder) for p, _ in ref.samples] == \
        [ds[i]["path"].decode() for i in range(24)]
    assert [c for _, c in ref.samples] == [ds[i]["label"] for i in range(24)]
    with open(ref.samples[5][0], "rb") as f:
        assert ds[5]["image"] == f.read()  # stored as is


def test_pack_into_shards(folder, tmp_path):
    n = stoker.pack_image_folder(folder, tmp_path / "shards", shard_size=20000)
    ds = stoker.Dataset(str(tmp_path / "shards"))
    assert n == len(ds) == 24 and len(ds.shards) > 1


# ---- the loader running transforms ----

@needs_pipeline
def test_loader_with_recipe(packed):
    loader = _make(packed, 10, transforms="imagenet-val", num_workers=2)
    batches = list(loader)
    assert [len(b["index"]) for b in batches] == [10, 10, 4]
    b = batches[0]
    assert b["image"].shape == (10, 3, 224, 224) and b["image"].dtype == torch.float32
    assert b["label"].tolist() == [0] * 8 + [1] * 2
    assert b.bytes("path")[0].startswith(b"class_0/")
    assert -3 < float(b["image"].min()) and float(b["image"].max()) < 3  # normalised
    assert loader.info()["transform"] == {"dtype": "float32", "shape": (3, 224, 224)}


@needs_pipeline
def test_loader_matches_torchvision(packed, folder):
    """Resize + CenterCrop to uint8 with exact decoding agrees with torchvision on PIL."""
    tv = TV.Compose([TV.Resize(40), TV.CenterCrop(32), TV.PILToTensor()])
    loader = _make(packed, 24, transforms=T.Compose(tv.transforms, exact=True))
    b = next(iter(loader))
    assert b["image"].dtype == torch.uint8 and b["image"].shape == (24, 3, 32, 32)
    ref = ImageFolder(folder, transform=tv)
    for j, i in enumerate(b["index"].tolist()):
        want = ref[i][0].int()
        diff = (b["image"][j].int() - want).abs()
        assert float(diff.float().mean()) < 1.0, f"image {i}: mean |diff| {diff.float().mean()}"
        assert int(diff.max()) <= 8


@needs_pipeline
def test_loader_vertical_flip_matches_torchvision(packed, folder):
    """RandomVerticalFlip from a torchvision Compose, through the loader: torchvision's pixels
    upside down, exactly (a pure crop decodes as PIL does)."""
    tv = TV.Compose([TV.CenterCrop(32), TV.RandomVerticalFlip(1.0), TV.PILToTensor()])
    b = next(iter(_make(packed, 24, transforms=tv)))
    assert b["image"].dtype == torch.uint8 and b["image"].shape == (24, 3, 32, 32)
    ref = ImageFolder(folder, transform=tv)
    for j, i in enumerate(b["index"].tolist()):
        assert torch.equal(b["image"][j], ref[i][0]), f"image {i}"


@needs_pipeline
def test_augmentation_is_deterministic_and_thread_independent(packed):
    def run(workers, seed=3, epochs=2):
        loader = _make(packed, 8, shuffle=True, seed=seed, num_workers=workers,
                       transforms=[T.RandomResizedCrop(24), T.RandomHorizontalFlip(),
                                   T.ColorJitter(0.3, 0.3, 0.3, 0.05), T.ToTensor()])
        return [torch.cat([b["image"].clone() for b in loader]) for _ in range(epochs)]
    a, b, c = run(1), run(3), run(1, seed=4)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], a[1])  # a new epoch draws new augmentations
    assert not torch.equal(a[0], c[0])


@needs_pipeline
def test_output_dtypes_and_layout(packed):
    loader = _make(packed, 6, transforms=T.Compose([T.Resize((20, 30)), T.ToDtype(torch.bfloat16)],
                                                    layout="NHWC"))
    b = next(iter(loader))
    assert b["image"].dtype == torch.bfloat16 and b["image"].shape == (6, 20, 30, 3)
    assert 0 <= float(b["image"].min()) and float(b["image"].max()) <= 1
    loader = _make(packed, 6, output="numpy",
                   transforms=[T.Resize((20, 30)), T.ConvertImageDtype("float16")])
    b = next(iter(loader))
    assert b["image"].dtype == np.float16 and b["image"].shape == (6, 3, 20, 30)


@needs_pipeline
def test_finish_split_equals_the_whole_transform(packed):
    """A transform built with finish="device" runs its uint8 part on the workers and leaves the
    rest (layout, Normalize, cast) to the loader; without a device the loader finishes on the
    CPU, with the same values as the whole transform, and .output is the finished output."""
    ops = [op.to_dict() for op in [T.CenterCrop(20), T.Normalize((0.5, 0.4, 0.3), (0.2, 0.3, 0.4))]]
    whole = stoker._core.Transform(ops, dtype="float16")
    split = stoker._core.Transform(ops, dtype="float16", finish="device")
    assert split.output == whole.output == {"dtype": "float16", "shape": (3, 20, 20)}
    a = torch.cat([b["image"].clone() for b in _make(packed, 8, transforms=whole)])
    loader = _make(packed, 8, transforms=split)
    got = torch.cat([b["image"].clone() for b in loader])
    assert loader.stats()["finish"] == "cpu"
    assert got.dtype == torch.float16 and torch.equal(got, a)
    with pytest.raises(stoker.StokerInvalidError, match="must be the last op"):
        stoker._core.Transform(ops + [T.RandomHorizontalFlip().to_dict()], finish="device")
    with pytest.raises(stoker.StokerInvalidError, match="not uint8"):
        stoker._core.Transform(ops[:1], dtype="uint8", finish="device")


@needs_pipeline
def test_undecodable_image_names_the_record(folder, tmp_path):
    bad = tmp_path / "bad"
    for cls in ("a", "b"):
        (bad / cls).mkdir(parents=True)
    for i in range(6):
        buf = io.BytesIO()
        _image(i).save(buf, format="JPEG")
        data = buf.getvalue()
        if i == 4:
            data = data[:len(data) // 3]  # truncated JPEG
        (bad / ("a" if i < 3 else "b") / f"{i}.jpg").write_bytes(data)
    out = str(tmp_path / "bad.stk")
    stoker.pack_image_folder(str(bad), out)
    tr = [T.Resize((16, 16)), T.ToTensor()]
    loader = _make(out, 2, transforms=tr)
    it = iter(loader)
    got, errors = [], []
    for _ in range(len(loader)):
        try:
            got.extend(next(it)["index"].tolist())
        except stoker.StokerFormatError as e:
            errors.append(str(e))
    assert got == [0, 1, 2, 3] and len(errors) == 1
    assert "bad.stk" in errors[0] and "record 4" in errors[0]
    skip = _make(out, 2, transforms=tr, on_error="skip")
    idx = torch.cat([b["index"] for b in skip]).tolist()
    assert 4 not in idx and len(idx) == 6
    assert skip.stats()["skipped"] == 1


def test_cli_pack_matches_python_pack(folder, packed, tmp_path):
    """`stoker pack` (the CLI, when built) and stoker.pack_image_folder write the same
    records."""
    cli = os.path.join(os.environ.get("STK_BUILD", os.path.join(os.path.dirname(__file__),
                                                                 "..", "..", "build")), "stoker")
    if not os.access(cli, os.X_OK):
        pytest.skip("the stoker CLI is not built")
    import subprocess
    out = str(tmp_path / "cli.stk")
    r = subprocess.run([cli, "pack", folder, out, "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    a, b = stoker.Dataset(out), stoker.Dataset(packed)
    assert len(a) == len(b) and a.fields == b.fields and a.classes == b.classes
    assert all(a[i] == b[i] for i in range(len(a)))


def test_pixel_ops_from_torchvision():
    """The pixel ops convert from torchvision (v1) with their arguments; Grayscale(1) is refused
    with a message naming it (stoker's images have three channels)."""
    tv = TV.Compose([TV.CenterCrop(16), TV.Grayscale(3), TV.RandomGrayscale(0.2),
                     TV.RandomInvert(0.3), TV.RandomPosterize(3, 0.4),
                     TV.RandomSolarize(100.0, 0.6), TV.RandomAdjustSharpness(1.5, 0.7),
                     TV.RandomAutocontrast(0.8), TV.RandomEqualize(0.9),
                     TV.GaussianBlur((5, 3), (0.5, 1.5))])
    ops = []
    T._flatten(tv, ops)
    assert ops[1:] == [T.Grayscale(3), T.RandomGrayscale(0.2), T.RandomInvert(0.3),
                       T.RandomPosterize(3, 0.4), T.RandomSolarize(100.0, 0.6),
                       T.RandomAdjustSharpness(1.5, 0.7), T.RandomAutocontrast(0.8),
                       T.RandomEqualize(0.9), T.GaussianBlur((5, 3), (0.5, 1.5))]
    assert T.GaussianBlur(3, 0.7).to_dict() == {"kind": "GaussianBlur", "kernel_size": (3, 3),
                                                "sigma": (0.7, 0.7)}
    t = T.compile(tv, dtype="uint8")
    assert t.output == {"dtype": "uint8", "shape": (3, 16, 16)}
    with pytest.raises(ValueError, match="Grayscale.*num_output_channels must be 3"):
        T.compile([T.CenterCrop(8), T.Grayscale()])
    with pytest.raises(ValueError, match="GaussianBlur.*kernel_size must be odd"):
        T.compile([T.CenterCrop(8), T.GaussianBlur(4)])
    assert T.TrivialAugmentWide.from_torchvision(TV.TrivialAugmentWide(15)) == \
        T.TrivialAugmentWide(15)
    assert T.RandAugment.from_torchvision(TV.RandAugment(3, 5, 11)) == T.RandAugment(3, 5, 11)
    assert T.AutoAugment.from_torchvision(TV.AutoAugment()) == T.AutoAugment()
    with pytest.raises(ValueError, match="IMAGENET"):
        T.AutoAugment.from_torchvision(TV.AutoAugment(TV.AutoAugmentPolicy.CIFAR10))
    with pytest.raises(ValueError, match="RandAugment.*magnitude must be in"):
        T.compile([T.CenterCrop(8), T.RandAugment(magnitude=31)])
    with pytest.raises(ValueError, match="NEAREST or BILINEAR"):  # BILINEAR: since the warps
        T.TrivialAugmentWide.from_torchvision(
            TV.TrivialAugmentWide(interpolation=TV.InterpolationMode.BICUBIC))
    with pytest.raises(ValueError, match="RandomPosterize.*bits"):
        T.compile([T.CenterCrop(8), T.RandomPosterize(9)])


PIXEL_AUG = [T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.RandomAdjustSharpness(2.0),
             T.RandomGrayscale(0.3), T.GaussianBlur(3), T.TrivialAugmentWide(), T.AutoAugment(),
             T.RandomApply([T.ColorJitter(0.3), T.RandomInvert(1.0)], p=0.5),
             T.RandomChoice([T.RandomPosterize(3, 1.0), T.RandomSolarize(128, 1.0),
                             T.RandomAutocontrast(1.0), T.RandomEqualize(1.0)]),
             T.RandomErasing(value=(10, 20, 30)), T.PILToTensor()]  # 16 ops, the most there are


@needs_pipeline
def test_pixel_ops_thread_independent_and_resume(packed):
    """The random pixel ops draw from the sample's stream in op order: 1 and 2 worker threads
    give the same bytes, and a loader resumed from a state_dict mid-epoch continues with
    exactly the rest of the epoch."""
    def loader(workers, seed=5):
        return _make(packed, 8, shuffle=True, seed=seed, num_workers=workers,
                     transforms=PIXEL_AUG)
    one = [b["image"].clone() for b in loader(1)]
    two = [b["image"].clone() for b in loader(2)]
    assert len(one) >= 2 and all(torch.equal(a, b) for a, b in zip(one, two))
    other = torch.cat([b["image"].clone() for b in loader(1, seed=6)])
    assert not torch.equal(torch.cat(one), other)
    first = loader(2)
    it = iter(first)
    head = [next(it)["image"].clone()]
    state = first.state_dict()
    first.close()
    resumed = loader(1, seed=99)  # the seed comes from the state
    resumed.load_state_dict(state)
    tail = [b["image"].clone() for b in resumed]
    assert all(torch.equal(a, b) for a, b in zip(head + tail, one)) and len(head + tail) == len(one)


def test_albumentations_spellings():
    """stoker.albumentations: Albumentations' argument order and defaults give the same ops as
    the torchvision spellings; real albumentations objects convert by class name."""
    from stoker import albumentations as A
    albu = A.Compose([A.Resize(256, 256), A.RandomCrop(224, 224), A.HorizontalFlip(),
                      A.Normalize(), A.ToTensorV2()])
    tv = T.Compose([T.Resize((256, 256)), T.RandomCrop(224), T.RandomHorizontalFlip(0.5),
                    T.ToTensor(), T.Normalize(T.IMAGENET_MEAN, T.IMAGENET_STD)])
    ops_a, dt_a, _, _, _ = T._ops_and_options(albu, None, None, None)
    ops_t, dt_t, _, _, _ = T._ops_and_options(tv, None, None, None)
    assert ops_a == ops_t and dt_a == dt_t == "float32"
    assert T.compile(albu).output == {"dtype": "float32", "shape": (3, 224, 224)}
    # ToTensorV2 without Normalize keeps uint8, as Albumentations does
    assert T.compile(A.Compose([A.CenterCrop(32, 48), A.ToTensorV2()])).output == \
        {"dtype": "uint8", "shape": (3, 32, 48)}
    # max_pixel_value scales mean and std: (x - m*M) / (s*M) == (x/255 - m*M/255) / (s*M/255)
    n = A.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25), max_pixel_value=1.0)
    assert n == T.Normalize([0.5 / 255] * 3, [0.25 / 255] * 3)
    with pytest.raises(ValueError, match="RandomCrop: p=0.5"):
        A.RandomCrop(8, 8, p=0.5)
    with pytest.raises(ValueError, match="INTER_LINEAR"):
        A.Resize(8, 8, interpolation=3)

    def fake(name, **attrs):
        cls = type(name, (), {"__module__": "albumentations.augmentations.transforms"})
        obj = cls()
        obj.__dict__.update(attrs)
        return obj
    real = fake("Compose", p=1.0, transforms=[
        fake("Resize", height=64, width=80, interpolation=1, p=1.0),
        fake("RandomCrop", height=48, width=40, p=1.0), fake("HorizontalFlip", p=0.25),
        fake("Normalize", mean=(0.4, 0.4, 0.4), std=(0.2, 0.2, 0.2), max_pixel_value=255.0,
             p=1.0), fake("ToTensorV2", p=1.0)])
    ops, dt, _, _, _ = T._ops_and_options([real], None, None, None)
    assert ops == [T.Resize((64, 80)), T.RandomCrop((48, 40)), T.RandomHorizontalFlip(0.25),
                   T.Normalize([0.4] * 3, [0.2] * 3)] and dt == "float32"
    with pytest.raises(ValueError, match="albumentations.Perspective is not supported"):
        T._ops_and_options([fake("Perspective", p=1.0)], None, None, None)


def test_random_apply_and_choice_from_torchvision():
    """RandomApply/RandomChoice convert with their transforms flattened after them (the count
    in `transforms`); weighted choices and size-changing members are refused."""
    tv = TV.Compose([TV.CenterCrop(16),
                     TV.RandomApply([TV.ColorJitter(0.2), TV.RandomGrayscale(1.0)], p=0.3),
                     TV.RandomChoice([TV.RandomInvert(1.0), TV.RandomEqualize(1.0)])])
    ops, _, _, _, _ = T._ops_and_options(tv, None, None, None)
    assert [type(o).__name__ for o in ops] == ["CenterCrop", "RandomApply", "ColorJitter",
                                              "RandomGrayscale", "RandomChoice", "RandomInvert",
                                              "RandomEqualize"]
    assert ops[1].to_dict() == {"kind": "RandomApply", "transforms": 2, "p": 0.3}
    assert ops[4].to_dict() == {"kind": "RandomChoice", "transforms": 2}
    assert T.compile(tv, dtype="uint8").output == {"dtype": "uint8", "shape": (3, 16, 16)}
    with pytest.raises(ValueError, match="weights"):
        T.RandomChoice([T.RandomInvert()], p=[1.0])
    with pytest.raises(ValueError, match="RandomApply.*CenterCrop.*cannot be one of"):
        T.compile([T.CenterCrop(8), T.RandomApply([T.CenterCrop(4)])])

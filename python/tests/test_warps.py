"""RandomRotation, RandomAffine, RandomOrder and the policies' interpolation/fill against
torchvision 0.14 on PIL images (bit for bit: PIL's NEAREST and BILINEAR affine are reproduced
exactly), their draws against torchvision's get_params, the rules on where they may stand, and
determinism across threads and resume. The C tool gen_imgdump runs one sample and prints its
plan (test_xform_vs_torchvision.py's helpers)."""
import math

import numpy as np
import pytest
import torch
import torchvision.transforms as TV
import torchvision.transforms.functional as F
from torchvision.transforms import InterpolationMode as IM
from PIL import Image

import stoker
from stoker import transforms as T
from test_xform_vs_torchvision import _plans, images, u8  # noqa: F401 (fixture)

CROP = "ccrop:224,200"
MODES = {0: IM.NEAREST, 2: IM.BILINEAR}


def _ks(a, b):
    """Two-sample Kolmogorov-Smirnov statistic."""
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    return np.max(np.abs(np.searchsorted(a, grid, side="right") / len(a) -
                         np.searchsorted(b, grid, side="right") / len(b)))


def _ks_ok(a, b):  # 0.1% level
    return _ks(a, b) < 1.95 * math.sqrt((len(a) + len(b)) / (len(a) * len(b)))


def _base(images):
    path = images["p500x375.jpg"]
    base, _ = u8(path, CROP, 224, 200)
    return path, base


@pytest.mark.parametrize("interp", [0, 2])
@pytest.mark.parametrize("fill", [(0, 0, 0), (10, 200, 37.9)])
def test_rotation_matches_torchvision(images, interp, fill):
    """Each sample is F.rotate(PIL image, its angle, interpolation, fill=...) bit for bit,
    NEAREST and BILINEAR, scalar-like and per-channel fill (int() of each, as _parse_fill)."""
    path, base = _base(images)
    f = ",".join(str(v) for v in fill)
    for index in range(12):
        got, p = u8(path, f"{CROP} RandomRotation:degrees=-40,40;interpolation={interp};"
                    f"fill={f}", 224, 200, index=index)
        angle = p["pixel"][0]["angle"]
        want = np.asarray(F.rotate(Image.fromarray(base), angle, MODES[interp], fill=list(fill)))
        assert np.array_equal(got, want), (index, angle, int(np.sum(got != want)))


def test_rotation_center_and_expand_match_torchvision(images):
    """center=(x, y) as torchvision passes it to PIL; expand=True with one angle grows the
    output to PIL's size (the transposes for 90/180 included) and pixels."""
    path, base = _base(images)
    for c in ((10, 20), (150.5, 3)):
        got, _ = u8(path, f"{CROP} RandomRotation:degrees=25,25;center={c[0]},{c[1]}", 224, 200)
        want = np.asarray(F.rotate(Image.fromarray(base), 25, IM.NEAREST, center=list(c)))
        assert np.array_equal(got, want), c
    for angle in (33, 90, -90, 180, 12.5):
        want = np.asarray(F.rotate(Image.fromarray(base), angle, IM.BILINEAR, expand=True,
                                   fill=[1, 2, 3]))
        h, w = want.shape[:2]
        t = T.compile([T.CenterCrop((224, 200)),
                       T.RandomRotation((angle, angle), IM.BILINEAR, expand=True, fill=(1, 2, 3))],
                      dtype="uint8")
        assert t.output["shape"] == (3, h, w), angle
        got, _ = u8(path, f"{CROP} RandomRotation:degrees={angle},{angle};expand=1;"
                    "interpolation=2;fill=1,2,3", h, w)
        assert np.array_equal(got, want), angle
    # the ops after it see the expanded image (RandomErasing's box within it)
    plans = _plans(path, f"{CROP} RandomRotation:degrees=33,33;expand=1 "
                   "RandomErasing:p=1;scale=0.5,0.5;ratio=1,1;value=0,0,0", 50)
    assert max(pl["pixel"][1]["box"][0] + pl["pixel"][1]["box"][2] for pl in plans) > 224


@pytest.mark.parametrize("interp", [0, 2])
def test_affine_matches_torchvision(images, interp):
    """Each sample is F.affine(PIL image, its angle, (tx, ty), scale, shear, interpolation,
    fill, center) bit for bit."""
    path, base = _base(images)
    for index, center in zip(range(12), [None] * 8 + [(30, 40)] * 4):
        cs = "" if center is None else f";center={center[0]},{center[1]}"
        got, p = u8(path, f"{CROP} RandomAffine:degrees=-20,20;translate=0.1,0.2;scale=0.8,1.2;"
                    f"shear=-10,10,-5,5;interpolation={interp};fill=7,8,9{cs}", 224, 200,
                    index=index)
        d = p["pixel"][0]
        tx, ty = d["translate"]
        assert tx == int(tx) and abs(tx) <= 0.1 * 200 and abs(ty) <= 0.2 * 224
        want = np.asarray(F.affine(Image.fromarray(base), d["angle"], [int(tx), int(ty)],
                                   d["scale"], d["shear"], MODES[interp], fill=[7, 8, 9],
                                   center=None if center is None else list(center)))
        assert np.array_equal(got, want), (index, d, int(np.sum(got != want)))


def test_warp_draws_distribution(images):
    """RandomRotation's angle and RandomAffine's five draws against torchvision's get_params
    (two-sample KS, 0.1% level, 3000 samples each); the draws of one sample are independent
    (RandomAffine's angle and scale uncorrelated)."""
    path = images["p400x300.png"]
    n = 3000
    rot = _plans(path, "ccrop:50,40 RandomRotation:degrees=-30,10", n)
    ours = np.array([pl["pixel"][0]["angle"] for pl in rot])
    torch.manual_seed(0)
    theirs = np.array([TV.RandomRotation.get_params([-30.0, 10.0]) for _ in range(n)])
    assert _ks_ok(ours, theirs) and ours.min() >= -30 and ours.max() < 10
    aff = [pl["pixel"][0] for pl in _plans(
        path, "ccrop:50,40 RandomAffine:degrees=-15,15;translate=0.3,0.1;scale=0.7,1.3;"
        "shear=-8,4,-2,6", n)]
    ref = [TV.RandomAffine.get_params([-15.0, 15.0], [0.3, 0.1], [0.7, 1.3],
                                      [-8.0, 4.0, -2.0, 6.0], [40, 50]) for _ in range(n)]
    cols = {"angle": ([d["angle"] for d in aff], [r[0] for r in ref]),
            "tx": ([d["translate"][0] for d in aff], [r[1][0] for r in ref]),
            "ty": ([d["translate"][1] for d in aff], [r[1][1] for r in ref]),
            "scale": ([d["scale"] for d in aff], [r[2] for r in ref]),
            "shear_x": ([d["shear"][0] for d in aff], [r[3][0] for r in ref]),
            "shear_y": ([d["shear"][1] for d in aff], [r[3][1] for r in ref])}
    for name, (a, b) in cols.items():
        a, b = np.array(a, float), np.array(b, float)
        if name in ("tx", "ty"):  # integers: chi-square over the values
            vals = sorted(set(a) | set(b))
            ca = np.array([np.sum(a == v) for v in vals])
            cb = np.array([np.sum(b == v) for v in vals])
            tot = ca + cb
            chi2 = float(np.sum((ca - tot / 2) ** 2 / (tot / 2) + (cb - tot / 2) ** 2 / (tot / 2)))
            dof = len(vals) - 1
            assert chi2 < dof + 4.5 * math.sqrt(2 * dof), (name, chi2, dof)
        else:
            assert _ks_ok(a, b), (name, _ks(a, b))
    ang = np.array(cols["angle"][0])
    sc = np.array(cols["scale"][0])
    assert abs(np.corrcoef(ang, sc)[0, 1]) < 4 / math.sqrt(n)


@pytest.mark.parametrize("interp", [0, 2])
def test_policy_interpolation_and_fill_match_torchvision(images, interp):
    """TrivialAugmentWide with fill and BILINEAR: each sample's warp is torchvision's _apply_op
    on the PIL image with that interpolation and fill, bit for bit."""
    from torchvision.transforms.autoaugment import _apply_op
    path, base = _base(images)
    warps = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")
    seen = 0
    for index in range(60):
        got, p = u8(path, f"{CROP} TrivialAugmentWide:num_magnitude_bins=31;"
                    f"interpolation={interp};fill=30,60,90", 224, 200, index=index)
        (name, mag), = p["pixel"][0]["ops"]
        if name not in warps:
            continue
        seen += 1
        want = np.asarray(_apply_op(Image.fromarray(base), name, mag, MODES[interp],
                                    [30, 60, 90]))
        assert np.array_equal(got, want), (index, name, mag)
    assert seen >= 10


def test_random_order_is_a_uniform_permutation(images):
    """RandomOrder runs each of its ops once, in an order uniform over the n! permutations
    (chi-square, 0.1%), and the output is the ops applied in that order (torchvision's)."""
    path = images["p400x300.png"]
    n = 3000
    plans = _plans(path, "ccrop:16 RandomOrder:transforms=3 invert:1 posterize:2,1 gray", n)
    orders = [tuple(d["op"] for d in pl["pixel"]) for pl in plans]
    assert all(sorted(o) == ["Grayscale", "RandomInvert", "RandomPosterize"] for o in orders)
    counts = np.array(list({o: orders.count(o) for o in set(orders)}.values()))
    assert len(counts) == 6
    assert float(np.sum((counts - n / 6) ** 2 / (n / 6))) < 20.52, counts
    path, base = _base(images)
    fns = {"RandomRotation": None, "RandomInvert": F.invert,
           "RandomSolarize": lambda t: F.solarize(t, 100)}
    for index in range(8):
        got, p = u8(path, f"{CROP} RandomOrder:transforms=3 "
                    "RandomRotation:degrees=-30,30 invert:1 solarize:100,1", 224, 200,
                    index=index)
        img = base
        for d in p["pixel"]:
            if d["op"] == "RandomRotation":
                img = np.asarray(F.rotate(Image.fromarray(img), d["angle"], IM.NEAREST))
            else:
                t = torch.from_numpy(np.array(img)).permute(2, 0, 1)
                img = fns[d["op"]](t).permute(1, 2, 0).numpy()
        assert np.array_equal(got, img), (index, [d["op"] for d in p["pixel"]])


def test_where_warps_may_stand():
    """A warp runs on the output-size image: a geometric op after it, a RandomOrder mixing it
    with a flip, expand=True with a range of angles, an unsupported interpolation and a fill
    out of range are refused naming the op; a warp inside RandomApply/RandomChoice is fine."""
    with pytest.raises(ValueError, match=r"ops\[2\] \(CenterCrop\).*RandomRotation \(ops\[1\]\)"):
        T.compile([T.Resize((64, 64)), T.RandomRotation(10), T.CenterCrop(32)])
    with pytest.raises(ValueError, match="RandomHorizontalFlip.*RandomAffine"):
        T.compile([T.CenterCrop(32), T.RandomAffine(10), T.RandomHorizontalFlip()])
    with pytest.raises(ValueError, match="RandomOrder.*cannot mix warps"):
        T.compile([T.CenterCrop(32), T.RandomOrder([T.RandomHorizontalFlip(),
                                                    T.RandomRotation(5)])])
    with pytest.raises(ValueError, match=r"RandomRotation.*expand=True.*degrees=\(a, a\)"):
        T.compile([T.CenterCrop(32), T.RandomRotation(10, expand=True)])
    with pytest.raises(ValueError, match="RandomRotation: interpolation must be NEAREST or "
                                         "BILINEAR"):
        T.RandomRotation(10, interpolation=IM.BICUBIC)
    with pytest.raises(ValueError, match="RandomAffine: fill"):
        T.RandomAffine(10, fill=300)
    with pytest.raises(ValueError, match="TrivialAugmentWide: interpolation"):
        T.TrivialAugmentWide(interpolation=IM.BICUBIC)
    with pytest.raises(ValueError, match="RandomAffine: translate"):
        T.RandomAffine(0, translate=(0.5, 2))
    with pytest.raises(ValueError, match="RandomOrder: each of its transforms must be one op"):
        T.compile([T.CenterCrop(32), T.RandomOrder([T.RandomApply([T.RandomInvert()])])])
    t = T.compile([T.CenterCrop(32), T.RandomApply([T.RandomRotation(10)], p=0.3),
                   T.RandomChoice([T.RandomAffine(5), T.RandomInvert()]),
                   T.RandomOrder([T.RandomRotation(3), T.RandomInvert()]), T.ToTensor()])
    assert t.output == {"dtype": "float32", "shape": (3, 32, 32)}


def test_torchvision_and_v2_names_convert():
    """torchvision's RandomRotation/RandomAffine/RandomOrder (v1 objects, and fakes named like
    torchvision.transforms.v2's with v2's attributes: fill as a dict by type) convert to the
    same ops; the v2-only names go through the V2_ONLY table."""
    tv = TV.Compose([TV.CenterCrop(32), TV.RandomOrder([TV.RandomInvert(), TV.RandomEqualize()]),
                     TV.RandomRotation((-5, 15), IM.BILINEAR, fill=[1, 2, 3], center=[3, 4]),
                     TV.RandomAffine(10, (0.1, 0.2), (0.9, 1.1), (-3, 3, -2, 2), fill=9)])
    ops = []
    T._flatten(tv, ops)
    want = []
    T._flatten([T.CenterCrop(32), T.RandomOrder([T.RandomInvert(), T.RandomEqualize()]),
                T.RandomRotation((-5, 15), IM.BILINEAR, fill=(1, 2, 3), center=(3, 4)),
                T.RandomAffine((-10, 10), (0.1, 0.2), (0.9, 1.1), (-3, 3, -2, 2), fill=9)], want)
    assert [repr(o) for o in ops] == [repr(o) for o in want]
    assert ops[1].to_dict() == {"kind": "RandomOrder", "transforms": 2}
    assert ops[4].to_dict()["interpolation"] == 2 and ops[5].to_dict()["shear"] == (-3, 3, -2, 2)

    def v2(name, **attrs):
        cls = type(name, (), {"__module__": "torchvision.transforms.v2._geometry"})
        obj = cls()
        obj.__dict__.update(attrs)
        return obj
    image_type = type("Image", (), {})
    fakes = [v2("CenterCrop", size=[32, 32]),
             v2("RandomRotation", degrees=[-5.0, 15.0], interpolation=IM.BILINEAR, expand=False,
                center=[3, 4], fill={image_type: [1, 2, 3], "others": 0}),
             v2("RandomAffine", degrees=[-10.0, 10.0], translate=[0.1, 0.2], scale=[0.9, 1.1],
                shear=[-3.0, 3.0, -2.0, 2.0], interpolation=IM.NEAREST, fill={"others": 9},
                center=None)]
    ops = []
    T._flatten(v2("Compose", transforms=fakes), ops)
    assert [repr(o) for o in ops] == [repr(o) for o in (want[:1] + want[4:])]
    for name, cls in T.V2_ONLY.items():  # every v2-only name converts by the table
        got = T._from_torchvision(v2(name, dtype=torch.float16))
        assert (got == [] if cls is None else type(got[0]) is cls), name
    assert T._from_torchvision(v2("ConvertDtype", dtype=torch.float16))[0].dtype == "float16"


def test_albumentations_rotate_and_shift_scale_rotate():
    """stoker.albumentations.Rotate/ShiftScaleRotate: Albumentations' arguments and defaults
    (p=0.5 -> RandomApply), BORDER_CONSTANT only; real albumentations objects convert by name."""
    from stoker import albumentations as A
    r = A.Rotate(30, border_mode=0, value=5)
    assert isinstance(r, T.RandomApply) and r.p == 0.5
    assert repr(r.transforms[0]) == repr(T.RandomRotation(30, IM.BILINEAR, fill=5))
    s = A.ShiftScaleRotate(0.1, 0.2, 15, interpolation=0, border_mode=0, p=1)
    assert repr(s) == repr(T.RandomAffine(15, (0.1, 0.1), (0.8, 1.2)))
    with pytest.raises(ValueError, match="Rotate: only border_mode=cv2.BORDER_CONSTANT"):
        A.Rotate(10)
    with pytest.raises(ValueError, match="ShiftScaleRotate: shift limits must be symmetric"):
        A.ShiftScaleRotate(shift_limit=(0, 0.1), border_mode=0)

    def fake(name, **attrs):
        cls = type(name, (), {"__module__": "albumentations.augmentations.geometric"})
        obj = cls()
        obj.__dict__.update(attrs)
        return obj
    ops, _, _, _, _ = T._ops_and_options(
        [T.CenterCrop(32),
         fake("Rotate", limit=(-20, 20), interpolation=1, border_mode=0, value=None, p=1.0),
         fake("ShiftScaleRotate", shift_limit_x=(-0.1, 0.1), shift_limit_y=(-0.05, 0.05),
              scale_limit=(0.9, 1.1), rotate_limit=(-10, 10), interpolation=1, border_mode=0,
              value=(1, 2, 3), p=0.25)], None, None, None)
    assert repr(ops[1]) == repr(T.RandomRotation(20, IM.BILINEAR))
    assert isinstance(ops[2], T.RandomApply) and ops[2].p == 0.25
    assert repr(ops[3]) == repr(T.RandomAffine(10, (0.1, 0.05), (0.9, 1.1), None, IM.BILINEAR,
                                               (1, 2, 3)))


# ---- AugMix ----

WARPS = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"}


def test_augmix_matches_torchvision(images):
    """Each sample is torchvision's AugMix forward with the sample's draws: m0 * image + the sum
    of w_i * chain_i in float32, truncated; the chains' colour ops on the tensor path as
    torchvision runs them, bit for bit; a chain with a warp differs by the warp (stoker's are
    PIL's, torchvision's AugMix uses grid_sample): 40 dB PSNR at least."""
    from torchvision.transforms.autoaugment import _apply_op
    path, base = _base(images)
    t = torch.from_numpy(base.copy()).permute(2, 0, 1)
    n_exact = 0
    for index in range(16):
        got, p = u8(path, f"{CROP} AugMix:severity=3", 224, 200, index=index)
        d = p["pixel"][0]
        mix = np.float32(d["m0"]) * base.astype(np.float32)
        warped = False
        for chain in d["chains"]:
            aug = t
            for name, mag in chain["ops"]:
                warped |= name in WARPS
                aug = _apply_op(aug, name, mag, IM.BILINEAR, None)
            mix += np.float32(chain["w"]) * aug.permute(1, 2, 0).numpy().astype(np.float32)
        want = mix.astype(np.uint8)
        if not warped:
            assert np.array_equal(got, want), index
            n_exact += 1
        else:
            mse = float(np.mean((got.astype(float) - want) ** 2))
            assert mse == 0 or 10 * np.log10(255 ** 2 / mse) >= 40, (index, mse)
    assert n_exact >= 1
    assert T.AugMix.from_torchvision(TV.AugMix(2, 4, 2, 0.5, False)) == \
        T.AugMix(2, 4, 2, 0.5, False)


def test_augmix_draws_distribution(images):
    """Over 2000 samples: m0 ~ Beta(alpha, alpha) (two-sample KS against torch's
    _sample_dirichlet, alpha 1 and 0.5), the weights sum to 1, depth uniform in 1..3 and ops
    uniform over the 13 (chi-square, 0.1%), magnitudes from the first `severity` bins."""
    path = images["p400x300.png"]
    n = 2000
    for alpha in (1.0, 0.5):
        plans = _plans(path, f"ccrop:16 AugMix:alpha={alpha}", n)
        draws = [pl["pixel"][0] for pl in plans]
        m0 = np.array([d["m0"] for d in draws])
        torch.manual_seed(0)
        ref = torch._sample_dirichlet(torch.full((n, 2), alpha))[:, 0].numpy()
        assert _ks_ok(m0, ref), (alpha, _ks(m0, ref))
        sums = np.array([d["m0"] + sum(c["w"] for c in d["chains"]) for d in draws])
        assert np.allclose(sums, 1, atol=1e-5)
    depths = np.array([len(c["ops"]) for d in draws for c in d["chains"]])
    counts = np.bincount(depths, minlength=4)[1:]
    assert float(np.sum((counts - len(depths) / 3) ** 2 / (len(depths) / 3))) < 13.82, counts
    names = list(TV.AugMix()._augmentation_space(10, (16, 16)))
    ops = [o for d in draws for c in d["chains"] for o in c["ops"]]
    c = np.array([sum(o[0] == k for o in ops) for k in names])
    assert float(np.sum((c - len(ops) / 13) ** 2 / (len(ops) / 13))) < 32.91, c
    rot = TV.AugMix()._augmentation_space(10, (16, 16))["Rotate"][0].tolist()[:3]
    assert {abs(m) for name, m in ops if name == "Rotate"} == set(rot)


needs_pipeline = pytest.mark.skipif(not stoker.has_transforms(),
                                    reason="this build has no image pipeline")

WARP_AUG = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(),
                      T.RandomOrder([T.RandomInvert(0.3), T.RandomEqualize(0.3)]),
                      T.RandomApply([T.RandomRotation(30, IM.BILINEAR, fill=(9, 90, 200))], 0.7),
                      T.RandomAffine(10, (0.1, 0.1), (0.8, 1.2), 5, fill=50),
                      T.TrivialAugmentWide(fill=(1, 2, 3)), T.AugMix(), T.ToTensor()])


@needs_pipeline
def test_warps_thread_independent_and_resume(tmp_path):
    """The warps, RandomOrder and AugMix draw from the sample's stream: 1, 2 and 7 threads give
    the same bytes, and a loader resumed mid-epoch continues with exactly the rest."""
    from test_transforms import _image
    root = tmp_path / "imgs"
    for i in range(24):
        (root / f"c{i % 3}").mkdir(parents=True, exist_ok=True)
        _image(i).save(root / f"c{i % 3}" / f"{i:03d}.jpg", quality=90)
    packed = str(tmp_path / "imgs.stk")
    assert stoker.pack_image_folder(str(root), packed) == 24

    def loader(workers, seed=5):
        return stoker.Loader(packed, 8, rank=0, world_size=1, shuffle=True, seed=seed,
                             num_workers=workers, transforms=WARP_AUG)
    one = [b["image"].clone() for b in loader(1)]
    for workers in (2, 7):
        other = [b["image"].clone() for b in loader(workers)]
        assert len(one) == 3 and all(torch.equal(a, b) for a, b in zip(one, other)), workers
    assert not torch.equal(torch.cat(one), torch.cat([b["image"] for b in loader(1, seed=6)]))
    first = loader(2)
    it = iter(first)
    head = [next(it)["image"].clone()]
    state = first.state_dict()
    first.close()
    resumed = loader(1, seed=99)
    resumed.load_state_dict(state)
    tail = [b["image"].clone() for b in resumed]
    assert all(torch.equal(a, b) for a, b in zip(head + tail, one)) and len(head + tail) == 3


# ---- Pad/RandomCrop: fill and padding_mode ----

MODE_CODES = {"constant": 0, "edge": 1, "reflect": 2, "symmetric": 3}


@pytest.mark.parametrize("mode", list(MODE_CODES))
def test_pad_fill_and_modes_match_torchvision(images, mode):
    """Pad(padding, fill, padding_mode) is torchvision's F.pad on the PIL image bit for bit:
    constant with a per-channel fill (int() of each), edge, reflect and symmetric, including
    padding wider than the image (numpy's repeated reflection)."""
    from test_xform_vs_torchvision import pil
    path = images["p400x300.png"]
    img = F.center_crop(pil(path), [37, 50])
    for pad in ((3, 5, 7, 2), (60, 1, 0, 45), (10, 10, 10, 10)):
        fill = (9, 99, 200.5) if mode == "constant" else 0
        want = np.asarray(F.pad(img, list(pad), fill=fill, padding_mode=mode))
        h, w = want.shape[:2]
        got, _ = u8(path, "ccrop:37,50 Pad:padding=" + ",".join(map(str, pad)) +
                    f";fill=9,99,200.5;padding_mode={MODE_CODES[mode]}", h, w)
        assert np.array_equal(got, want), (mode, pad, int(np.sum(got != want)))


@pytest.mark.parametrize("mode", list(MODE_CODES))
def test_random_crop_fill_and_modes_match_torchvision(images, mode):
    """RandomCrop(size, padding, pad_if_needed, fill, padding_mode) is torchvision's crop of its
    padded image at the offset the plan drew, bit for bit."""
    from test_xform_vs_torchvision import pil
    code = MODE_CODES[mode]
    for name, (h, w, pad, pin) in (("p500x375.jpg", (300, 280, (4, 4, 4, 4), 0)),
                                   ("p400x300.png", (320, 420, (3, 1, 4, 1), 1))):
        path = images[name]
        fill = (5, 6, 7) if mode == "constant" else 0
        padded = F.pad(pil(path), list(pad), fill=fill, padding_mode=mode)
        dw = max(w - padded.size[0], 0) if pin else 0
        dh = max(h - padded.size[1], 0) if pin else 0
        if pin:
            padded = F.pad(padded, [dw, dh, dw, dh], fill=fill, padding_mode=mode)
        for index in range(3):
            got, p = u8(path, f"RandomCrop:size={h},{w};padding={','.join(map(str, pad))};"
                        f"pad_if_needed={pin};fill=5,6,7;padding_mode={code}", h, w, index=index)
            i = int(p["origin"][0]) + pad[1] + dh
            j = int(p["origin"][1]) + pad[0] + dw
            want = np.asarray(F.crop(padded, i, j, h, w))
            assert np.array_equal(got, want), (name, mode, index)
    t = T.compile(TV.Compose([TV.CenterCrop(32), TV.RandomCrop(32, 4, fill=(1, 2, 3),
                                                               padding_mode=mode)]))
    assert t.output["shape"] == (3, 32, 32)


def test_padding_style_rules():
    """One padding style per transform, none before a resize (stoker resamples padding as an
    edge extension), the modes by name; errors name the ops."""
    with pytest.raises(ValueError, match=r"ops\[2\] \(Resize\): cannot follow Pad \(ops\[1\]\)"):
        T.compile([T.CenterCrop(32), T.Pad(4, padding_mode="reflect"), T.Resize((32, 32))])
    with pytest.raises(ValueError, match=r"RandomCrop.*must equal those of Pad \(ops\[1\]\)"):
        T.compile([T.CenterCrop(32), T.Pad(4, fill=3), T.RandomCrop(32, 2, fill=4)])
    with pytest.raises(ValueError, match="Pad: padding_mode must be one of"):
        T.Pad(2, padding_mode="wrap")
    with pytest.raises(ValueError, match="RandomCrop: fill"):
        T.RandomCrop(8, 2, fill=(1, 2))
    # a zero fill before a resize too (torchvision blends the zeros into the border: up to 224
    # grey levels from stoker's edge extension), and RandomCrop's padding; after it, fine
    with pytest.raises(ValueError, match=r"ops\[1\] \(Resize\): cannot follow Pad \(ops\[0\]\)"):
        T.compile([T.Pad(4), T.Resize((16, 16))])
    with pytest.raises(ValueError, match=r"cannot follow RandomCrop \(ops\[0\]\), a padding"):
        T.compile([T.RandomCrop(32, padding=4), T.Resize((16, 16))])
    assert T.compile([T.Resize((16, 16)), T.Pad(4)]).output["shape"] == (3, 24, 24)
    assert T.compile([T.RandomCrop(32), T.Resize((16, 16))]).output["shape"] == (3, 16, 16)

"""Batch transforms (MixUp, CutMix, RandomChoice of them) and Loader(map=fn)."""
import os
import threading
import time

import numpy as np
import pytest

import stoker
from stoker import transforms as T

N, K, C, H, W = 48, 6, 3, 16, 20


def image(i):
    """Record i's image: distinct values per record and pixel."""
    return np.arange(C * H * W, dtype=np.float32).reshape(C, H, W) + 10000.0 * i


def label(i):
    return (i * 5) % K  # consecutive records have different labels


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    d = tmp_path_factory.mktemp("mix")
    path = os.path.join(d, "s.stk")
    stoker.write_shard(path, {"image": ("float32", (C, H, W)), "label": "int64"},
                       ({"image": image(i), "label": label(i)} for i in range(N)))
    return path


def batches(ds, **kw):
    kw.setdefault("batch_size", 8)
    kw.setdefault("output", "numpy")
    with stoker.Loader(ds, **kw) as L:
        return [{k: np.array(v) for k, v in b.items()} for b in L]


def rolled(b, i):
    return b["index"][i - 1] if i else b["index"][-1]


def lam_of(b, i):
    """MixUp's lambda for sample i, from its first pixel (records differ by 10000 there)."""
    own, other = image(b["index"][i])[0, 0, 0], image(rolled(b, i))[0, 0, 0]
    return float((b["image"][i][0, 0, 0] - other) / (own - other))


def check_labels(b, i, lam):
    want = np.zeros(K, np.float32)
    want[label(b["index"][i])] += lam
    want[label(rolled(b, i))] += 1 - lam
    np.testing.assert_allclose(b["label"][i], want, atol=1e-5)


def test_mixup_labels_and_images(ds):
    for b in batches(ds, batch_transforms=[T.MixUp(0.4, K)], shuffle=True, seed=3):
        assert b["label"].dtype == np.float32 and b["label"].shape[1] == K
        np.testing.assert_allclose(b["label"].sum(1), 1.0, rtol=1e-6)
        lam = lam_of(b, 0)
        for i in range(len(b["index"])):
            j = rolled(b, i)
            check_labels(b, i, lam)
            np.testing.assert_allclose(b["image"][i],
                                       lam * image(b["index"][i]) + (1 - lam) * image(j),
                                       rtol=1e-5)
            assert lam_of(b, i) == pytest.approx(lam, abs=1e-4)  # one lambda per batch


def test_cutmix_box_area_matches_lambda(ds):
    seen_box = False
    for b in batches(ds, batch_transforms=T.CutMix(1.0, K), shuffle=True, seed=5):
        np.testing.assert_allclose(b["label"].sum(1), 1.0, rtol=1e-6)
        for i in range(len(b["index"])):
            own, other = image(b["index"][i]), image(rolled(b, i))
            from_other = b["image"][i] == other
            assert np.all(from_other | (b["image"][i] == own))
            assert np.all(from_other == from_other[0])  # the same box in every channel
            area = from_other[0].sum()
            if area:  # a rectangle
                ys, xs = np.nonzero(from_other[0])
                assert area == (ys.ptp() + 1) * (xs.ptp() + 1)
                seen_box = True
            check_labels(b, i, 1 - area / (H * W))
    assert seen_box


def test_random_choice_uses_both(ds):
    kinds = set()
    for epoch_batches in [batches(ds, batch_size=4, seed=s, batch_transforms=T.RandomChoice(
            [T.MixUp(1.0, K), T.CutMix(1.0, K)])) for s in range(3)]:
        for b in epoch_batches:
            np.testing.assert_allclose(b["label"].sum(1), 1.0, rtol=1e-6)
            i, j = 0, rolled(b, 0)
            pure = np.all((b["image"][i] == image(b["index"][i])) | (b["image"][i] == image(j)))
            kinds.add("cutmix" if pure else "mixup")
    assert kinds == {"cutmix", "mixup"}


def test_torchvision_classes_accepted(ds):
    v2 = pytest.importorskip("torchvision.transforms.v2")
    if not hasattr(v2, "MixUp"):
        pytest.skip("torchvision without v2.MixUp")
    out = batches(ds, batch_transforms=v2.RandomChoice([v2.MixUp(alpha=1.0, num_classes=K),
                                                        v2.CutMix(alpha=1.0, num_classes=K)]))
    assert out[0]["label"].shape == (8, K)


def test_reproducible_threads_and_resume(ds):
    kw = dict(batch_transforms=T.RandomChoice([T.MixUp(0.8, K), T.CutMix(0.8, K)]),
              shuffle=True, seed=11)
    one = batches(ds, num_workers=1, **kw)
    two = batches(ds, num_workers=2, **kw)
    again = batches(ds, num_workers=2, **kw)
    for a, b, c in zip(one, two, again):
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
            np.testing.assert_array_equal(a[k], c[k])
    with stoker.Loader(ds, batch_size=8, output="numpy", num_workers=2, **kw) as L:
        it = iter(L)
        next(it), next(it)
        state = L.state_dict()
    with stoker.Loader(ds, batch_size=8, output="numpy", num_workers=1, **kw) as L:
        L.load_state_dict(state)
        rest = [{k: np.array(v) for k, v in b.items()} for b in L]
    assert len(rest) == len(one) - 2
    for a, b in zip(one[2:], rest):
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])


def test_batch_transform_errors(ds, tmp_path):
    with pytest.raises(stoker.StokerInvalidError, match="num_classes"):
        T.MixUp(1.0, 1)
    with pytest.raises(stoker.StokerInvalidError, match="alpha"):
        T.CutMix(0.0, K)
    with pytest.raises(stoker.StokerInvalidError, match="label field 'lbl'"):
        stoker.Loader(ds, batch_size=4, batch_transforms=T.MixUp(1.0, K), label_field="lbl")
    with pytest.raises(stoker.StokerNotSupportedError, match="not supported"):
        stoker.Loader(ds, batch_size=4, batch_transforms=[object()])
    # a label outside [0, num_classes) names its record
    with pytest.raises(stoker.Error, match=r"record \d+.*label \d+ is outside \[0, 3\)"):
        batches(ds, batch_transforms=T.MixUp(1.0, 3))
    u8 = str(tmp_path / "u8.stk")
    stoker.write_shard(u8, {"image": ("uint8", (4, 4, 3)), "label": "int64"},
                       ({"image": np.zeros((4, 4, 3), np.uint8), "label": 0} for _ in range(4)))
    with pytest.raises(stoker.StokerInvalidError, match="MixUp needs float32 images"):
        stoker.Loader(u8, batch_size=4, batch_transforms=T.MixUp(1.0, K))


# ---- map= ----

def test_map_once_per_sample_two_threads(ds):
    calls, lock = [], threading.Lock()  # record of each worker call, in call order

    def fn(s):
        r = int(s["image"][0, 0, 0] // 10000)
        if threading.current_thread() is threading.main_thread():
            return {"x": s["image"].sum(axis=0), "y": 0, "f": 0.0, "call": -1}  # the probe
        with lock:
            calls.append(r)
            call = len(calls) - 1
        return {"x": s["image"].sum(axis=0), "y": s["label"] * 2, "f": float(s["label"]) / 2,
                "call": call}

    with stoker.Loader(ds, batch_size=8, output="numpy", num_workers=2, map=fn, prefetch=2,
                       shuffle=True, seed=1) as L:
        got = [{k: np.array(v) for k, v in b.items()} for b in L]
    idx = np.concatenate([b["index"] for b in got])
    call = np.concatenate([b["call"] for b in got])
    assert sorted(idx) == list(range(N))
    # each delivered sample is the result of its own call, on its own record ...
    assert len(set(call.tolist())) == N and [calls[c] for c in call] == idx.tolist()
    # ... and no other call ran in this epoch (the rest prefetch the next: at most 3 slots)
    assert len(calls) - N <= 3 * 8
    for b in got:
        assert set(b) == {"x", "y", "f", "call", "index"}
        assert b["x"].shape == (len(b["index"]), H, W) and b["f"].dtype == np.float32
        for i, r in enumerate(b["index"]):
            np.testing.assert_allclose(b["x"][i], image(r).sum(axis=0))
            assert b["y"][i] == label(r) * 2 and b["f"][i] == label(r) / 2


def test_map_exception_carries_record_and_traceback(ds):
    def fn(s):
        if s["label"] == 2:
            raise KeyError("no such row")
        return {"y": s["label"]}

    with stoker.Loader(ds, batch_size=8, output="numpy", num_workers=2, map=fn) as L:
        with pytest.raises(stoker.Error) as ei:
            for _ in L:
                pass
        where = L.dataset.describe(4)  # label(4) == 2: the first failing record of batch 0
    assert str(ei.value).startswith(where + ": map function raised KeyError")
    cause = ei.value.__cause__
    assert isinstance(cause, KeyError) and cause.__traceback__ is not None
    assert "fn" in [f.name for f in __import__("traceback").extract_tb(cause.__traceback__)]


def test_map_skip_counts(ds):
    def fn(s):
        if s["label"] == 2:
            raise ValueError("bad")
        return {"y": s["label"]}

    with stoker.Loader(ds, batch_size=8, output="numpy", num_workers=2, map=fn,
                       on_error="skip") as L:
        ys = np.concatenate([np.array(b["y"]) for b in L])
        assert len(ys) == N and 2 not in ys
        assert L.stats()["skipped"] == sum(label(i) == 2 for i in range(N))


def test_map_shapes_enforced(ds):
    def fn(s):
        n = 3 if s["label"] == 4 else 2
        return {"v": np.zeros(n, np.float32)}

    with stoker.Loader(ds, batch_size=8, output="numpy", map=fn) as L:
        with pytest.raises(stoker.Error, match=r"record \d+.*field 'v' has shape \(3,\), but "
                                               r"the first sample fixed \(2,\)"):
            for _ in L:
                pass


def test_map_unbatchable_first_sample(ds):
    with pytest.raises(stoker.StokerInvalidError, match="field 'name' is a str"):
        stoker.Loader(ds, batch_size=4, map=lambda s: {"name": "x"})
    with pytest.raises(stoker.StokerInvalidError, match="must return a dict"):
        stoker.Loader(ds, batch_size=4, map=lambda s: s["image"])
    with pytest.raises(stoker.StokerInvalidError, match="record 0.*ZeroDivisionError"):
        stoker.Loader(ds, batch_size=4, map=lambda s: {"y": 1 // 0})


def test_map_then_batch_transforms(ds):
    fn = lambda s: {"image": s["image"] * 2, "label": s["label"]}  # noqa: E731
    for b in batches(ds, map=fn, batch_transforms=T.MixUp(1.0, K), num_workers=2):
        np.testing.assert_allclose(b["label"].sum(1), 1.0, rtol=1e-6)
        own, other = 2 * image(b["index"][1]), 2 * image(b["index"][0])
        lam = (b["image"][1][0, 0, 0] - other[0, 0, 0]) / (own[0, 0, 0] - other[0, 0, 0])
        check_labels(b, 1, lam)
        want = lam * own + (1 - lam) * other
        np.testing.assert_allclose(b["image"][1], want, rtol=1e-5)


def test_map_close_while_fn_runs(ds):
    started = threading.Event()

    def slow(s):
        started.set()
        time.sleep(0.05)
        return {"y": s["label"]}

    L = stoker.Loader(ds, batch_size=16, map=slow, num_workers=2, output="numpy")
    started.wait(10)
    L.close()  # joins the workers while they are inside fn (they need the GIL: not a deadlock)
    assert L.closed


# ---- with decoded images (an ImageFolder tree) ----

@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    Image = pytest.importorskip("PIL.Image")
    if not stoker.has_transforms():
        pytest.skip("this build has no image pipeline")
    root = tmp_path_factory.mktemp("imgs")
    for i in range(16):
        cls = root / f"class_{i % 4}"
        cls.mkdir(exist_ok=True)
        rng = np.random.default_rng(i)
        arr = np.clip(rng.normal(60 + 10 * i, 40, (40 + i, 48, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(arr).save(cls / f"img_{i:03d}.jpg", quality=90)
    return str(root)


def test_cutmix_on_decoded_nhwc_uint8(folder):
    ops = T.Compose([T.CenterCrop(32), T.PILToTensor()], layout="NHWC")
    plain = batches(folder, batch_size=8, transforms=ops, num_workers=2)
    mixed = batches(folder, batch_size=8, transforms=ops, num_workers=2,
                    batch_transforms=T.CutMix(1.0, 4))
    for p, m in zip(plain, mixed):
        assert m["image"].shape == p["image"].shape == (8, 32, 32, 3)
        assert m["image"].dtype == np.uint8
        for i in range(8):
            j = i - 1 if i else 7
            other = (m["image"][i] != p["image"][i]).any(-1)  # [H, W]: pixels from row j
            assert np.array_equal(m["image"][i][other], p["image"][j][other])
            area = np.count_nonzero((m["image"][i] == p["image"][j]).all(-1) &
                                    ~(p["image"][i] == p["image"][j]).all(-1))
            assert area == other.sum()
            lam = 1 - area / (32 * 32)
            if other.any():
                ys, xs = np.nonzero(other)
                assert other.sum() == (ys.ptp() + 1) * (xs.ptp() + 1)  # a box
            want = np.zeros(4, np.float32)
            want[int(p["label"][i])] += lam
            want[int(p["label"][j])] += 1 - lam
            np.testing.assert_allclose(m["label"][i], want, atol=1e-5)


def test_map_after_decode_and_transforms(folder):
    ops = [T.CenterCrop(32), T.ToTensor()]
    plain = batches(folder, batch_size=8, transforms=ops, num_workers=2)

    def fn(s):
        assert s["image"].shape == (3, 32, 32) and s["image"].dtype == np.float32
        assert isinstance(s["label"], int)
        return {"gray": s["image"].mean(axis=0), "label": s["label"]}

    mapped = batches(folder, batch_size=8, transforms=ops, num_workers=2, map=fn)
    for p, m in zip(plain, mapped):
        np.testing.assert_array_equal(p["index"], m["index"])
        np.testing.assert_array_equal(p["label"], m["label"])
        np.testing.assert_allclose(m["gray"], p["image"].mean(axis=1), rtol=1e-6)

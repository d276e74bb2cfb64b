"""Loader(device="cuda") on a real GPU: what the fake driver of test_device.py cannot show.
torch's own __cuda_array_interface__ import of the device ring (zero-copy, on the right
device), the consumer's stream waiting for each copy while the loader's copies race ahead, the
release protecting a buffer until the consumer's queued kernels have read it, and results equal
to the CPU path's on the hardware. Skipped where torch has no CUDA device; bench/gpu/run.sh runs
it on the GPU machine. The NVRTC finder (stoker/_nvrtc.py) is checked everywhere."""
import os

import numpy as np
import pytest

import stoker
from stoker import _nvrtc

torch = pytest.importorskip("torch")

HAVE_CUDA = torch.cuda.is_available()
cuda = pytest.mark.skipif(not HAVE_CUDA, reason="no CUDA device for torch (run on a GPU "
                          "machine: bash bench/gpu/run.sh)")
N = 64


def test_nvrtc_finder_prefers_torchs_cuda_major(tmp_path, monkeypatch):
    monkeypatch.delenv("STOKER_NVRTC", raising=False)
    libs = {"nvidia/cuda_nvrtc/lib": ["libnvrtc.so.12", "libnvrtc-builtins.so.12.4"],
            "nvidia/cu13/lib": ["libnvrtc.so.13", "libnvrtc.alt.so.13"],
            "torch/lib": ["libnvrtc-672ee683.so.11.2"]}
    for d, names in libs.items():
        os.makedirs(tmp_path / d)
        for n in names:
            (tmp_path / d / n).write_bytes(b"")
    paths = [str(tmp_path)]
    found = _nvrtc.candidates(paths)
    assert [os.path.basename(p) for p in found] == [
        "libnvrtc.so.12", "libnvrtc.so.13", "libnvrtc-672ee683.so.11.2"]  # no builtins, no alt
    assert _nvrtc.find("12.4", paths).endswith("cuda_nvrtc/lib/libnvrtc.so.12")
    assert _nvrtc.find("13.0", paths).endswith("cu13/lib/libnvrtc.so.13")
    assert _nvrtc.find("11.8", paths).endswith("libnvrtc-672ee683.so.11.2")
    assert _nvrtc.find("10.2", paths).endswith("libnvrtc.so.12")  # no match: the first
    assert _nvrtc.find(None, [str(tmp_path / "nothing")]) is None
    monkeypatch.setenv("STOKER_NVRTC", "/opt/mine/libnvrtc.so")
    assert _nvrtc.find("13.0", paths) == "/opt/mine/libnvrtc.so"  # the user's choice wins


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    from PIL import Image
    root = tmp_path_factory.mktemp("cuda")
    rng = np.random.default_rng(1)
    for i in range(N):
        d = root / "imgs" / f"c{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        img = rng.integers(0, 255, (150 + 7 * (i % 9), 180 + 5 * (i % 7), 3), dtype=np.uint8)
        Image.fromarray(img).save(d / f"{i}.jpg", quality=90)
    path = str(root / "imgs.stk")
    stoker.pack_image_folder(str(root / "imgs"), path)
    return path


def _pair(path, transforms, **kw):
    args = dict(batch_size=4, shuffle=True, seed=5, transforms=transforms, num_workers=2)
    args.update(kw)
    return stoker.Loader(path, **args), stoker.Loader(path, device="cuda", **args)


@cuda
def test_probe_names_the_device():
    ok, text = stoker.cuda_probe()
    assert ok, text
    assert torch.cuda.get_device_name(0) in text, text


@cuda
@pytest.mark.parametrize("recipe", ["imagenet-train", "imagenet-val", "bf16-nhwc"])
def test_device_batches_equal_the_cpu_path(jpegs, recipe):
    T = stoker.transforms
    tr = recipe if recipe != "bf16-nhwc" else T.Compose(
        [T.RandomResizedCrop(96), T.RandomHorizontalFlip(),
         T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])],
        dtype="bfloat16", layout="NHWC")
    cpu, dev = _pair(jpegs, tr)
    st = dev.stats()
    assert st["device"] == 0 and st["pinned"] and st["device_reason"] == "", st
    assert st["finish"] == "device", st  # NVRTC found and the PTX loaded (else "cpu" and why)
    n = 0
    for epoch in range(2):
        for a, b in zip(cpu, dev):
            assert sorted(a) == sorted(b)
            for k in a:
                assert b[k].device.type == "cuda" or k.endswith("_lengths"), k
                assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
                if k + "_lengths" in a:  # bytes: each row's bytes (the padding is not data)
                    assert a.bytes(k) == b.bytes(k), (recipe, k)
                else:
                    assert torch.equal(a[k], b[k].cpu()), (recipe, k)
            n += len(b["index"])
    assert n == 2 * N
    st = dev.stats()
    assert st["copies"] >= 2 * N // 4 and st["h2d_bytes"] > 0 and st["finish_s"] >= 0, st


@cuda
def test_batches_are_zero_copy_views_of_a_bounded_ring(jpegs):
    dev = stoker.Loader(jpegs, batch_size=4, transforms="imagenet-val", num_workers=2,
                        prefetch=3, device="cuda")
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    ptrs = set()
    for epoch in range(2):
        for b in dev:
            ptrs.add(b["image"].data_ptr())
            # torch's allocator gave nothing: the tensor is the loader's device buffer
            assert torch.cuda.memory_allocated() == before
    slots = dev.info()["n_slots"]
    assert 1 <= len(ptrs) <= slots, (len(ptrs), slots)


def _read_late(b):
    """Spin ~2-3 ms of GPU time on the current stream, then queue the float64 sum of the image
    and a copy of the index there. Nothing waits on the host, so the loader's copies run ahead
    of these reads."""
    torch.cuda._sleep(5_000_000)
    return b["image"].double().sum(), b["index"].clone()


def _assert_intact(got, cpu):
    """Every late read saw the bytes of its batch: the sums equal the CPU loader's."""
    want = {tuple(b["index"].tolist()): float(b["image"].double().sum()) for b in cpu}
    torch.cuda.synchronize()
    assert len(got) == N // 4
    for s, i in got:
        assert float(s) == want[tuple(i.tolist())], i


@cuda
def test_a_slow_consumer_on_its_own_stream_reads_every_batch_intact(jpegs):
    """The consumer works on a side stream and spins before reading each batch, so the loader's
    copies into a 2-slot ring run far ahead: a buffer released (or read) before its time shows
    up as a wrong sum."""
    cpu, dev = _pair(jpegs, "imagenet-val", prefetch=2)
    got = []
    with torch.cuda.stream(torch.cuda.Stream()):
        for b in dev:
            got.append(_read_late(b))
    _assert_intact(got, cpu)


@cuda
def test_a_second_stream_declared_with_record_stream_reads_every_batch_intact(jpegs):
    """The batch is made ready for the current stream, then read late on a second stream that
    waits for the first: batch.record_stream(second) keeps its buffer until then (torch's own
    tensor.record_stream would not: it skips memory torch did not allocate)."""
    cpu, dev = _pair(jpegs, "imagenet-val", prefetch=2)
    main, second = torch.cuda.current_stream(), torch.cuda.Stream()
    got = []
    for b in dev:
        second.wait_stream(main)
        b.record_stream(second)
        with torch.cuda.stream(second):
            got.append(_read_late(b))
    _assert_intact(got, cpu)


@cuda
def test_held_device_batches_stay_intact(jpegs):
    cpu, dev = _pair(jpegs, "imagenet-val", prefetch=2)
    want = [b["image"].clone() for b in cpu]
    with pytest.warns(RuntimeWarning, match="holds the batch"):
        held = [b for b in dev]  # more than the ring: held batches are detached (cloned)
    torch.cuda.synchronize()
    assert len(held) == len(want)
    for a, b in zip(want, held):
        assert torch.equal(a, b["image"].cpu())


@cuda
def test_profile_advises_pin_memory_for_a_pageable_dataloader():
    """stoker.profile's pin_memory advice measures pinned against pageable copies on the device
    (untestable without CUDA): said for pin_memory=False, not for pin_memory=True."""
    from stoker import _advice

    class Squares(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            return torch.full((3, 224, 224), float(i))

    torch.cuda.init()
    for pin in (False, True):
        dl = torch.utils.data.DataLoader(Squares(), batch_size=32, pin_memory=pin)
        prof = stoker.profile(dl, step=lambda b: b.to("cuda", non_blocking=True), advise=False)
        line = _advice._pin_advice(prof, "torch")
        if pin:
            assert line is None, line
        else:
            assert line and "pin_memory=True" in line and "pageable" in line, line

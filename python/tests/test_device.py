"""Loader(device="cuda") without a GPU: the C loader runs against the fake CUDA driver
(build/tests/libfakecuda.so, whose "device" memory is host memory, copies are slow and
asynchronous, and whose finishing kernel runs the shared per-pixel code), and torch's CUDA
entry points are stood in for, so everything but torch's own __cuda_array_interface__ import
runs: the uint8 + device-finishing split of the transform, the wait on the consumer's stream,
zero-copy views of the device ring, dtypes, the release of slots when tensors die, and
Batch.record_stream (the release recorded on the streams it names, a no-op on host and detached
batches).

Each case runs in a fresh interpreter: the driver is loaded once per process."""
import os
import textwrap
import types

import numpy as np
import pytest
import torch

import stoker

from conftest import PYTHONPATH, run_python

FAKE = os.path.join(os.path.dirname(PYTHONPATH), "tests", "libfakecuda.so")

pytestmark = [
    pytest.mark.skipif(not os.path.exists(FAKE), reason=f"{FAKE} not built (make unit)"),
    pytest.mark.skipif(not stoker.has_transforms(), reason="this build has no image pipeline"),
]

PRELUDE = textwrap.dedent("""
    import contextlib, types, warnings
    import numpy as np, torch, stoker
    from PIL import Image

    # torch's CUDA entry points, stood in for: the fake driver's device memory is host memory,
    # so a __cuda_array_interface__ is read as a host array (kept alive like torch keeps it).
    waited = []
    class Stream:
        def __init__(self):
            self.cuda_stream = 0
    class Holder:
        def __init__(self, obj):
            cai = obj.__cuda_array_interface__
            self.obj = obj
            self.__array_interface__ = {"shape": cai["shape"], "typestr": cai["typestr"],
                                        "data": cai["data"], "version": 3}
    real_as_tensor = torch.as_tensor
    def as_tensor(obj, device=None, **kw):
        if hasattr(obj, "__cuda_array_interface__"):
            # The loader made the consumer's stream wait for the copy; this stand-in reads on
            # the host, so it waits for the copy first.
            obj._batch.device_sync()
            return torch.from_numpy(np.asarray(Holder(obj)))
        return real_as_tensor(obj, **kw)
    torch.as_tensor = as_tensor
    torch.cuda.is_available = lambda: True
    torch.cuda.current_device = lambda: 0
    torch.cuda.current_stream = lambda dev=None: Stream()
    torch.cuda.device = lambda dev: contextlib.nullcontext()

    import os
    path = os.environ["STK_TEST_IMGS"]  # the module's packed JPEGs (the `imgs` fixture)
""")


@pytest.fixture(scope="module", autouse=True)
def imgs(tmp_path_factory):
    """24 JPEGs of growing heights packed once for every case (each case's fresh interpreter
    once wrote and packed the same ones)."""
    import numpy as np
    from PIL import Image
    tmp = tmp_path_factory.mktemp("device")
    os.makedirs(tmp / "imgs" / "c0")
    rng = np.random.default_rng(0)
    for i in range(24):
        Image.fromarray(rng.integers(0, 255, (120 + 8 * i, 160, 3), dtype=np.uint8)).save(
            tmp / "imgs" / "c0" / f"{i}.jpg", quality=90)
    global IMGS
    IMGS = str(tmp / "imgs.stk")
    stoker.pack_image_folder(str(tmp / "imgs"), IMGS)


IMGS = None  # set by the `imgs` fixture


def _run(body, **env):
    r = run_python(PRELUDE + textwrap.dedent(body),
                   env=dict({"STOKER_LIBCUDA": FAKE, "STK_TEST_IMGS": IMGS}, **env))
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_device_batches_equal_the_cpu_path():
    out = _run("""
        for tr in ("imagenet-train", "imagenet-val",
                   stoker.transforms.Compose([stoker.transforms.CenterCrop(64),
                                              stoker.transforms.Normalize([0.5], [0.25])],
                                             dtype="bfloat16", layout="NHWC")):
            cpu = stoker.Loader(path, batch_size=5, shuffle=True, seed=3, transforms=tr,
                                num_workers=2)
            dev = stoker.Loader(path, batch_size=5, shuffle=True, seed=3, transforms=tr,
                                num_workers=2, device="cuda")
            st = dev.stats()
            assert st["device"] == 0 and st["pinned"] and st["finish"] == "device", st
            assert dev.info()["device"] == "cuda:0"
            n = 0
            for epoch in range(2):
                for a, b in zip(cpu, dev):
                    assert list(a) == list(b), (list(a), list(b))
                    for k in a:
                        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
                        if k + "_lengths" in a:   # bytes: compare each row's bytes only
                            assert a.bytes(k) == b.bytes(k), k
                        else:
                            assert torch.equal(a[k], b[k]), (k, (a[k].float() - b[k].float()).abs().max())
                    n += len(b["index"])
            assert n == 48, n
            st = dev.stats()
            assert st["copies"] >= 10 and st["h2d_bytes"] > 0 and st["device_reason"] == ""
            print(str(tr)[:14], "ok", st["finish"], st["copies"])
    """)
    assert out.count(" ok device") == 3, out


def test_held_device_batches_are_detached_and_uint8_is_shipped():
    out = _run("""
        dev = stoker.Loader(path, batch_size=4, transforms="imagenet-train", num_workers=1,
                            prefetch=1, device="cuda")
        # uint8 [H, W, 3] crossed the bus: 224*224*3 bytes per image (not float32's 4x).
        held = []
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for b in dev:
                held.append(b)          # hold every batch: the 2-slot ring must be relieved
        assert any("holds the batch" in str(x.message) for x in w), [str(x.message) for x in w]
        assert sorted(int(i) for b in held for i in b["index"]) == list(range(24))
        assert all(b["image"].dtype == torch.float32 for b in held)
        st = dev.stats()
        per_image = st["h2d_bytes"] / st["copies"] / 4
        assert 224 * 224 * 3 <= per_image < 224 * 224 * 3 + 1024, per_image
        # raw records stay as they are (no finishing), still zero-copy on the device ring
        raw = stoker.Loader(path, batch_size=6, device="cuda")
        b = next(iter(raw))
        assert raw.stats()["finish"] == "none" and b["image"].dtype == torch.uint8
        assert "image_lengths" in b
        print("held ok")
    """)
    assert "held ok" in out


def test_no_driver_falls_back_with_a_warning():
    out = _run("""
        # torch "has CUDA" but stoker's driver is missing: a warning naming why, then host
        # batches copied with .to(device) (which this stand-in torch cannot do: checked here
        # through the warning and stats only).
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            dev = stoker.Loader(path, batch_size=4, device="cuda")
        msgs = [str(x.message) for x in w]
        assert any("cannot copy on its own stream" in m and "nonexistent" in m for m in msgs), msgs
        st = dev.stats()
        assert st["device"] == -1 and not st["pinned"] and "nonexistent" in st["device_reason"]
        print("fallback ok")
    """, STOKER_LIBCUDA="/nonexistent/libcuda.so.1")
    assert "fallback ok" in out


def test_record_stream_reaches_the_driver():
    out = _run("""
        import ctypes
        dev = stoker.Loader(path, batch_size=4, transforms="imagenet-val", num_workers=2,
                            prefetch=2, device="cuda")   # loads the fake driver
        fake = ctypes.CDLL(os.environ["STOKER_LIBCUDA"])  # the same library, already loaded
        fake.fakecuda_records.restype = ctypes.c_uint64
        fake.fakecuda_records.argtypes = [ctypes.c_void_p]
        # More streams of the fake device, made as torch would: the primary context current.
        ctx = ctypes.c_void_p()
        assert fake.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
        assert fake.cuCtxPushCurrent_v2(ctx) == 0
        handles = []
        for _ in range(4):
            h = ctypes.c_void_p()
            assert fake.cuStreamCreate(ctypes.byref(h), 1) == 0
            handles.append(h.value)
        records = lambda: [fake.fakecuda_records(h) for h in handles]
        side = Stream()
        side.cuda_stream = handles[0]

        it = iter(dev)
        b = next(it)
        assert b["image"].device.type == "cpu"    # (the stand-in reads device memory as host)
        b.record_stream(side)                     # a torch.cuda.Stream ...
        b.record_stream(handles[0])               # ... or a handle; the same stream counts once
        b.record_stream(handles[1])
        b.record_stream(handles[2])               # 4 streams with the current one
        try:
            b.record_stream(handles[3])
            raise AssertionError("a fifth stream was accepted")
        except stoker.StokerLimitError as e:
            assert "at most 4 streams" in str(e), e
        try:
            b.record_stream("stream")
            raise AssertionError("a str was accepted")
        except TypeError:
            pass
        assert records() == [0, 0, 0, 0]          # recorded when the batch is released
        del b
        assert records() == [1, 1, 1, 0], records()

        # Detached: the tensors are torch's own copies; the ring's batch is gone: a no-op.
        b = next(it)
        b.detach()
        b.record_stream(side)
        del b
        assert records() == [1, 1, 1, 0], records()

        # Host batches: a no-op.
        host = stoker.Loader(path, batch_size=4)
        hb = next(iter(host))
        hb.record_stream(side)
        hb.record_stream(handles[3])
        del hb
        assert records() == [1, 1, 1, 0], records()

        # The C call on the raw batch says why it cannot apply there.
        raw = next(host._core)
        try:
            raw.device_use(handles[0])
            raise AssertionError("device_use on a host batch")
        except stoker.StokerNotSupportedError as e:
            assert "not on a device" in str(e), e
        del raw
        for h in handles:
            fake.cuStreamDestroy_v2(ctypes.c_void_p(h))
        print("record_stream ok")
    """)
    assert "record_stream ok" in out


def test_bytes_of_a_device_batch_come_to_the_host():
    """Batch.bytes() on a device batch (its bytes fields live on the GPU): copied to the host
    first, as torch's .numpy() refuses device tensors (seen on the H100: TypeError "can't convert
    cuda:0 device type tensor to numpy"). A stand-in behaves as a CUDA tensor does here."""
    class OnDevice:
        device = types.SimpleNamespace(type="cuda")

        def __init__(self, a):
            self.a = a

        def numpy(self):
            raise TypeError("can't convert cuda:0 device type tensor to numpy")

        def cpu(self):
            return torch.from_numpy(self.a)

    b = stoker.Batch()
    b["path"] = OnDevice(np.array([[97, 98, 0], [99, 0, 0]], dtype=np.uint8))
    b["path_lengths"] = torch.tensor([2, 1])
    assert b.bytes("path") == [b"ab", b"c"]


@pytest.mark.skipif(not (stoker._core.has_audio()["sndfile"] and stoker._core.has_audio()["fftw"]),
                    reason="this build has no libsndfile or libfftw3f")
def test_audio_batches_on_the_device():
    """An audio recipe with lengths (issue 27) through the device ring: the same batches as the
    CPU path, nothing finished on the device (float32 spectrograms cross as they are)."""
    out = _run("""
        import os, tempfile, wave
        from stoker import audio as A
        root = f"{tempfile.mkdtemp()}/wavs"
        for c in range(2):
            os.makedirs(f"{root}/c{c}")
            for i in range(6):
                t = np.arange(22050 + 1500 * i) / 22050
                x = (12000 * np.sin(2 * np.pi * (300 + 50 * i + 200 * c) * t)).astype("<i2")
                with wave.open(f"{root}/c{c}/{i}.wav", "wb") as w:
                    w.setnchannels(1)
                    w.setsampwidth(2)
                    w.setframerate(22050)
                    w.writeframes(x.tobytes())
        ops = A.Compose([A.Resample(22050, 16000), A.PadTo(1.5),
                         A.MelSpectrogram(16000, n_mels=32), A.TimeMasking(10)], lengths=True)
        args = dict(batch_size=5, shuffle=True, seed=3, transforms=ops, num_workers=2)
        cpu = stoker.Loader(root, **args)
        dev = stoker.Loader(root, device="cuda", **args)
        st = dev.stats()
        assert st["device"] == 0 and st["pinned"] and st["finish"] == "none", st
        n = 0
        for epoch in range(2):
            for a, b in zip(cpu, dev):
                assert sorted(a) == sorted(b) and "audio_lengths" in b, (list(a), list(b))
                assert b["audio"].shape[1:] == (1, 32, 121), b["audio"].shape
                for k in a:
                    assert a[k].dtype == b[k].dtype, k
                    if a[k].dtype == torch.uint8:  # bytes ("path"): each row's bytes
                        assert a.bytes(k) == b.bytes(k), k
                    else:                          # audio, audio_lengths, label, index
                        assert torch.equal(a[k], b[k]), k
                n += len(b["index"])
        assert n == 24, n
        assert dev.stats()["copies"] >= 6
        print("audio ok", dev.stats()["finish"])
    """)
    assert "audio ok none" in out, out

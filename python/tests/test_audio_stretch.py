"""TimeStretch (issue 27): torchaudio 0.13's phase vocoder on a complex spectrogram, against
torchaudio.transforms.TimeStretch on the same spectrogram, on speech (espeak-ng) and a chord
(sox); a rate drawn per sample (stoker.audio.TimeStretch(rate_range=...)); refusals.

Measured (pytest -s prints it): the magnitudes equal torchaudio's to float rounding (asserted
1e-5 of the largest); the complex values within 2e-3 of the largest magnitude (asserted 1e-2):
the phase accumulates pi * hop_length a frame in float32, and an angle one ulp off (torch's
SLEEF atan2 against glibc's) moves a far frame's phase by a float32 ulp of a value in the
thousands of radians.
"""
import os
import sys
import tempfile

import numpy as np
import pytest

import stoker
from stoker import audio as A

sys.path.insert(0, os.path.dirname(__file__))
import audio_data  # noqa: E402
from test_audio import corpus, load_one, ta_load  # noqa: E402,F401

HAS = stoker._core.has_audio()
try:
    import torch
    import torchaudio.transforms as TA
    torch.set_num_threads(1)
except ImportError:
    TA = None

pytestmark = [
    pytest.mark.skipif(not (HAS["sndfile"] and HAS["fftw"]),
                       reason="stoker was built without libsndfile or libfftw3f"),
    pytest.mark.skipif(bool(audio_data.tools_missing()),
                       reason=f"{audio_data.tools_missing()} not installed"),
]
needs_torchaudio = pytest.mark.skipif(TA is None, reason="torchaudio is not installed")


def reference(path, spec_kw, stretch_kw):
    ref, sr = ta_load(path)
    y = TA.Resample(sr, 16000)(ref)
    off = (y.shape[1] - 16000) // 2
    z = TA.Spectrogram(power=None, **spec_kw)(y[:, off:off + 16000])
    return TA.TimeStretch(**stretch_kw)(z), sr


CASES = [  # (file, Spectrogram kwargs, TimeStretch kwargs)
    ("speech_us_slow.wav_16k", {}, {"fixed_rate": 1.25}),
    ("speech_gb_fast", {"n_fft": 512, "hop_length": 128}, {"n_freq": 257, "hop_length": 128,
                                                            "fixed_rate": 0.8}),
    ("synth_chord.wav_s16", {}, {"fixed_rate": 1.7}),
    ("synth_chord.wav_s16", {"n_fft": 256}, {"n_freq": 129, "fixed_rate": 0.55}),
    ("synth_sweep", {}, {"fixed_rate": 1.0}),
]


@needs_torchaudio
@pytest.mark.parametrize("key,spec_kw,stretch_kw", CASES)
def test_time_stretch_equals_torchaudio(corpus, key, spec_kw, stretch_kw):
    path = corpus[key]
    want, sr = reference(path, spec_kw, stretch_kw)
    ops = [TA.Resample(sr, 16000), A.CenterCrop(1.0), TA.Spectrogram(power=None, **spec_kw),
           TA.TimeStretch(**stretch_kw)]
    x = load_one(path, ops)["audio"][0]
    assert x.shape == tuple(want.shape) + (2,)
    w = torch.view_as_real(want).numpy()
    top = float(np.abs(want).max())
    mag_err = float(np.abs(np.hypot(x[..., 0], x[..., 1]) - want.abs().numpy()).max()) / top
    err = float(np.abs(x - w).max()) / top
    print(f"TimeStretch {key} {stretch_kw}: magnitude {mag_err:.3g}, complex {err:.3g}")
    assert mag_err < 1e-5
    assert err < 1e-2


@needs_torchaudio
def test_time_stretch_with_masks_and_a_drawn_rate(corpus):
    """rate_range: each sample's rate uniform in it, ceil(frames / rate) frames then zeros (the
    batch has the slowest rate's), lengths=True says each row's; the same for any thread count,
    new each epoch; masks after the stretch see the sample's own frames."""
    tree = audio_data.tree(tempfile.mkdtemp(), {"a": [corpus["synth_chord.wav_s16"]] * 48})
    frames = 81  # Spectrogram() of 1 s at 16 kHz
    ops = A.Compose([A.Resample(44100, 16000), A.RandomCrop(1.0), A.Spectrogram(power=None),
                     A.TimeStretch(fixed_rate=None, rate_range=(0.8, 1.6)),
                     A.TimeMasking(10)], lengths=True)
    out_frames = int(np.ceil(frames / 0.8))
    rows = []
    for threads in (1, 2):
        got = []
        with stoker.Loader(tree, 16, transforms=ops, output="numpy", num_workers=threads,
                           shuffle=True, seed=3) as loader:
            for b in loader:
                assert b["audio"].shape == (16, 2, 201, out_frames, 2)
                for x, n in zip(b["audio"], b["audio_lengths"]):
                    assert int(np.ceil(frames / 1.6)) <= n <= out_frames
                    assert not x[:, :, n:].any()
                    assert x[:, :, n - 1].any() or x[:, :, n - 2].any()
                    got.append(int(n))
        rows.append(got)
    assert rows[0] == rows[1]
    assert len(set(rows[0])) > 10  # the rate is drawn per sample


def test_time_stretch_refusals():
    with pytest.raises(stoker.StokerInvalidError, match="fixed_rate, or rate_range"):
        A.TimeStretch()
    with pytest.raises(stoker.StokerInvalidError, match=r"needs a complex spectrogram"):
        A.compile([A.CenterCrop(1.0), A.Spectrogram(), A.TimeStretch(fixed_rate=1.2)])
    with pytest.raises(stoker.StokerInvalidError, match=r"n_freq=201, but Spectrogram"):
        A.compile([A.CenterCrop(1.0), A.Spectrogram(n_fft=512, power=None),
                   A.TimeStretch(fixed_rate=1.2)])
    with pytest.raises(stoker.StokerInvalidError, match=r"right after Spectrogram"):
        A.compile([A.CenterCrop(1.0), A.Spectrogram(power=None), A.TimeMasking(4),
                   A.TimeStretch(fixed_rate=1.2)])
    with pytest.raises(stoker.StokerInvalidError, match=r"rate_range\[1\]"):
        A.compile([A.CenterCrop(1.0), A.Spectrogram(power=None),
                   A.TimeStretch(rate_range=(1.5, 1.2))])
    if TA is not None:
        with pytest.raises(stoker.StokerInvalidError, match="without fixed_rate takes its rate"):
            A.compile([A.CenterCrop(1.0), TA.Spectrogram(power=None), TA.TimeStretch()])
    t = A.compile([A.CenterCrop(1.0), A.Spectrogram(power=None), A.TimeStretch(fixed_rate=2.0)],
                  sample_rate=16000)
    assert t.output["shape"][-3:] == [201, 41, 2] or tuple(t.output["shape"][-3:]) == (201, 41, 2)

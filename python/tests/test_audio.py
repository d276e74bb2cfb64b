"""Audio (issue 27): decoding, the ops against torchaudio 0.13 (Debian's python3-torchaudio) on the
same files and parameters, the masks' and crops' distributions, strict errors and the skip policy.

The files are made here (audio_data.py: espeak-ng speech, sox tones and noise, encoded by sox and
ffmpeg to every codec), once per session. Measured agreement (the bounds asserted below; the
figures are printed with pytest -s):
  * decode: WAV (8/16/24/32-bit, float) and FLAC equal torchaudio.load bit for bit; MP3 within
    1e-5, Ogg Vorbis within 2e-5 (sox gives 16-bit samples), Opus within 3e-3 (ffmpeg's decoder);
  * Resample: within 1e-5 of the signal's peak (the same kernel; sums in another order);
  * Spectrogram, MelSpectrogram, MFCC: within 1e-4 of the output's largest magnitude.
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

HAS = stoker._core.has_audio()
needs_sndfile = pytest.mark.skipif(not HAS["sndfile"], reason="stoker was built without "
                                   "libsndfile")
needs_mpg123 = pytest.mark.skipif(not HAS["mpg123"], reason="stoker was built without libmpg123")
needs_fftw = pytest.mark.skipif(not HAS["fftw"], reason="stoker was built without libfftw3f")
needs_tools = pytest.mark.skipif(bool(audio_data.tools_missing()),
                                 reason=f"{audio_data.tools_missing()} not installed")

try:
    import torch
    import torchaudio
    import torchaudio.transforms as TA
    torch.set_num_threads(1)
except ImportError:  # the reference tests skip
    torchaudio = None
needs_torchaudio = pytest.mark.skipif(torchaudio is None, reason="torchaudio is not installed")

pytestmark = [needs_tools, needs_sndfile]


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    return audio_data.make_corpus(str(tmp_path_factory.mktemp("audio_corpus")))


def one_file_tree(path, cls="c"):
    """A class-per-folder tree holding only `path`."""
    return audio_data.tree(tempfile.mkdtemp(prefix="stk_audio_"), {cls: [path]})


def load_one(path, transforms, **kw):
    """The first batch of a loader over a tree of the one file `path`."""
    with stoker.Loader(one_file_tree(path), 1, transforms=transforms, output="numpy",
                       **kw) as loader:
        return next(iter(loader))


def spectral_against_torchaudio(path, name, ops):
    """Resample 44.1 -> 16 kHz, the centred second, then `ops`, by stoker and by torchaudio: the
    same shape (a complex output as float32 [..., 2], torch.view_as_real's layout) and within
    1e-4 of the output's largest magnitude."""
    ref, sr = ta_load(path)
    y = TA.Resample(sr, 16000)(ref)
    off = (y.shape[1] - 16000) // 2
    y = y[:, off:off + 16000]
    for op in ops:
        y = op(y)
    x = load_one(path, [TA.Resample(sr, 16000), A.CenterCrop(1.0)] + ops)["audio"][0]
    if y.is_complex():
        assert x.shape == tuple(y.shape) + (2,) and x.dtype == np.float32
        assert torch.view_as_complex(torch.from_numpy(x)).shape == y.shape
        y = torch.view_as_real(y)
    assert x.shape == tuple(y.shape)
    err = rel_err(x, y.numpy())
    print(f"{name}: shape {x.shape}, relative error {err:.3g}")
    assert err < 1e-4


def ta_load(path):
    x, sr = torchaudio.load(path)
    return x, sr


def rel_err(a, b):
    """max |a - b| over the largest magnitude of b."""
    return float(np.abs(np.asarray(a) - np.asarray(b)).max() / np.abs(np.asarray(b)).max())


# ---- decoding ----

DECODE_BOUNDS = {"wav": 0.0, "flac": 0.0, "mp3": 1e-5, "ogg": 2e-5, "opus": 3e-3}


@needs_torchaudio
@pytest.mark.parametrize("key", [
    "synth_chord.wav_u8", "synth_chord.wav_s16", "synth_chord.wav_s24", "synth_chord.wav_s32",
    "synth_chord.wav_f32", "speech_us_slow.wav_48k_st", "synth_chord.flac16",
    "synth_chord.flac24_48k", "speech_us_slow.flac_16k", "synth_chord.ogg", "speech_us_slow.ogg",
    "synth_chord.opus", "speech_us_slow.opus", "synth_chord.mp3", "speech_us_slow.mp3",
    "synth_pluck.mp3_22k"])
def test_decode_equals_torchaudio(corpus, key):
    """Every codec and sample format decodes to torchaudio.load's samples: the same length,
    channels and rate; WAV and FLAC bit for bit, the lossy codecs within their decoders'
    differences. Read through PadTo (longer than the file) with lengths: the rest is zeros."""
    path = corpus[key]
    ext = os.path.splitext(path)[1][1:]
    if ext == "mp3" and not HAS["mpg123"]:
        pytest.skip("stoker was built without libmpg123")
    ref, sr = ta_load(path)
    ref = ref.numpy()
    b = load_one(path, A.Compose([A.PadTo(ref.shape[1] / sr + 0.25)], lengths=True))
    x, n = b["audio"][0], int(b["audio_lengths"][0])
    assert n == ref.shape[1] and x.shape[0] == ref.shape[0]
    assert x.shape[1] == round((ref.shape[1] / sr + 0.25) * sr)
    diff = float(np.abs(x[:, :n] - ref).max())
    print(f"{key}: {ref.shape} at {sr} Hz, max |stoker - torchaudio| {diff:.3g}")
    assert diff <= DECODE_BOUNDS[ext]
    assert not x[:, n:].any()


def test_decode_from_any_name(corpus):
    """The format comes from the bytes, not the name: a FLAC called .wav decodes as FLAC."""
    d = tempfile.mkdtemp()
    os.makedirs(os.path.join(d, "c"))
    os.symlink(corpus["synth_chord.flac16"], os.path.join(d, "c", "x.wav"))
    with stoker.Loader(d, 1, transforms=[A.CenterCrop(1.0)], output="numpy") as loader:
        x = next(iter(loader))["audio"]
    wav = load_one(corpus["synth_chord.wav_s16"], [A.CenterCrop(1.0)])["audio"]
    assert np.array_equal(x, wav)


# ---- ops against torchaudio ----

@needs_torchaudio
@pytest.mark.parametrize("key,new,method", [
    ("synth_chord.wav_s16", 16000, "sinc_interpolation"),
    ("speech_us_slow", 16000, "sinc_interpolation"),
    ("speech_us_slow", 44100, "sinc_interpolation"),
    ("synth_chord.flac24_48k", 22050, "kaiser_window"),
    ("synth_sweep.flac", 8000, "sinc_interpolation")])
def test_resample_equals_torchaudio(corpus, key, new, method):
    """torchaudio.transforms.Resample in a Sequential, whole file: the same length and samples
    within 1e-5 of the peak (the kernel is torchaudio's, computed the same way)."""
    path = corpus[key]
    ref, sr = ta_load(path)
    want = TA.Resample(sr, new, resampling_method=method)(ref).numpy()
    b = load_one(path, A.Compose([TA.Resample(sr, new, resampling_method=method),
                                  A.PadTo(want.shape[1] / new + 0.1)], lengths=True))
    n = int(b["audio_lengths"][0])
    assert n == want.shape[1]
    err = rel_err(b["audio"][0][:, :n], want)
    print(f"{key} {sr} -> {new} ({method}): relative error {err:.3g}")
    assert err < 1e-5


@needs_torchaudio
@needs_fftw
@pytest.mark.parametrize("name", ["spec", "mel", "mel_slaney", "mfcc", "mfcc_logmel", "db"])
def test_spectrograms_equal_torchaudio(corpus, name):
    """Resample 44.1 -> 16 kHz, the centred second, then Spectrogram / MelSpectrogram / MFCC /
    AmplitudeToDB as torchaudio computes them on the same second: within 1e-4 of the output's
    largest magnitude."""
    path = corpus["synth_chord.wav_s16"]
    ops = {
        "spec": [TA.Spectrogram(n_fft=512, hop_length=128, power=1.0)],
        "mel": [TA.MelSpectrogram(16000, n_mels=64)],
        "mel_slaney": [TA.MelSpectrogram(16000, n_fft=1024, win_length=800, hop_length=160,
                                         n_mels=80, norm="slaney", mel_scale="slaney",
                                         f_min=20.0, f_max=7600.0, normalized=True)],
        "mfcc": [TA.MFCC(16000, n_mfcc=30, melkwargs={"n_mels": 64})],
        "mfcc_logmel": [TA.MFCC(16000, n_mfcc=13, log_mels=True,
                                melkwargs={"n_mels": 40, "center": False})],
        "db": [TA.MelSpectrogram(16000, n_mels=64), TA.AmplitudeToDB(top_db=80)],
    }[name]
    spectral_against_torchaudio(path, name, ops)


@needs_torchaudio
@needs_fftw
@pytest.mark.parametrize("name", ["complex", "complex_normalized",
                                  "hamming", "blackman", "hamming_symmetric", "mel_blackman",
                                  "ones"])
def test_complex_spectrogram_and_windows_equal_torchaudio(corpus, name):
    """Spectrogram(power=None): the complex STFT as float32 [..., 2] (real, imaginary), whose
    torch.view_as_complex is torchaudio's complex64 output; window_fn hamming, blackman (periodic
    or not), ones: torchaudio's windows. Within 1e-4 of the output's largest magnitude, on the
    centred second of a stereo file resampled to 16 kHz."""
    path = corpus["synth_chord.wav_s16"]
    ops = {
        "complex": [TA.Spectrogram(n_fft=512, hop_length=128, power=None)],
        "complex_normalized": [TA.Spectrogram(n_fft=400, win_length=300, power=None,
                                              normalized=True, center=False)],
        "hamming": [TA.Spectrogram(window_fn=torch.hamming_window, power=1.0)],
        "blackman": [TA.Spectrogram(n_fft=256, window_fn=torch.blackman_window)],
        "hamming_symmetric": [TA.Spectrogram(window_fn=torch.hamming_window,
                                             wkwargs={"periodic": False})],
        "mel_blackman": [TA.MelSpectrogram(16000, n_mels=40, window_fn=torch.blackman_window)],
        "ones": [TA.Spectrogram(n_fft=128, window_fn=torch.ones, power=None)],
    }[name]
    spectral_against_torchaudio(path, name, ops)


@needs_torchaudio
@needs_fftw
def test_masks_on_a_complex_spectrogram(corpus):
    """TimeMasking and FrequencyMasking after Spectrogram(power=None) zero both parts of the
    masked bins, with the draws (and so the masks) of the same ops on a power spectrogram."""
    path = corpus["synth_chord.wav_s16"]
    masks = [TA.FrequencyMasking(30), TA.TimeMasking(20, iid_masks=True)]
    head = [TA.Resample(44100, 16000), A.CenterCrop(1.0)]
    for seed in range(3):
        c = load_one(path, head + [TA.Spectrogram(power=None)] + masks, seed=seed)["audio"][0]
        p = load_one(path, head + [TA.Spectrogram()] + masks, seed=seed)["audio"][0]
        bare = load_one(path, head + [TA.Spectrogram(power=None)], seed=seed)["audio"][0]
        zero = p == 0
        assert zero.any() and not zero.all()
        assert np.array_equal((c == 0).all(-1), zero)
        assert np.array_equal(c[~zero], bare[~zero])


@needs_torchaudio
def test_complex_spectrogram_refusals():
    """power=None is Spectrogram's only, and AmplitudeToDB cannot follow it: refused by name."""
    with pytest.raises(stoker.StokerInvalidError, match="Spectrogram's only"):
        A.compile([A.CenterCrop(1.0), TA.MelSpectrogram(16000, power=None)])
    with pytest.raises(stoker.StokerInvalidError, match="complex spectrogram"):
        A.compile([A.CenterCrop(1.0), TA.Spectrogram(power=None), TA.AmplitudeToDB()])
    with pytest.raises(stoker.StokerInvalidError, match="positive power"):
        A.Spectrogram(power=0)


@needs_torchaudio
def test_vol_and_downmix_equal_torchaudio(corpus):
    """Vol (amplitude, db, power; clamped) and Downmix (the channels' mean) on a stereo file."""
    path = corpus["synth_chord.wav_s16"]
    ref, sr = ta_load(path)
    n = ref.shape[1]
    for vol in (TA.Vol(3.0), TA.Vol(6.0, "db"), TA.Vol(0.25, "power")):
        want = vol(ref.mean(0, keepdim=True)).numpy()
        b = load_one(path, [A.Downmix(), vol, A.PadTo(n / sr)])
        assert b["audio"].shape == (1, 1, n)
        assert np.abs(b["audio"][0] - want).max() < 1e-6
    b = load_one(path, [A.Downmix(2), A.PadTo(n / sr)])
    assert np.array_equal(b["audio"][0], ref.numpy())
    mono = corpus["speech_us_slow.wav_16k"]
    r2, _ = ta_load(mono)
    b = load_one(mono, [A.Downmix(2), A.PadTo(r2.shape[1] / 16000)])
    assert np.array_equal(b["audio"][0], np.repeat(r2.numpy(), 2, 0))


@needs_torchaudio
def test_random_crop_is_a_window_of_the_whole(corpus):
    """Resample then RandomCrop decodes and resamples only the window (plus the filter's reach),
    yet every crop equals a window of torchaudio's whole-file resample, and the windows differ
    across samples and epochs."""
    path = corpus["synth_sweep"]  # no silence and no period: a window matches in one place
    ref, sr = ta_load(path)
    whole = TA.Resample(sr, 16000)(ref).numpy()[0]
    d = audio_data.tree(tempfile.mkdtemp(), {"c": [path] * 6})
    offsets = []
    with stoker.Loader(d, 6, transforms=[TA.Resample(sr, 16000), A.RandomCrop(0.5)],
                       output="numpy", seed=3) as loader:
        for _ in range(2):
            for b in loader:
                for x in b["audio"][:, 0]:  # (channel 0 of 2)
                    scores = np.abs(np.lib.stride_tricks.sliding_window_view(whole, 8000)[:, :64]
                                    - x[:64]).max(1)
                    off = int(scores.argmin())
                    assert np.abs(whole[off:off + 8000] - x).max() < 1e-5
                    offsets.append(off)
    assert len(set(offsets)) > 8


def test_random_crop_offsets_are_uniform():
    """RandomCrop's offset is uniform on [0, len - n] (torch.randint(0, len - n + 1)): a ramp
    array shows it in its first sample; chi-square over 4000 draws, 10 bins."""
    d = tempfile.mkdtemp()
    n, L = 4000, 1000
    np.save(os.path.join(d, "x.npy"), np.tile(np.arange(L, dtype=np.float32), (n, 1)))
    with stoker.Loader(os.path.join(d, "x.npy"), 500, output="numpy", sample_rate=100,
                       transforms=[A.RandomCrop(2.0)]) as loader:
        first = np.concatenate([b["audio"][:, 0, 0].copy() for b in loader])
    assert first.min() >= 0 and first.max() <= L - 200 and first.dtype == np.float32
    counts = np.histogram(first, bins=10, range=(0, L - 200 + 1))[0]
    chi2 = float(((counts - n / 10) ** 2 / (n / 10)).sum())
    assert chi2 < 27.9  # p = 0.001, 9 degrees of freedom


def _mask_runs(x, axis):
    """(start, width) of the run of zero rows (axis 0) or columns (axis 1) of x (F x T)."""
    zero = np.all(x == 0, axis=1 - axis)
    idx = np.flatnonzero(zero)
    return (int(idx[0]), len(idx)) if len(idx) else (0, 0)


@needs_torchaudio
@needs_fftw
def test_masks_follow_torchaudio_distribution():
    """TimeMasking and FrequencyMasking: the masked run's start and width have torchaudio's
    distribution (mask_along_axis: width uniform in [0, param), start uniform in [0, size -
    width)): two-sample KS tests against torchaudio's own draws, 3000 samples each; the same mask
    on every channel of a sample."""
    n, S = 3000, 1600
    rng = np.random.default_rng(5)
    d = tempfile.mkdtemp()
    np.save(os.path.join(d, "x.npy"), (rng.standard_normal((n, 2, S)) * 0.3).astype(np.float32))
    ops = [A.Spectrogram(n_fft=64, hop_length=32), TA.FrequencyMasking(12), TA.TimeMasking(20)]
    got_f, got_t = [], []
    with stoker.Loader(os.path.join(d, "x.npy"), 250, output="numpy", sample_rate=16000,
                       transforms=ops, seed=1) as loader:
        for b in loader:
            for x in b["audio"]:
                assert np.array_equal(x[0] == 0, x[1] == 0)  # one mask for both channels
                got_f.append(_mask_runs(x[0], 0))
                got_t.append(_mask_runs(x[0], 1))
    F, T = 33, 1 + S // 32
    torch.manual_seed(0)
    ref_f, ref_t = [], []
    ones = torch.ones(1, F, T)
    for _ in range(n):
        ref_f.append(_mask_runs(TA.FrequencyMasking(12)(ones)[0].numpy(), 0))
        ref_t.append(_mask_runs(TA.TimeMasking(20)(ones)[0].numpy(), 1))
    for got, ref, what in ((got_f, ref_f, "freq"), (got_t, ref_t, "time")):
        for k, part in ((0, "start"), (1, "width")):
            a = np.array([g[k] for g in got if g[1] > 0])
            r = np.array([g[k] for g in ref if g[1] > 0])
            ks = _ks(a, r)
            print(f"{what} {part}: KS {ks:.4f} ({len(a)} vs {len(r)} masks)")
            assert ks < 1.63 * np.sqrt((len(a) + len(r)) / (len(a) * len(r)))  # p = 0.01
        zero = np.mean([g[1] == 0 for g in got]) - np.mean([g[1] == 0 for g in ref])
        assert abs(zero) < 0.03  # width 0 (no mask) as often as torchaudio


def _ks(a, b):
    """The two-sample Kolmogorov-Smirnov statistic."""
    allv = np.sort(np.concatenate([a, b]))
    ca = np.searchsorted(np.sort(a), allv, side="right") / len(a)
    cb = np.searchsorted(np.sort(b), allv, side="right") / len(b)
    return float(np.abs(ca - cb).max())


@needs_fftw
def test_iid_masks_differ_per_channel():
    d = tempfile.mkdtemp()
    x = (np.random.default_rng(2).standard_normal((64, 2, 1600)) * 0.3).astype(np.float32)
    np.save(os.path.join(d, "x.npy"), x)
    with stoker.Loader(os.path.join(d, "x.npy"), 64, output="numpy", sample_rate=16000,
                       transforms=[A.Spectrogram(n_fft=64), A.TimeMasking(30, iid_masks=True)]
                       ) as loader:
        b = next(iter(loader))["audio"]
    differ = sum(not np.array_equal(s[0] == 0, s[1] == 0) for s in b)
    assert differ > 32


# ---- determinism, lengths, errors ----

@needs_fftw
def test_same_for_any_thread_count_and_new_each_epoch(corpus):
    keys = ["speech_us_slow", "speech_gb_fast", "speech_de", "speech_scot"]
    d = audio_data.tree(tempfile.mkdtemp(), {"a": [corpus[k] for k in keys] * 3})
    ops = [A.Resample(22050, 16000), A.RandomCrop(0.75), A.MelSpectrogram(16000, n_mels=32),
           A.TimeMasking(10), A.FrequencyMasking(5)]
    runs = []
    for threads in (1, 2):
        with stoker.Loader(d, 4, transforms=ops, num_workers=threads, shuffle=True, seed=9,
                           output="numpy") as loader:
            runs.append([np.concatenate([b["audio"] for b in loader]) for _ in range(2)])
    assert np.array_equal(runs[0][0], runs[1][0]) and np.array_equal(runs[0][1], runs[1][1])
    assert not np.array_equal(runs[0][0], runs[0][1])


def test_lengths_and_padding(corpus):
    """PadTo with lengths: each row's valid samples, zeros after; a spectrogram's in frames."""
    keys = ["speech_us_slow", "speech_gb_fast", "speech_de"]
    d = audio_data.tree(tempfile.mkdtemp(), {"a": [corpus[k] for k in keys]})
    frames = [n for n in (_frames(corpus[k]) for k in keys)]
    want = [min(n, round(3.5 * 22050)) for n in frames]
    with stoker.Loader(d, 3, output="numpy",
                       transforms=A.Compose([A.PadTo(3.5)], lengths=True)) as loader:
        b = next(iter(loader))
    assert b["audio"].shape == (3, 1, round(3.5 * 22050))
    assert list(b["audio_lengths"]) == want
    for x, n in zip(b["audio"], want):
        assert not x[:, n:].any() and x[:, :n].any()
    if HAS["fftw"]:
        with stoker.Loader(d, 3, output="numpy", transforms=A.Compose(
                [A.PadTo(3.5), A.MelSpectrogram(22050, hop_length=256)], lengths=True)) as loader:
            b = next(iter(loader))
        assert list(b["audio_lengths"]) == [min(b["audio"].shape[3], 1 + n // 256) for n in want]
    with stoker.Loader(d, 3, output="numpy", transforms=[A.PadTo(3.5)]) as loader:
        assert "audio_lengths" not in next(iter(loader))


def _frames(path):
    """Frames of a 16-bit mono WAV, from its header (the data chunk's size)."""
    data = open(path, "rb").read()
    at = data.index(b"data")
    return int.from_bytes(data[at + 4:at + 8], "little") // 2


def test_sample_rate_and_channels(corpus):
    """Files at several rates: without a Resample and sample_rate= they are refused by name (the
    rate of record 0 against the file's); sample_rate= resamples each to it; channel counts that
    differ need a Downmix."""
    d = audio_data.tree(tempfile.mkdtemp(), {"a": [corpus["speech_us_slow"],
                                                   corpus["speech_us_slow.wav_16k"]]})
    with stoker.Loader(d, 2, transforms=[A.CenterCrop(1.0)], output="numpy") as loader:
        with pytest.raises(stoker.StokerFormatError, match=r"01_sp16k.wav \(record 1\).*16000 "
                           r"Hz where record 0 is at 22050 Hz: give sample_rate="):
            next(iter(loader))
    with stoker.Loader(d, 2, transforms=[A.CenterCrop(1.0)], sample_rate=16000,
                       output="numpy") as loader:
        b = next(iter(loader))
    assert b["audio"].shape == (2, 1, 16000)
    d2 = audio_data.tree(tempfile.mkdtemp(), {"a": [corpus["speech_us_slow.wav_16k"],
                                                    corpus["speech_us_slow.wav_48k_st"]]})
    with stoker.Loader(d2, 2, transforms=[A.CenterCrop(1.0)], sample_rate=16000,
                       output="numpy") as loader:
        with pytest.raises(stoker.StokerFormatError, match=r"2 channels where record 0 has 1: "
                           r"add stoker.audio.Downmix\(\)"):
            next(iter(loader))
    with stoker.Loader(d2, 2, transforms=[A.Downmix(), A.CenterCrop(1.0)], sample_rate=16000,
                       output="numpy") as loader:
        b = next(iter(loader))
    assert b["audio"].shape == (2, 1, 16000)
    with pytest.raises(ValueError, match="with Resample .* leave it out"):
        stoker.Loader(d2, 2, transforms=[A.Resample(48000, 16000), A.CenterCrop(1.0)],
                      sample_rate=16000)


DAMAGED = ["truncated.wav_s16", "truncated.flac16", "corrupt.flac16", "truncated.ogg",
           "corrupt.ogg", "truncated.opus", "corrupt.opus", "truncated.mp3", "empty", "notaudio"]


@pytest.mark.parametrize("key", DAMAGED)
def test_damaged_files_fail_naming_file_and_record(corpus, key):
    """A truncated or corrupt stream fails strictly with the file, the record and the reason
    (its first read decodes it to its end: counts, FLAC frame sync, Ogg page CRCs, the MP3 tag's
    length); on_error="skip" replaces it and counts it. A corrupt MP3 frame has no checksum to
    fail (no decoder can tell): not in the list."""
    if key.endswith("mp3") and not HAS["mpg123"]:
        pytest.skip("stoker was built without libmpg123")
    good = corpus["synth_chord.flac16"]
    d = audio_data.tree(tempfile.mkdtemp(), {"a": [good, corpus[key], good]})
    ops = [A.Resample(44100, 16000), A.RandomCrop(1.0)]
    with stoker.Loader(d, 3, transforms=ops, output="numpy") as loader:
        with pytest.raises(stoker.StokerFormatError) as e:
            next(iter(loader))
    msg = str(e.value)
    print(key, ":", msg)
    assert f"/a/01_{os.path.basename(corpus[key])} (record 1)" in msg
    with stoker.Loader(d, 3, transforms=ops, output="numpy", on_error="skip") as loader:
        b = next(iter(loader))
        assert list(b["index"]) == [0, 2, 2] and loader.stats()["skipped"] == 1


def test_lenient_decodes_only_the_window(corpus):
    """strict=False: a damaged FLAC whose damage lies past the crop decodes (only the window is
    read); the window's samples equal those of the undamaged file."""
    good, bad = corpus["synth_chord.flac16"], corpus["truncated.flac16"]
    ops = A.Compose([A.PadTo(0.5)], strict=False)
    assert np.array_equal(load_one(bad, ops)["audio"], load_one(good, ops)["audio"])
    with pytest.raises(stoker.StokerFormatError, match="FLAC"):
        load_one(bad, [A.PadTo(0.5)])


def test_first_read_checks_then_trusts(corpus):
    """The whole stream is decoded on a record's first read only: a later epoch decodes the
    window, with the same samples."""
    d = audio_data.tree(tempfile.mkdtemp(), {"a": [corpus["synth_chord.mp3"],
                                                   corpus["synth_chord.ogg"],
                                                   corpus["synth_chord.opus"],
                                                   corpus["synth_chord.flac16"]]})
    with stoker.Loader(d, 4, transforms=[A.Resample(48000, 16000), A.CenterCrop(0.5)],
                       output="numpy") as loader:
        a = np.concatenate([b["audio"] for b in loader])
        b = np.concatenate([b["audio"] for b in loader])
    assert np.array_equal(a[[1, 3]], b[[1, 3]])  # Vorbis and FLAC: exact either way
    assert np.abs(a - b).max() < 3e-4            # Opus seeks with 80 ms of pre-roll


def test_refuses_what_it_cannot_express(corpus):
    d = one_file_tree(corpus["speech_us_slow"])
    if torchaudio is not None:
        with pytest.raises(ValueError, match="PitchShift is not supported"):
            stoker.Loader(d, 1, transforms=[TA.PitchShift(22050, 2), A.CenterCrop(1.0)])
        with pytest.raises(ValueError, match="power=None"):
            stoker.Loader(d, 1, transforms=[A.CenterCrop(1.0), TA.MelSpectrogram(power=None)])
        with pytest.raises(ValueError, match="custom window"):
            stoker.Loader(d, 1, transforms=[
                A.CenterCrop(1.0), TA.Spectrogram(window_fn=lambda n: torch.rand(n))])
    with pytest.raises(ValueError, match=r"ops\[1\] \(Vol\): a waveform op after "
                       r"MelSpectrogram"):
        stoker.Loader(d, 1, transforms=[A.MelSpectrogram(), A.Vol(2.0)])
    with pytest.raises(ValueError, match="needs a spectrogram"):
        stoker.Loader(d, 1, transforms=[A.CenterCrop(1.0), A.TimeMasking(5)])
    with pytest.raises(ValueError, match=r"transform Resize\(size=\(8, 0\)\) is not supported by "
                       "stoker's audio pipeline; supported: torchaudio's Resample, Vol"):
        stoker.Loader(d, 1, transforms=[A.CenterCrop(1.0), stoker.transforms.Resize(8)])
    with pytest.raises(ValueError, match=r"ops\[1\] \(Resize\): an image op in an audio "
                       "transform"):
        stoker._core.Transform([A.CenterCrop(1.0).to_dict(), {"kind": "Resize"}])
    with pytest.raises(ValueError, match=r"ops\[1\] \(audio.CenterCrop\): an audio op in an "
                       "image transform"):
        stoker._core.Transform([{"kind": "Resize"}, A.CenterCrop(1.0).to_dict()])
    with pytest.raises(ValueError, match="output length is not fixed"):
        stoker.Loader(d, 1, transforms=[A.Resample(22050, 16000)])
    with pytest.raises(ValueError, match=r"ops\[0\] \(Resample\): new_freq"):
        stoker.Loader(d, 1, transforms=[A.Resample(22050, 0), A.CenterCrop(1.0)])


def test_unbound_output_and_info(corpus):
    """A transform's output shape has -1 where the data decides (channels without a Downmix);
    the loader's batches have the data's."""
    t = A.compile([A.Resample(44100, 16000), A.RandomCrop(1.0)])
    assert t.media == "audio" and t.output == {"dtype": "float32", "shape": (-1, 16000)}
    t = A.compile([A.Downmix(), A.Resample(44100, 16000), A.RandomCrop(1.0)])
    assert t.output == {"dtype": "float32", "shape": (1, 16000)}
    b = load_one(corpus["synth_chord.wav_s16"], [A.Resample(44100, 16000), A.RandomCrop(1.0)])
    assert b["audio"].shape == (1, 2, 16000)


def test_info_shows_the_bound_output(corpus):
    """A loader's info()["transform"] is the output its batches have: the data's channel count
    and length where the compiled transform had -1."""
    ops = [A.Resample(44100, 16000), A.RandomCrop(1.0), A.MelSpectrogram(16000, n_mels=32)]
    assert A.compile(ops).output["shape"][0] == -1
    with stoker.Loader(one_file_tree(corpus["synth_chord.wav_s16"]), 1, transforms=ops,
                       output="numpy") as loader:
        info = loader.info()["transform"]
        b = next(iter(loader))
    assert info == {"dtype": "float32", "shape": b["audio"].shape[1:]}
    assert info["shape"] == (2, 32, 81)
    with stoker.Loader(one_file_tree(corpus["synth_chord.wav_s16"]), 1,
                       output="numpy") as loader:  # no transform
        assert loader.info()["transform"] is None


def test_audio_classes_are_the_c_rows():
    """Every audio row of the C op table has a stoker.audio class whose parameters are the row's
    (names and counts), and the torchaudio conversion reaches each torchaudio-named one."""
    ops = {"Resample": A.Resample(), "audio.Downmix": A.Downmix(),
           "audio.RandomCrop": A.RandomCrop(1.0), "audio.CenterCrop": A.CenterCrop(1.0),
           "audio.PadTo": A.PadTo(1.0), "Vol": A.Vol(2.0), "Spectrogram": A.Spectrogram(),
           "MelSpectrogram": A.MelSpectrogram(), "MFCC": A.MFCC(),
           "AmplitudeToDB": A.AmplitudeToDB(), "TimeMasking": A.TimeMasking(5),
           "FrequencyMasking": A.FrequencyMasking(5),
           "TimeStretch": A.TimeStretch(fixed_rate=1.2)}
    assert set(ops) == set(A.SUPPORTED) == set(stoker._core.op_names("audio"))
    assert not set(A.SUPPORTED) & set(stoker._core.op_names())  # image ops apart
    for name, op in ops.items():
        d = op.to_dict()
        assert d.pop("kind") == name
        params = {p[0]: p[2] for p in stoker._core.op_params(name)}
        assert set(d) == set(params), name
        assert all((len(v) if isinstance(v, tuple) else 1) == params[k] for k, v in d.items())
    t = stoker._core.Transform([op.to_dict() for op in (A.Resample(), A.PadTo(1.0))])
    assert t.media == "audio"
    if torchaudio is not None:
        from stoker import _torchaudio
        for tobj in (TA.Resample(8000, 16000), TA.Vol(0.5), TA.Spectrogram(), TA.MelSpectrogram(),
                     TA.MFCC(), TA.AmplitudeToDB(), TA.TimeMasking(3), TA.FrequencyMasking(3),
                     TA.TimeStretch(fixed_rate=1.2)):
            ((name, args, kw),) = _torchaudio.convert(tobj, A.SUPPORTED)
            assert name == type(tobj).__name__
            assert type(getattr(A, name)(*args, **kw)).__name__ == name


@needs_fftw
@pytest.mark.skipif(torchaudio is None or not torch.cuda.is_available(),
                    reason="no CUDA device for torch (run on a GPU)")
def test_device_batches_equal_the_cpu_path_on_a_gpu(corpus):
    """Loader(device="cuda") of the keyword-spotting recipe on a real GPU: the spectrograms and
    their lengths arrive on the device, equal to the CPU path's."""
    keys = ["speech_us_slow", "speech_gb_fast", "speech_de", "speech_scot"]
    d = audio_data.tree(tempfile.mkdtemp(), {"a": [corpus[k] for k in keys] * 3})
    ops = A.Compose([A.Resample(22050, 16000), A.RandomCrop(0.75),
                     A.MelSpectrogram(16000, n_mels=32), A.TimeMasking(10)], lengths=True)
    args = dict(batch_size=4, shuffle=True, seed=9, transforms=ops, num_workers=2)
    with stoker.Loader(d, **args) as cpu, stoker.Loader(d, device="cuda", **args) as dev:
        n = 0
        for a, b in zip(cpu, dev):
            assert b["audio"].device.type == "cuda"
            assert torch.equal(a["audio"], b["audio"].cpu())
            for k in ("audio_lengths", "label", "index"):
                assert torch.equal(a[k], b[k].cpu()), k
            n += len(b["index"])
        assert n == 12 and dev.stats()["finish"] == "none"


def test_kws_recipes_are_the_listed_ops(corpus):
    """Loader(transforms="kws-train") (the recipe `stoker bench --recipe kws-train` runs) is the
    keyword-spotting list of ops: the same batches, draws included; "kws-val" likewise."""
    keys = ["speech_us_slow", "speech_gb_fast", "speech_de", "speech_scot"]
    d = audio_data.tree(tempfile.mkdtemp(), {"a": [corpus[k] for k in keys] * 2})
    lists = {"kws-train": [A.Resample(16000, 16000), A.RandomCrop(1.0),
                           A.MelSpectrogram(16000, n_mels=64), A.FrequencyMasking(8),
                           A.TimeMasking(20)],
             "kws_val": [A.Resample(16000, 16000), A.CenterCrop(1.0),
                         A.MelSpectrogram(16000, n_mels=64)]}
    for name, ops in lists.items():
        got = []
        for t in (name, ops):
            with stoker.Loader(d, 4, transforms=t, shuffle=True, seed=5,
                               output="numpy") as loader:
                got.append(np.concatenate([b["audio"] for b in loader]))
        assert got[0].shape == (8, 1, 64, 81)
        assert np.array_equal(got[0], got[1]), name
    assert A.RECIPES == ("kws-train", "kws-val")
    with pytest.raises(ValueError, match="unknown transform recipe 'kws'"):
        stoker.Loader(d, 4, transforms="kws")

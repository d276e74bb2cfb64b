"""stoker.audio: audio transforms that run inside stoker's C workers.

The classes carry torchaudio's names and arguments (``Resample``, ``Vol``, ``Spectrogram``,
``MelSpectrogram``, ``MFCC``, ``AmplitudeToDB``, ``TimeMasking``, ``FrequencyMasking``), plus
stoker's own for what torchaudio leaves to a Dataset's ``__getitem__``: ``RandomCrop(seconds)``
(a random window, zero-padded when the clip is shorter), ``CenterCrop(seconds)``,
``PadTo(seconds)`` (the first seconds, for variable-length batches with ``lengths=True``) and
``Downmix(channels=1)``. They do not run in Python: :func:`compile` turns a list of them, a
``torch.nn.Sequential`` of torchaudio transforms, or a mix, into one C transform that the loader's
worker threads apply to every sample, fused with the decode (WAV, FLAC, Ogg Vorbis, Opus, MP3;
only the part a crop keeps is decoded where the codec can seek)::

    import stoker, torch, torchaudio.transforms as TA
    from stoker import audio as A

    kws = [TA.Resample(44100, 16000), A.RandomCrop(1.0),
           TA.MelSpectrogram(16000, n_mels=64), TA.FrequencyMasking(8), TA.TimeMasking(20)]
    loader = stoker.Loader("speech/", batch_size=64, shuffle=True, transforms=kws)
    for batch in loader:
        x, y = batch["audio"], batch["label"]   # float32 [64, 1, 64, 81], int64 [64]

Randomness (the crop's offset, the masks) comes from the loader's (seed, epoch, sample index),
so a sample is the same for any number of threads or ranks. docs/audio.md has the details and
the measured differences from torchaudio.
"""
import numbers

from . import _core
from . import _torchaudio
from .transforms._base import Op, _invalid

__all__ = ["Resample", "Vol", "Spectrogram", "MelSpectrogram", "MFCC", "AmplitudeToDB",
           "TimeMasking", "FrequencyMasking", "TimeStretch", "RandomCrop", "CenterCrop", "PadTo", "Downmix",
           "Compose", "compile", "SUPPORTED", "RECIPES"]

# The C library's audio ops (its op table), by their table names.
SUPPORTED = tuple(_core.op_names("audio"))
# The library's audio recipes (stk_transform_recipe): "kws-train" (Resample to 16 kHz, a random
# 1 s crop, MelSpectrogram(16000, n_mels=64), FrequencyMasking(8), TimeMasking(20)), "kws-val"
# (Resample, the centred 1 s, MelSpectrogram): Loader(transforms="kws-train").
RECIPES = tuple(n for n in _core.recipes() if _core.recipe_ops(n)[0]["kind"] in SUPPORTED)


def _recipe(transforms):
    """The audio recipe `transforms` names (a string), else None."""
    if not isinstance(transforms, str):
        return None
    key = transforms.replace("_", "-").lower()
    return key if key in RECIPES else None


def _choice(value, names, what):
    """torchaudio's string argument -> the C op's number (names: {string: number})."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and \
            value in names.values():
        return int(value)
    if value not in names:
        raise _invalid(f"{what} must be one of {', '.join(map(repr, names))}, got {value!r}")
    return names[value]


class _AudioOp(Op):
    """An audio op: its C row is `_kind` (default: the class name)."""

    _kind = None

    def to_dict(self):
        d = {"kind": self._kind or type(self).__name__}
        d.update(self._params())
        return d

    def __call__(self, *args, **kw):
        raise TypeError(f"stoker.audio.{type(self).__name__} runs inside the loader's C workers; "
                        "pass it to stoker.Loader(transforms=...) instead of calling it")


class Resample(_AudioOp):
    """torchaudio.transforms.Resample(orig_freq, new_freq, resampling_method, lowpass_filter_width,
    rolloff, beta): torchaudio's windowed sinc, the same kernel. A decoded file is resampled from
    its own rate to new_freq; orig_freq is the rate of waveform arrays, which carry none."""

    METHODS = {"sinc_interp_hann": 0, "sinc_interpolation": 0, "sinc_interp_kaiser": 1,
               "kaiser_window": 1}

    def __init__(self, orig_freq=16000, new_freq=16000, resampling_method="sinc_interp_hann",
                 lowpass_filter_width=6, rolloff=0.99, beta=None, **kw):
        for k in kw:
            if k != "dtype":
                raise TypeError(f"Resample() got an unexpected keyword argument {k!r}")
        if int(orig_freq) != orig_freq or int(new_freq) != new_freq:
            raise _invalid(f"Resample: frequencies must be integers (torchaudio's rule), got "
                           f"{orig_freq}, {new_freq}")
        self.orig_freq, self.new_freq = int(orig_freq), int(new_freq)
        self.resampling_method = _choice(resampling_method, self.METHODS,
                                         "Resample: resampling_method")
        self.lowpass_filter_width = int(lowpass_filter_width)
        self.rolloff = float(rolloff)
        self.beta = None if beta is None else float(beta)

    def _params(self):
        return {"orig_freq": self.orig_freq, "new_freq": self.new_freq,
                "resampling_method": self.resampling_method,
                "lowpass_filter_width": self.lowpass_filter_width, "rolloff": self.rolloff,
                "beta": float("nan") if self.beta is None else self.beta}


class Vol(_AudioOp):
    """torchaudio.transforms.Vol(gain, gain_type="amplitude"): times gain (or 10^(gain/20) for
    "db", sqrt(gain) for "power"), clamped to [-1, 1]."""

    TYPES = {"amplitude": 0, "db": 1, "power": 2}

    def __init__(self, gain, gain_type="amplitude"):
        self.gain = float(gain)
        self.gain_type = _choice(gain_type, self.TYPES, "Vol: gain_type")

    def _params(self):
        return {"gain": self.gain, "gain_type": self.gain_type}


WINDOWS = {"hann_window": 0, "hamming_window": 1, "blackman_window": 2, "ones": 3}
PAD_MODES = {"reflect": 0, "constant": 1, "replicate": 2, "circular": 3}


def _window(window_fn, wkwargs, what):
    """window_fn (torch.hann_window, hamming_window, blackman_window, torch.ones, or its name) and
    wkwargs ({"periodic": ...} only) -> (window, periodic)."""
    name = "hann_window" if window_fn is None else \
        window_fn if isinstance(window_fn, str) else getattr(window_fn, "__name__", repr(window_fn))
    if name not in WINDOWS:
        raise _invalid(f"{what}: window_fn {name} is not supported (torch.hann_window, "
                       "hamming_window, blackman_window or ones)")
    periodic = True
    for k, v in (wkwargs or {}).items():
        if k != "periodic":
            raise _invalid(f"{what}: wkwargs {k!r} is not supported (only 'periodic')")
        periodic = bool(v)
    return WINDOWS[name], int(periodic)


def _normalized(normalized, what):
    if isinstance(normalized, str):
        return _choice(normalized, {"window": 1, "frame_length": 2}, f"{what}: normalized")
    return 1 if normalized else 0


class Spectrogram(_AudioOp):
    """torchaudio.transforms.Spectrogram: |STFT|^power, [channels, n_fft // 2 + 1, frames];
    power=None: the complex STFT as float32 [channels, n_fft // 2 + 1, frames, 2] (real,
    imaginary: torch.view_as_complex of it is torchaudio's complex64 output)."""

    def __init__(self, n_fft=400, win_length=None, hop_length=None, pad=0, window_fn=None,
                 power=2.0, normalized=False, wkwargs=None, center=True, pad_mode="reflect",
                 onesided=True, return_complex=None):
        what = type(self).__name__
        if power is not None and not float(power) > 0:
            raise _invalid(f"{what}: power={power!r}: give a positive power, or None (complex)")
        self.n_fft = int(n_fft)
        self.win_length = int(win_length) if win_length is not None else 0
        self.hop_length = int(hop_length) if hop_length is not None else 0
        self.pad = int(pad)
        self.window, self.periodic = _window(window_fn, wkwargs, what)
        self.power = 0.0 if power is None else float(power)  # 0: None, complex
        self.normalized = _normalized(normalized, what)
        self.center = int(bool(center))
        self.pad_mode = _choice(pad_mode, PAD_MODES, f"{what}: pad_mode")
        self.onesided = int(bool(onesided))

    def _stft(self):
        return {"n_fft": self.n_fft, "win_length": self.win_length,
                "hop_length": self.hop_length, "pad": self.pad, "window": self.window,
                "periodic": self.periodic, "power": self.power, "normalized": self.normalized,
                "center": self.center, "pad_mode": self.pad_mode, "onesided": self.onesided}

    def _params(self):
        return self._stft()


class MelSpectrogram(Spectrogram):
    """torchaudio.transforms.MelSpectrogram: the spectrogram through melscale_fbanks,
    [channels, n_mels, frames]."""

    NORMS = {None: 0, "slaney": 1}
    SCALES = {"htk": 0, "slaney": 1}

    def __init__(self, sample_rate=16000, n_fft=400, win_length=None, hop_length=None, f_min=0.0,
                 f_max=None, pad=0, n_mels=128, window_fn=None, power=2.0, normalized=False,
                 wkwargs=None, center=True, pad_mode="reflect", onesided=True, norm=None,
                 mel_scale="htk"):
        super().__init__(n_fft, win_length, hop_length, pad, window_fn, power, normalized,
                         wkwargs, center, pad_mode, onesided)
        self.sample_rate = int(sample_rate)
        self.f_min = float(f_min)
        self.f_max = None if f_max is None else float(f_max)
        self.n_mels = int(n_mels)
        self.norm = _choice(norm, self.NORMS, f"{type(self).__name__}: norm")
        self.mel_scale = _choice(mel_scale, self.SCALES, f"{type(self).__name__}: mel_scale")

    def _mel(self):
        d = self._stft()
        d.update(f_min=self.f_min, f_max=float("nan") if self.f_max is None else self.f_max,
                 n_mels=self.n_mels, mel_scale=self.mel_scale)
        return d

    def _params(self):
        d = {"sample_rate": self.sample_rate}
        d.update(self._mel(), norm=self.norm)
        return d


class MFCC(_AudioOp):
    """torchaudio.transforms.MFCC(sample_rate, n_mfcc, dct_type, norm, log_mels, melkwargs): the
    mel spectrogram in dB (AmplitudeToDB("power", top_db=80) over the whole sample, or log(x +
    1e-6) with log_mels) through create_dct's matrix, [channels, n_mfcc, frames]."""

    def __init__(self, sample_rate=16000, n_mfcc=40, dct_type=2, norm="ortho", log_mels=False,
                 melkwargs=None, top_db=80.0):
        self.sample_rate = int(sample_rate)
        self.n_mfcc = int(n_mfcc)
        self.dct_type = int(dct_type)
        self.norm = _choice(norm, {None: 0, "ortho": 1}, "MFCC: norm")
        self.log_mels = int(bool(log_mels))
        if top_db is None:
            raise _invalid("MFCC: top_db=None is not supported (torchaudio's MFCC uses 80)")
        self.top_db = float(top_db)
        mk = dict(melkwargs or {})
        mk.pop("sample_rate", None)  # torchaudio passes MFCC's own
        self.mel = MelSpectrogram(self.sample_rate, **mk)

    def _params(self):
        d = {"sample_rate": self.sample_rate, "n_mfcc": self.n_mfcc, "dct_type": self.dct_type,
             "norm": self.norm, "log_mels": self.log_mels, "top_db": self.top_db}
        d.update(self.mel._mel(), mel_norm=self.mel.norm)
        return d


class AmplitudeToDB(_AudioOp):
    """torchaudio.transforms.AmplitudeToDB(stype="power", top_db=None): 10 log10 (20 for
    "magnitude") of max(x, 1e-10), at least the sample's maximum minus top_db."""

    def __init__(self, stype="power", top_db=None):
        self.stype = _choice(stype, {"power": 0, "magnitude": 1}, "AmplitudeToDB: stype")
        self.top_db = None if top_db is None else float(top_db)

    def _params(self):
        return {"stype": self.stype,
                "top_db": float("nan") if self.top_db is None else self.top_db}


class TimeMasking(_AudioOp):
    """torchaudio.transforms.TimeMasking(time_mask_param, iid_masks=False, p=1.0): zero a run of
    frames, its width uniform in [0, time_mask_param) (at most p * frames), the same for every
    channel of a sample (iid_masks: one per channel)."""

    def __init__(self, time_mask_param, iid_masks=False, p=1.0):
        self.time_mask_param = int(time_mask_param)
        self.iid_masks = int(bool(iid_masks))
        self.p = float(p)

    def _params(self):
        return {"time_mask_param": self.time_mask_param, "iid_masks": self.iid_masks, "p": self.p}


class FrequencyMasking(_AudioOp):
    """torchaudio.transforms.FrequencyMasking(freq_mask_param, iid_masks=False): zero a run of
    frequency rows, as TimeMasking does frames."""

    def __init__(self, freq_mask_param, iid_masks=False):
        self.freq_mask_param = int(freq_mask_param)
        self.iid_masks = int(bool(iid_masks))

    def _params(self):
        return {"freq_mask_param": self.freq_mask_param, "iid_masks": self.iid_masks}


class TimeStretch(_AudioOp):
    """torchaudio.transforms.TimeStretch(hop_length=None, n_freq=201, fixed_rate=None): the phase
    vocoder on a complex spectrogram (right after Spectrogram(power=None)), ceil(frames / rate)
    frames out. torchaudio takes the rate per call when fixed_rate is None; here
    rate_range=(lo, hi) draws it per sample, uniform (lo + (hi - lo) * torch.rand(1)), and the
    batch has the frames of the slowest rate, zero-padded (Compose(lengths=True) gives each
    row's)."""

    def __init__(self, hop_length=None, n_freq=201, fixed_rate=None, rate_range=None):
        if (fixed_rate is None) == (rate_range is None):
            raise _invalid("TimeStretch: give fixed_rate, or rate_range=(lo, hi) for a rate drawn "
                           "per sample (torchaudio's per-call overriding_rate has no place in a "
                           "loader)")
        self.hop_length = 0 if hop_length is None else int(hop_length)
        self.n_freq = int(n_freq)
        self.fixed_rate = None if fixed_rate is None else float(fixed_rate)
        if rate_range is not None:
            lo, hi = rate_range
            rate_range = (float(lo), float(hi))
        self.rate_range = rate_range

    def _params(self):
        nan = float("nan")
        return {"hop_length": self.hop_length, "n_freq": self.n_freq,
                "fixed_rate": nan if self.fixed_rate is None else self.fixed_rate,
                "rate_range": tuple(self.rate_range or (nan, nan))}


class _Seconds(_AudioOp):
    def __init__(self, seconds):
        self.seconds = float(seconds)

    def _params(self):
        return {"seconds": self.seconds}


class RandomCrop(_Seconds):
    """A random window of `seconds` (round(seconds * rate) samples; offset uniform, as
    torch.randint(0, len - n + 1)); a shorter clip is zero-padded at its end. For training."""
    _kind = "audio.RandomCrop"


class CenterCrop(_Seconds):
    """The centred window of `seconds` (offset (len - n) // 2); a shorter clip is zero-padded at
    its end. For evaluation."""
    _kind = "audio.CenterCrop"


class PadTo(_Seconds):
    """The first `seconds` of each clip, zero-padded to that length: batches of clips of
    different lengths (Compose(..., lengths=True) gives each row's valid length)."""
    _kind = "audio.PadTo"


class Downmix(_AudioOp):
    """To mono (channels=1: the mean of the channels, as waveform.mean(0, keepdim=True)) or
    stereo (channels=2: stereo kept, mono duplicated, 3 to 8 channels mixed by FFmpeg's default
    matrix on the file's layout, as torchaudio.io.StreamReader and `ffmpeg -ac 2` give it)."""
    _kind = "audio.Downmix"

    def __init__(self, channels=1):
        self.channels = int(channels)

    def _params(self):
        return {"channels": self.channels}


class Compose:
    """A list of audio ops (stoker.audio's or torchaudio's) plus output options:
    lengths=True adds each row's valid length (samples, or frames of a spectrogram, before the
    zero padding) as ``batch["audio_lengths"]``; sample_rate (Loader(sample_rate=...)) the
    rate the ops run at when there is no Resample; strict=False decodes only what the crop keeps
    even on a record's first read, and zero-fills what a damaged stream lacks."""

    def __init__(self, transforms, lengths=False, sample_rate=None, strict=True):
        self.transforms = list(transforms)
        self.lengths = bool(lengths)
        self.sample_rate = sample_rate
        self.strict = bool(strict)

    def __repr__(self):
        inner = ",\n    ".join(repr(t) for t in self.transforms)
        return f"stoker.audio.Compose([\n    {inner}\n], lengths={self.lengths})"

    def __call__(self, *args, **kw):
        raise TypeError("stoker.audio.Compose runs inside the loader's C workers; pass it to "
                        "stoker.Loader(transforms=...)")


def _flatten(obj, out):
    if isinstance(obj, _AudioOp):
        out.append(obj)
    elif isinstance(obj, Compose):
        for t in obj.transforms:
            _flatten(t, out)
    elif isinstance(obj, (list, tuple)):
        for t in obj:
            _flatten(t, out)
    elif _torchaudio.is_torch_container(obj):
        for t in _torchaudio.children(obj):
            _flatten(t, out)
    else:
        out.extend(globals()[name](*args, **kw)
                   for name, args, kw in _torchaudio.convert(obj, SUPPORTED))


def is_audio(transforms):
    """Whether `transforms` is an audio pipeline: a stoker.audio Compose or op, or a list /
    torch.nn.Sequential holding one, or a torchaudio transform."""
    if isinstance(transforms, (Compose, _AudioOp)) or _recipe(transforms):
        return True
    if isinstance(transforms, _core.Transform):
        return transforms.media == "audio"
    if _torchaudio.is_torchaudio(transforms):
        return True
    items = transforms if isinstance(transforms, (list, tuple)) else \
        _torchaudio.children(transforms) if _torchaudio.is_torch_container(transforms) else ()
    return any(is_audio(t) for t in items)


def compile(transforms, sample_rate=None, lengths=None, strict=None):
    """Build the C transform (stoker._core.Transform, media "audio") of `transforms`: a list or a
    torch.nn.Sequential of stoker.audio ops and torchaudio transforms, or a stoker.audio.Compose.
    Raises ValueError naming an op it cannot express."""
    if isinstance(transforms, _core.Transform):
        if transforms.media != "audio":
            raise _invalid("compile: this Transform is an image transform")
        return transforms
    ops = []
    if _recipe(transforms):
        dicts = _core.recipe_ops(_recipe(transforms))
    elif transforms is not None:
        _flatten(transforms, ops)
    if isinstance(transforms, Compose):
        lengths = transforms.lengths if lengths is None else lengths
        sample_rate = transforms.sample_rate if sample_rate is None else sample_rate
        strict = transforms.strict if strict is None else strict
    if sample_rate is not None:
        sample_rate = int(sample_rate)
        if sample_rate <= 0:
            raise _invalid(f"sample_rate must be a positive number of Hz, got {sample_rate}")
    if not _recipe(transforms):
        dicts = [op.to_dict() for op in ops]
    return _core.Transform(dicts, media="audio",
                           sample_rate=sample_rate or 0, lengths=bool(lengths),
                           strict=strict is None or bool(strict))

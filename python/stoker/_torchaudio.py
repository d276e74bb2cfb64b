"""torchaudio transform objects -> stoker.audio ops (stoker.audio.compile's conversion): each
object becomes the (class name, args, kwargs) of the stoker.audio op to build, so this module,
below stoker.audio, never imports it.

Each supported torchaudio class is read through the attributes its __init__ sets (torchaudio
0.13 to 2.x keep them), matched by class name, so the objects of a ``torch.nn.Sequential`` run
in stoker's C workers with the same parameters. A window tensor (Spectrogram.window) is
recognised by comparing it with torch's windows; anything else, and every other class, is
refused by name.
"""
from . import _core

_CONTAINERS = ("Sequential", "ModuleList", "Compose")


def _invalid(msg):
    return _core.StokerInvalidError(msg)


def is_torchaudio(obj):
    return type(obj).__module__.startswith("torchaudio")


def is_torch_container(obj):
    """torch.nn.Sequential / ModuleList, or a Compose-like object holding `transforms`."""
    name = type(obj).__name__
    mod = type(obj).__module__
    return name in _CONTAINERS and (mod.startswith("torch") or hasattr(obj, "transforms"))


def children(obj):
    if hasattr(obj, "transforms"):
        return list(obj.transforms)
    return list(obj)


def _window_of(tensor, n, what):
    """(window_fn name, wkwargs) whose window equals `tensor` (n values)."""
    import torch
    for name in ("hann_window", "hamming_window", "blackman_window"):
        fn = getattr(torch, name)
        for periodic in (True, False):
            w = fn(n, periodic=periodic, dtype=tensor.dtype)
            if tensor.shape == w.shape and torch.allclose(tensor.cpu(), w, atol=1e-6):
                return name, {"periodic": periodic}
    if torch.all(tensor == 1):
        return "ones", None
    raise _invalid(f"{what}: its window is not torch's hann, hamming or blackman window, nor "
                   "torch.ones: stoker cannot express a custom window")


def _stft_kwargs(spec, what):
    """The STFT arguments of a torchaudio Spectrogram module."""
    window_fn, wkwargs = _window_of(spec.window, spec.win_length, what)
    return dict(n_fft=spec.n_fft, win_length=spec.win_length, hop_length=spec.hop_length,
                pad=spec.pad, window_fn=window_fn, power=spec.power,
                normalized=spec.normalized, wkwargs=wkwargs, center=spec.center,
                pad_mode=spec.pad_mode, onesided=spec.onesided)


def _mel_kwargs(m, what):
    """MelSpectrogram's arguments from a torchaudio MelSpectrogram module."""
    kw = _stft_kwargs(m.spectrogram, what)
    if kw["power"] is None:
        raise _invalid(f"{what}: power=None (a complex spectrogram) is Spectrogram's only")
    scale = m.mel_scale
    kw.update(sample_rate=m.sample_rate, f_min=m.f_min, f_max=scale.f_max, n_mels=m.n_mels,
              norm=scale.norm, mel_scale=scale.mel_scale)
    return kw


def convert(t, supported):
    """The stoker.audio ops of one torchaudio transform, as a list of (class name, args,
    kwargs), or raise naming it."""
    name = type(t).__name__
    what = f"{type(t).__module__}.{name}"
    if not is_torchaudio(t):
        raise _invalid(f"transform {t!r} is not supported by stoker's audio pipeline; "
                       f"supported: torchaudio's {', '.join(n for n in supported if '.' not in n)}"
                       f" and stoker.audio's RandomCrop, CenterCrop, PadTo, Downmix")
    if name == "Resample":
        return [("Resample", (t.orig_freq, t.new_freq, t.resampling_method,
                              t.lowpass_filter_width, t.rolloff, t.beta), {})]
    if name == "Vol":
        return [("Vol", (t.gain, t.gain_type), {})]
    if name == "Spectrogram":
        return [("Spectrogram", (), _stft_kwargs(t, what))]
    if name == "MelSpectrogram":
        return [("MelSpectrogram", (), _mel_kwargs(t, what))]
    if name == "MFCC":
        mk = _mel_kwargs(t.MelSpectrogram, what)
        mk.pop("sample_rate")
        return [("MFCC", (t.sample_rate, t.n_mfcc, t.dct_type, t.norm, t.log_mels),
                 dict(melkwargs=mk, top_db=t.top_db))]
    if name == "AmplitudeToDB":
        return [("AmplitudeToDB", (t.stype, t.top_db), {})]
    if name == "TimeMasking":
        return [("TimeMasking", (t.mask_param, t.iid_masks, getattr(t, "p", 1.0)), {})]
    if name == "FrequencyMasking":
        if getattr(t, "p", 1.0) != 1.0:
            raise _invalid(f"{what}: p other than 1.0 is not supported")
        return [("FrequencyMasking", (t.mask_param, t.iid_masks), {})]
    if name == "TimeStretch":
        if t.fixed_rate is None:
            raise _invalid(f"{what} without fixed_rate takes its rate per call "
                           "(overriding_rate), which a loader cannot give: use "
                           "stoker.audio.TimeStretch(..., rate_range=(lo, hi)) for a rate drawn "
                           "per sample, or give fixed_rate")
        import math
        adv = t.phase_advance.reshape(-1)  # torch.linspace(0, pi * hop_length, n_freq)
        hop = round(float(adv[-1]) / math.pi) if len(adv) > 1 else 0
        return [("TimeStretch", (hop, len(adv), t.fixed_rate), {})]
    raise _invalid(f"transform {what} is not supported by stoker's audio pipeline; supported: "
                   f"torchaudio's {', '.join(n for n in supported if '.' not in n)} and "
                   f"stoker.audio's RandomCrop, CenterCrop, PadTo, Downmix")

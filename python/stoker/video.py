"""Video clips (docs/video.md): the clip options of stoker.Loader and their compilation.

A video sample is a clip of ``frames_per_clip`` frames of one video file, every
``frame_step``-th frame (or the frames shown at ``frame_rate`` per second, from the
container's timestamps), starting at a random position (training) or at ``clips_per_video``
evenly spaced positions (``clip_sampling="uniform"``: evaluation). The transforms are image
transforms (a torchvision ``Compose``, stoker ops) applied to every frame of a clip with one
set of parameters: one crop box, one flip, one ColorJitter draw per clip.

The batch's ``video`` field is uint8 ``[B, T, H, W, 3]`` when the transforms end in uint8 (no
ToTensor, ConvertImageDtype or Normalize) and float32 ``[B, 3, T, H, W]`` after them;
``video_pts`` (float64 ``[B, T]``) gives each frame's time in seconds.

    loader = stoker.Loader("kinetics/train", batch_size=8, frames_per_clip=16, frame_step=4,
                           transforms=T.Compose([T.Resize(256), T.RandomResizedCrop(224),
                                                 T.RandomHorizontalFlip(), T.ToTensor(),
                                                 T.Normalize(mean, std)]))
"""
from . import _core
from .transforms import _convert

__all__ = ["compile", "is_video"]

_SAMPLING = ("random", "uniform")
_SHORT = ("pad", "loop", "skip")


def is_video(frames_per_clip=None, frame_step=None, frame_rate=None, clips_per_video=None):
    """Whether the Loader's clip arguments ask for video."""
    return any(v is not None for v in (frames_per_clip, frame_step, frame_rate, clips_per_video))


def _positive(value, name, kind=int):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int) \
            or value <= 0:
        raise _core.StokerInvalidError(f"{name} must be a positive "
                                       f"{'number' if kind is float else 'integer'}, not "
                                       f"{value!r}")
    return kind(value)


def compile(transforms, frames_per_clip=None, frame_step=None, frame_rate=None,
            clips_per_video=None, clip_sampling=None, short_video="pad", strict=None,
            decoder_threads=0):
    """The C transform of a video loader: `transforms` (image transforms, or None for the
    frames as decoded; then the clip is uint8) on every frame of each clip.

    frames_per_clip: T (default 16); frame_step: every S-th frame (default 1), or frame_rate:
    frames at F per second by the container's timestamps (not both); clips_per_video: K samples
    per video and epoch (default 1); clip_sampling: "random" (the default; with K > 1 the K
    clips are K independent draws) or "uniform" (K evenly spaced clips, first and last
    included; the default when shuffle=False is asked by the Loader); short_video: a video
    shorter than its clip is "pad"ded with its last frame (default), "loop"ed from its first,
    or "skip": an error naming the record (on_error="skip" skips and counts it);
    decoder_threads: libavcodec's threads per clip (0, the default: the loader's thread plan)."""
    if frame_step is not None and frame_rate is not None:
        raise _core.StokerInvalidError("give frame_step or frame_rate, not both")
    T = _positive(frames_per_clip, "frames_per_clip") or 16
    step = _positive(frame_step, "frame_step") or 1
    rate = _positive(frame_rate, "frame_rate", float) or 0.0
    K = _positive(clips_per_video, "clips_per_video") or 1
    sampling = clip_sampling or "random"
    if sampling not in _SAMPLING:
        raise _core.StokerInvalidError(f"clip_sampling must be one of {_SAMPLING}, not "
                                       f"{sampling!r}")
    if short_video not in _SHORT:
        raise _core.StokerInvalidError(f"short_video must be one of {_SHORT}, not "
                                       f"{short_video!r}")
    if isinstance(transforms, _core.Transform):
        raise _core.StokerInvalidError("a video loader compiles its transforms itself: pass "
                                       "the Compose (or list of ops), not a prebuilt Transform")
    ops, dtype, exact = [], "uint8", False
    if transforms is not None:
        ops, dtype, _, exact, strict = _convert._ops_and_options(transforms, None, None, None,
                                                                 strict)
        raw = []
        _convert._flatten(transforms, raw)
        marked = any(isinstance(o, (_convert._DtypeMarker, _convert.Normalize)) for o in raw)
        if not marked and not (isinstance(transforms, _convert.Compose) and transforms.dtype):
            dtype = "uint8"  # the frames as they are: torchvision's read_video's uint8
    kw = dict(frames_per_clip=T, frame_step=step, frame_rate=rate, clips_per_video=K,
              clip_sampling=sampling, short_video=short_video, decoder_threads=decoder_threads)
    return _core.Transform([op.to_dict() for op in ops], dtype=dtype,
                           layout="NHWC" if dtype == "uint8" else "NCHW", exact=exact,
                           strict=strict is None or bool(strict), media="video", **kw)

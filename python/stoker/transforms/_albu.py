"""Albumentations spellings of stoker's ops, for the pipelines people copy from Albumentations::

    from stoker import albumentations as A

    train = A.Compose([A.Resize(256, 256), A.RandomCrop(224, 224), A.HorizontalFlip(),
                       A.Normalize(), A.ToTensorV2()])
    loader = stoker.Loader("train/", batch_size=64, transforms=train)

Each class takes Albumentations' arguments in Albumentations' order with its defaults and builds
the stoker op (``stoker.transforms``) that does the same; a real ``albumentations.Compose`` of
these classes converts too (matched by class name). They live in their own module because two
names clash with torchvision's: ``RandomCrop(224, 4)`` is a crop with padding 4 in torchvision
and a 224 x 4 crop here. This module sits below the converter (_convert, which reads an
albumentations pipeline through _from_albu) and above the op families it builds; the public
name is stoker.albumentations, which re-exports it. Differences from Albumentations (docs/images.md): resizing is PIL's
antialiased bilinear (Albumentations uses OpenCV's INTER_LINEAR, without antialiasing), and
``RandomCrop`` pads an image smaller than the crop with zeros where Albumentations raises.
"""
from . import _base, _compose, _geometry, _pixel, _warps

__all__ = ["Resize", "RandomCrop", "CenterCrop", "HorizontalFlip", "VerticalFlip", "Normalize",
           "Rotate", "ShiftScaleRotate", "ToTensorV2", "Compose"]

_LINEAR = (None, 1)  # cv2.INTER_LINEAR


def _check_p(p, what):
    if float(p) != 1.0:
        raise _base._invalid(f"{what}: p={p} is not supported (the op always applies)")


def _check_interp(interpolation, what):
    if interpolation not in _LINEAR:
        raise _base._invalid(f"{what}: only interpolation=cv2.INTER_LINEAR (1) is supported, got "
                          f"{interpolation!r}")


def Resize(height, width, interpolation=1, always_apply=False, p=1):
    """albumentations.Resize(height, width, interpolation=INTER_LINEAR, p=1)."""
    _check_interp(interpolation, "Resize")
    _check_p(p, "Resize")
    return _geometry.Resize((int(height), int(width)))


def RandomCrop(height, width, always_apply=False, p=1.0):
    """albumentations.RandomCrop(height, width, p=1): torchvision's RandomCrop((h, w))."""
    _check_p(p, "RandomCrop")
    return _geometry.RandomCrop((int(height), int(width)))


def CenterCrop(height, width, always_apply=False, p=1.0):
    """albumentations.CenterCrop(height, width, p=1)."""
    _check_p(p, "CenterCrop")
    return _geometry.CenterCrop((int(height), int(width)))


def HorizontalFlip(always_apply=False, p=0.5):
    """albumentations.HorizontalFlip(p=0.5)."""
    return _geometry.RandomHorizontalFlip(p)


def VerticalFlip(always_apply=False, p=0.5):
    """albumentations.VerticalFlip(p=0.5)."""
    return _geometry.RandomVerticalFlip(p)


def Normalize(mean=_base.IMAGENET_MEAN, std=_base.IMAGENET_STD, max_pixel_value=255.0,
              always_apply=False, p=1.0):
    """albumentations.Normalize(mean, std, max_pixel_value=255, p=1), whose defaults are the
    library's ImageNet constants (Albumentations' too): (x - mean * max) /
    (std * max) on 0..255 values, i.e. torchvision's Normalize on x / 255 with mean and std
    scaled by max_pixel_value / 255 (the same op for the default 255). Output float32."""
    _check_p(p, "Normalize")
    k = float(max_pixel_value) / 255.0
    mean = [float(m) * k for m in (mean if hasattr(mean, "__len__") else [mean])]
    std = [float(s) * k for s in (std if hasattr(std, "__len__") else [std])]
    return _pixel.Normalize(mean, std)


_BORDER_CONSTANT = 0  # cv2.BORDER_CONSTANT
_CV2_INTERP = {0: "nearest", 1: "bilinear"}  # cv2.INTER_NEAREST, INTER_LINEAR


def _warp_args(what, interpolation, border_mode, value):
    if border_mode != _BORDER_CONSTANT:
        raise _base._invalid(f"{what}: only border_mode=cv2.BORDER_CONSTANT (0) is supported (the "
                          f"fill is `value`), got {border_mode!r}")
    if interpolation not in _CV2_INTERP:
        raise _base._invalid(f"{what}: only interpolation=cv2.INTER_NEAREST (0) or INTER_LINEAR "
                          f"(1) is supported, got {interpolation!r}")
    return _CV2_INTERP[interpolation], (0 if value is None else value)


def _symmetric(limit, what, name):
    """Albumentations' limit (a number l: (-l, l), or a range) -> (lo, hi)."""
    if isinstance(limit, (int, float)):
        return (-abs(float(limit)), abs(float(limit)))
    lo, hi = (float(v) for v in limit)
    return (lo, hi)


def _maybe(op, p):
    """The op with probability p (RandomApply), or the op itself when p == 1."""
    return op if float(p) == 1.0 else _compose.RandomApply([op], p=float(p))


def Rotate(limit=90, interpolation=1, border_mode=4, value=None, mask_value=None,
           rotate_method="largest_box", crop_border=False, always_apply=False, p=0.5):
    """albumentations.Rotate(limit=90, interpolation=INTER_LINEAR, border_mode, value, p=0.5):
    torchvision's RandomRotation(limit) with fill `value`, applied with probability p.
    border_mode must be cv2.BORDER_CONSTANT (Albumentations' default, BORDER_REFLECT_101, is
    refused) and crop_border False. The rotation is PIL's (centre (w/2, h/2), PIL's bilinear),
    not OpenCV's."""
    interp, fill = _warp_args("Rotate", interpolation, border_mode, value)
    if crop_border:
        raise _base._invalid("Rotate: crop_border=True is not supported")
    return _maybe(_warps.RandomRotation(_symmetric(limit, "Rotate", "limit"), interp, fill=fill), p)


def ShiftScaleRotate(shift_limit=0.0625, scale_limit=0.1, rotate_limit=45, interpolation=1,
                     border_mode=4, value=None, mask_value=None, shift_limit_x=None,
                     shift_limit_y=None, rotate_method="largest_box", always_apply=False,
                     p=0.5):
    """albumentations.ShiftScaleRotate(shift_limit, scale_limit, rotate_limit, interpolation,
    border_mode, value, p=0.5): torchvision's RandomAffine(degrees=rotate_limit,
    translate=(shift_x, shift_y), scale=(1 - scale_limit, 1 + scale_limit)) with fill
    `value`, applied with probability p. Shifts must be symmetric (torchvision's translate) and
    are rounded to whole pixels as torchvision does; border_mode must be cv2.BORDER_CONSTANT."""
    interp, fill = _warp_args("ShiftScaleRotate", interpolation, border_mode, value)
    shifts = []
    for lim in (shift_limit if shift_limit_x is None else shift_limit_x,
                shift_limit if shift_limit_y is None else shift_limit_y):
        lo, hi = _symmetric(lim, "ShiftScaleRotate", "shift_limit")
        if lo != -hi:
            raise _base._invalid(f"ShiftScaleRotate: shift limits must be symmetric (-a, a) "
                              f"(torchvision's translate), got {lim!r}")
        shifts.append(hi)
    lo, hi = _symmetric(scale_limit, "ShiftScaleRotate", "scale_limit")
    return _maybe(_warps.RandomAffine(_symmetric(rotate_limit, "ShiftScaleRotate", "rotate_limit"),
                                  translate=tuple(shifts), scale=(1.0 + lo, 1.0 + hi),
                                  interpolation=interp, fill=fill), p)


class ToTensorV2(_compose._DtypeMarker):
    """albumentations.pytorch.ToTensorV2: HWC -> CHW without scaling: float32 after Normalize,
    else uint8 (the image's own dtype)."""

    dtype = None

    def __init__(self, transpose_mask=False, always_apply=True, p=1.0):
        pass


def Compose(transforms, p=1.0, **kw):
    """albumentations.Compose(transforms, p=1): a stoker Compose (bbox/keypoint params are
    refused)."""
    extra = {k: v for k, v in kw.items() if v is not None}
    if extra:
        raise _base._invalid(f"Compose: {', '.join(extra)} not supported (images only)")
    _check_p(p, "Compose")
    return _compose.Compose([_from_albu(t) for t in transforms])


def _from_albu(t):
    """One albumentations transform (matched by class name) or a stoker op -> a stoker op."""
    if isinstance(t, (_base.Op, _compose.Compose)):
        return t
    name = type(t).__name__
    if not type(t).__module__.startswith("albumentations"):
        raise _base._unsupported(repr(t))
    p = getattr(t, "p", 1.0)
    if name in ("Resize", "RandomCrop", "CenterCrop"):
        args = [t.height, t.width]
        if name == "Resize":
            return Resize(*args, interpolation=getattr(t, "interpolation", 1), p=p)
        return globals()[name](*args, p=p)
    if name in ("HorizontalFlip", "VerticalFlip"):
        return globals()[name](p=p)
    if name == "Normalize":
        return Normalize(t.mean, t.std, t.max_pixel_value, p=p)
    if name == "Rotate":  # Albumentations stores limit as a range
        return Rotate(t.limit, t.interpolation, t.border_mode, t.value,
                      crop_border=getattr(t, "crop_border", False), p=p)
    if name == "ShiftScaleRotate":  # ranges; scale_limit stored biased by 1
        scale = tuple(float(v) - 1.0 for v in t.scale_limit)
        return ShiftScaleRotate(0, scale, t.rotate_limit, t.interpolation, t.border_mode,
                                t.value, shift_limit_x=t.shift_limit_x,
                                shift_limit_y=t.shift_limit_y, p=p)
    if name == "ToTensorV2":
        return ToTensorV2()
    if name == "Compose":
        return Compose(t.transforms, p=p)
    raise _base._invalid(f"albumentations.{name} is not supported by stoker; supported: "
                      f"{', '.join(__all__)}")

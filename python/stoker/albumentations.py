"""Albumentations spellings of stoker's ops, for the pipelines people copy from Albumentations::

    from stoker import albumentations as A

    train = A.Compose([A.Resize(256, 256), A.RandomCrop(224, 224), A.HorizontalFlip(),
                       A.Normalize(), A.ToTensorV2()])
    loader = stoker.Loader("train/", batch_size=64, transforms=train)

Each class takes Albumentations' arguments in Albumentations' order with its defaults and builds
the stoker op (``stoker.transforms``) that does the same; a real ``albumentations.Compose`` of
these classes converts too (matched by class name). They live in their own module because two
names clash with torchvision's: ``RandomCrop(224, 4)`` is a crop with padding 4 in torchvision
and a 224 x 4 crop here. Differences from Albumentations (docs/images.md): resizing is PIL's
antialiased bilinear (Albumentations uses OpenCV's INTER_LINEAR, without antialiasing), and
``RandomCrop`` pads an image smaller than the crop with zeros where Albumentations raises.
"""
from . import transforms as _T

__all__ = ["Resize", "RandomCrop", "CenterCrop", "HorizontalFlip", "VerticalFlip", "Normalize",
           "ToTensorV2", "Compose"]

_LINEAR = (None, 1)  # cv2.INTER_LINEAR


def _check_p(p, what):
    if float(p) != 1.0:
        raise _T._invalid(f"{what}: p={p} is not supported (the op always applies)")


def _check_interp(interpolation, what):
    if interpolation not in _LINEAR:
        raise _T._invalid(f"{what}: only interpolation=cv2.INTER_LINEAR (1) is supported, got "
                          f"{interpolation!r}")


def Resize(height, width, interpolation=1, always_apply=False, p=1):
    """albumentations.Resize(height, width, interpolation=INTER_LINEAR, p=1)."""
    _check_interp(interpolation, "Resize")
    _check_p(p, "Resize")
    return _T.Resize((int(height), int(width)))


def RandomCrop(height, width, always_apply=False, p=1.0):
    """albumentations.RandomCrop(height, width, p=1): torchvision's RandomCrop((h, w))."""
    _check_p(p, "RandomCrop")
    return _T.RandomCrop((int(height), int(width)))


def CenterCrop(height, width, always_apply=False, p=1.0):
    """albumentations.CenterCrop(height, width, p=1)."""
    _check_p(p, "CenterCrop")
    return _T.CenterCrop((int(height), int(width)))


def HorizontalFlip(always_apply=False, p=0.5):
    """albumentations.HorizontalFlip(p=0.5)."""
    return _T.RandomHorizontalFlip(p)


def VerticalFlip(always_apply=False, p=0.5):
    """albumentations.VerticalFlip(p=0.5)."""
    return _T.RandomVerticalFlip(p)


def Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), max_pixel_value=255.0,
              always_apply=False, p=1.0):
    """albumentations.Normalize(mean, std, max_pixel_value=255, p=1): (x - mean * max) /
    (std * max) on 0..255 values, i.e. torchvision's Normalize on x / 255 with mean and std
    scaled by max_pixel_value / 255 (the same op for the default 255). Output float32."""
    _check_p(p, "Normalize")
    k = float(max_pixel_value) / 255.0
    mean = [float(m) * k for m in (mean if hasattr(mean, "__len__") else [mean])]
    std = [float(s) * k for s in (std if hasattr(std, "__len__") else [std])]
    return _T.Normalize(mean, std)


class ToTensorV2(_T._DtypeMarker):
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
        raise _T._invalid(f"Compose: {', '.join(extra)} not supported (images only)")
    _check_p(p, "Compose")
    return _T.Compose([_from_albu(t) for t in transforms])


def _from_albu(t):
    """One albumentations transform (matched by class name) or a stoker op -> a stoker op."""
    if isinstance(t, (_T.Op, _T.Compose)):
        return t
    name = type(t).__name__
    if not type(t).__module__.startswith("albumentations"):
        raise _T._unsupported(repr(t))
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
    if name == "ToTensorV2":
        return ToTensorV2()
    if name == "Compose":
        return Compose(t.transforms, p=p)
    raise _T._invalid(f"albumentations.{name} is not supported by stoker; supported: "
                      f"{', '.join(__all__)}")

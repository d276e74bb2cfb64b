"""The ops that warp the output-size image with PIL's affine transforms (C: src/xform/stk_warp.c):
RandomRotation, RandomAffine and the augmentation policies (TrivialAugmentWide, RandAugment,
AutoAugment). They share torchvision's ``interpolation`` (NEAREST or BILINEAR, PIL's numbers 0
and 2 in the C op) and ``fill`` (a number or one per channel, uint8 scale) arguments. Re-exported
by :mod:`stoker.transforms` (the package), which documents them."""
import math
import numbers

from ._base import Op, _fill, _invalid

_NEAREST, _BILINEAR = 0, 2


def _interp(interpolation, what, default=_NEAREST):
    """torchvision's InterpolationMode (or its value / PIL's number) -> 0 or 2."""
    if interpolation is None:
        return default
    name = getattr(interpolation, "value", interpolation)
    name = str(getattr(name, "name", name)).lower()
    if name in ("nearest", "0"):
        return _NEAREST
    if name in ("bilinear", "2"):
        return _BILINEAR
    raise _invalid(f"{what}: interpolation must be NEAREST or BILINEAR, got {interpolation}")


def _range(value, what, name):
    """torchvision's _setup_angle: a number d >= 0 -> (-d, d); a pair -> itself."""
    if isinstance(value, numbers.Number):
        if value < 0:
            raise _invalid(f"{what}: if {name} is a single number, it must be positive, got "
                           f"{value}")
        return (-float(value), float(value))
    vals = [float(v) for v in value]
    if len(vals) != 2:
        raise _invalid(f"{what}: {name} must be a number or (min, max), got {value!r}")
    return tuple(vals)


def _center(center, what):
    if center is None:
        return (math.nan, math.nan)
    vals = [float(v) for v in center]
    if len(vals) != 2:
        raise _invalid(f"{what}: center must be (x, y), got {center!r}")
    return tuple(vals)


class RandomRotation(Op):
    """torchvision.transforms.RandomRotation(degrees, interpolation=NEAREST, expand=False,
    center=None, fill=0): rotated by a uniform angle in degrees (counter-clockwise), as PIL's
    Image.rotate, on the output-size image (it must follow the crops, resizes and flips).
    NEAREST and BILINEAR; expand=True needs one angle (degrees=(a, a)), so that every sample
    has the same size."""

    _tv_args = ("degrees", "interpolation", "expand", "center", "fill")

    def __init__(self, degrees, interpolation=None, expand=False, center=None, fill=0):
        self.degrees = _range(degrees, "RandomRotation", "degrees")
        self.interpolation = _interp(interpolation, "RandomRotation")
        self.expand = bool(expand)
        self.center = _center(center, "RandomRotation")
        self.fill = _fill(fill, "RandomRotation")

    def _params(self):
        return {"degrees": self.degrees, "interpolation": self.interpolation,
                "expand": int(self.expand), "center": self.center, "fill": self.fill}

    def __eq__(self, other):  # center NaN (the image centre) equals itself
        return type(self) is type(other) and repr(self) == repr(other)


class RandomAffine(Op):
    """torchvision.transforms.RandomAffine(degrees, translate=None, scale=None, shear=None,
    interpolation=NEAREST, fill=0, center=None): a random rotation, translation (up to
    translate * size, rounded to whole pixels), scale and shear, as PIL's Image.transform on
    the output-size image (it must follow the crops, resizes and flips)."""

    _tv_args = ("degrees", "translate", "scale", "shear", "interpolation", "fill", "center")

    def __init__(self, degrees, translate=None, scale=None, shear=None, interpolation=None,
                 fill=0, center=None):
        what = "RandomAffine"
        self.degrees = _range(degrees, what, "degrees")
        self.translate = (0.0, 0.0) if translate is None else tuple(float(t) for t in translate)
        if len(self.translate) != 2 or not all(0 <= t <= 1 for t in self.translate):
            raise _invalid(f"{what}: translate must be (a, b) in [0, 1], got {translate!r}")
        self.scale = (1.0, 1.0) if scale is None else tuple(float(s) for s in scale)
        if len(self.scale) != 2 or not all(s > 0 for s in self.scale):
            raise _invalid(f"{what}: scale must be (a, b) with a, b > 0, got {scale!r}")
        if shear is None:
            self.shear = (0.0, 0.0, 0.0, 0.0)
        elif isinstance(shear, numbers.Number):
            self.shear = _range(shear, what, "shear") + (0.0, 0.0)
        else:
            vals = tuple(float(s) for s in shear)
            if len(vals) not in (2, 4):
                raise _invalid(f"{what}: shear must be a number, 2 or 4 numbers, got {shear!r}")
            self.shear = vals + (0.0, 0.0) if len(vals) == 2 else vals
        self.interpolation = _interp(interpolation, what)
        self.fill = _fill(fill, what)
        self.center = _center(center, what)

    def _params(self):
        return {"degrees": self.degrees, "translate": self.translate, "scale": self.scale,
                "shear": self.shear, "interpolation": self.interpolation, "fill": self.fill,
                "center": self.center}

    def __eq__(self, other):
        return type(self) is type(other) and repr(self) == repr(other)


class _Policy(Op):
    """A policy's warp arguments: interpolation (NEAREST, BILINEAR) and fill."""

    def _warp_args(self, interpolation, fill):
        self.interpolation = _interp(interpolation, type(self).__name__)
        self.fill = _fill(fill, type(self).__name__)

    def _params(self):
        return {"interpolation": self.interpolation, "fill": self.fill}


class TrivialAugmentWide(_Policy):
    """torchvision.transforms.TrivialAugmentWide(num_magnitude_bins=31, interpolation=NEAREST,
    fill=None): one op of its 14 at a random magnitude per sample, on the output-size image
    (warps as PIL's, NEAREST or BILINEAR, with fill)."""

    _tv_args = ("num_magnitude_bins", "interpolation", "fill")

    def __init__(self, num_magnitude_bins=31, interpolation=None, fill=None):
        self._warp_args(interpolation, fill)
        self.num_magnitude_bins = int(num_magnitude_bins)

    def _params(self):
        return {"num_magnitude_bins": self.num_magnitude_bins, **super()._params()}


class RandAugment(_Policy):
    """torchvision.transforms.RandAugment(num_ops=2, magnitude=9, num_magnitude_bins=31,
    interpolation=NEAREST, fill=None): num_ops random ops of its 14 at bin `magnitude`, on the
    output-size image (translations scale with it)."""

    _tv_args = ("num_ops", "magnitude", "num_magnitude_bins", "interpolation", "fill")

    def __init__(self, num_ops=2, magnitude=9, num_magnitude_bins=31, interpolation=None,
                 fill=None):
        self._warp_args(interpolation, fill)
        self.num_ops, self.magnitude = int(num_ops), int(magnitude)
        self.num_magnitude_bins = int(num_magnitude_bins)

    def _params(self):
        return {"num_ops": self.num_ops, "magnitude": self.magnitude,
                "num_magnitude_bins": self.num_magnitude_bins, **super()._params()}


class AutoAugment(_Policy):
    """torchvision.transforms.AutoAugment(policy=AutoAugmentPolicy.IMAGENET, interpolation=
    NEAREST, fill=None): one of the 25 ImageNet sub-policies per sample, each step applied with
    its probability, on the output-size image. CIFAR10/SVHN policies are refused."""

    _tv_args = ("policy", "interpolation", "fill")

    def __init__(self, policy=None, interpolation=None, fill=None):
        self._warp_args(interpolation, fill)
        name = str(getattr(policy, "value", policy) or "imagenet").lower()
        if name not in ("imagenet", "0"):
            raise _invalid(f"AutoAugment: only policy=AutoAugmentPolicy.IMAGENET is supported, "
                           f"got {policy}")
        self.policy = 0

    def _params(self):
        return {"policy": self.policy, **super()._params()}


class AugMix(_Policy):
    """torchvision.transforms.AugMix(severity=3, mixture_width=3, chain_depth=-1, alpha=1.0,
    all_ops=True, interpolation=BILINEAR, fill=None): the output-size image mixed with
    mixture_width chains of 1-3 (or chain_depth) random ops, Dirichlet/Beta weights drawn from
    the sample's stream, as torchvision's forward. Its warps are PIL's (torchvision runs AugMix on
    tensors: grid_sample), so warped chains differ from torchvision's by interpolation details
    (docs/images.md)."""

    _tv_args = ("severity", "mixture_width", "chain_depth", "alpha", "all_ops",
                "interpolation", "fill")

    def __init__(self, severity=3, mixture_width=3, chain_depth=-1, alpha=1.0, all_ops=True,
                 interpolation=None, fill=None):
        self.interpolation = _interp(interpolation, "AugMix", default=_BILINEAR)
        self.fill = _fill(fill, "AugMix")
        self.severity, self.mixture_width = int(severity), int(mixture_width)
        self.chain_depth, self.alpha, self.all_ops = int(chain_depth), float(alpha), bool(all_ops)

    def _params(self):
        return {"severity": self.severity, "mixture_width": self.mixture_width,
                "chain_depth": self.chain_depth, "alpha": self.alpha,
                "all_ops": int(self.all_ops), **super()._params()}

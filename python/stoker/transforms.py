"""Image transforms that run inside stoker's C workers (also importable as ``stoker.ops``).

The classes carry torchvision's names and parameters. They do not transform anything in
Python: :func:`compile` turns a list of them (or a torchvision ``transforms.Compose`` of the
supported torchvision classes) into one C transform (``stk_transform``) that the loader's
worker threads apply to every sample, fused with the image decode (JPEG, PNG, WebP, TIFF, BMP,
binary PPM/PGM)::

    import stoker
    from stoker import transforms as T

    train = T.Compose([T.RandomResizedCrop(96), T.RandomHorizontalFlip(),
                       T.ToTensor(), T.Normalize(T.IMAGENET_MEAN, T.IMAGENET_STD)])
    loader = stoker.Loader("train/", batch_size=64, transforms=train)

Supported ops (the C library's op table, ``SUPPORTED``): RandomResizedCrop, Resize, CenterCrop,
RandomHorizontalFlip, RandomVerticalFlip, ColorJitter, Normalize, Grayscale (3 channels),
RandomGrayscale, RandomInvert, RandomPosterize, RandomSolarize, RandomAdjustSharpness,
RandomAutocontrast, RandomEqualize, GaussianBlur, RandomCrop, Pad (zero fill) and
RandomErasing (on the output tensor, after Normalize), TrivialAugmentWide, RandAugment and
AutoAugment (IMAGENET policy), AugMix, RandomApply, RandomChoice and RandomOrder (of ops that
keep the size), RandomRotation and RandomAffine (PIL's warps, NEAREST or BILINEAR, with fill; after the
crops, resizes and flips), from ``torchvision.transforms``
or, where torchvision has it, ``torchvision.transforms.v2`` (matched by class name; the names
only v2 has are in ``V2_ONLY``). ToTensor,
PILToTensor, ConvertImageDtype and ToDtype only choose the output dtype (ToTensor: float32 in
[0, 1]; PILToTensor and v2's ToImage: uint8; ConvertImageDtype/ToDtype: that dtype, scaled as
torchvision scales it). Without any of them the output is float32. Output layout
is NCHW unless ``Compose(..., layout="NHWC")``. Resampling is bilinear with antialiasing
(PIL's, which is what torchvision uses on PIL images); other interpolation modes are refused.
Pixel ops (ColorJitter and the ops from Grayscale on) run on the output-size uint8 image, after
the geometric ops, whatever their place in the list. Randomness comes from the loader's (seed,
epoch, sample index), so augmentation is identical for any number of threads or ranks.
"""
import numbers

from . import _core

__all__ = [
    "RandomResizedCrop", "Resize", "CenterCrop", "RandomHorizontalFlip", "RandomVerticalFlip",
    "ColorJitter", "Normalize", "Grayscale", "RandomGrayscale", "RandomInvert",
    "RandomPosterize", "RandomSolarize", "RandomAdjustSharpness", "RandomAutocontrast",
    "RandomEqualize", "GaussianBlur", "RandomCrop", "Pad", "RandomErasing", "TrivialAugmentWide", "RandAugment",
    "AutoAugment", "RandomApply", "RandomChoice", "RandomOrder", "RandomRotation", "RandomAffine",
    "AugMix",
    "ToTensor", "PILToTensor", "ConvertImageDtype", "ToDtype",
    "Compose", "imagenet_train", "imagenet_val", "compile", "IMAGENET_MEAN", "IMAGENET_STD",
    "RECIPES", "SUPPORTED",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
RECIPES = ("imagenet-train", "imagenet-val")
# Python-side names: they choose the output dtype or group ops, and run no C op.
MARKERS = ("ToTensor", "PILToTensor", "ConvertImageDtype", "ToDtype", "Compose")
# What a transform list may hold: the C library's ops (its op table), then the markers.
SUPPORTED = tuple(_core.op_names()) + MARKERS


def _invalid(msg):
    return _core.StokerInvalidError(msg)


def _size2(size, what):
    """torchvision's size argument -> (h, w); an int (or a 1-sequence) means square."""
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        return (int(size), int(size))
    try:
        seq = [int(s) for s in size]
    except TypeError:
        raise _invalid(f"{what}: size must be an int or (h, w), got {size!r}") from None
    if len(seq) == 1:
        return (seq[0], seq[0])
    if len(seq) != 2:
        raise _invalid(f"{what}: size must be an int or (h, w), got {size!r}")
    return (seq[0], seq[1])


def _check_interpolation(interpolation, what):
    if interpolation is None:
        return
    name = getattr(interpolation, "name", None) or getattr(interpolation, "value", None) or \
        str(interpolation)
    if str(name).lower() not in ("bilinear", "2"):  # PIL.Image.BILINEAR == 2
        raise _invalid(f"{what}: only bilinear interpolation is supported, got {interpolation}")


class Op:
    """Base of the ops: each knows its torchvision name and its C parameters.

    A subclass named like a row of the C op table (``_core.op_names()``) is that op: its
    ``_params()`` keys are the row's parameter names (``_core.op_params(name)``), and
    ``from_torchvision`` builds it from a torchvision transform of the same class name by
    passing the attributes named in ``_tv_args`` to ``__init__``."""

    _tv_args = ()

    @classmethod
    def from_torchvision(cls, t):
        """This op from a torchvision transform of the same name (v1 or v2)."""
        return cls(*(getattr(t, a) for a in cls._tv_args))

    def _params(self):
        raise NotImplementedError

    def to_dict(self):
        """The op as the dict stoker._core.Transform takes."""
        d = {"kind": type(self).__name__}
        d.update(self._params())
        return d

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self._params().items())
        return f"{type(self).__name__}({args})"

    def __eq__(self, other):
        return type(self) is type(other) and self._params() == other._params()

    def __call__(self, *args, **kw):
        raise TypeError(f"stoker.transforms.{type(self).__name__} runs inside the loader's C "
                        "workers; pass it to stoker.Loader(transforms=...) instead of calling it")


class RandomResizedCrop(Op):
    """torchvision.transforms.RandomResizedCrop(size, scale, ratio): a random crop of area
    scale*image and aspect ratio in ratio (log-uniform), resized to size."""

    _tv_args = ("size", "scale", "ratio", "interpolation")

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0),
                 interpolation=None, antialias=None):
        _check_interpolation(interpolation, "RandomResizedCrop")
        self.size = _size2(size, "RandomResizedCrop")
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))

    def _params(self):
        return {"size": self.size, "scale": self.scale, "ratio": self.ratio}


class Resize(Op):
    """torchvision.transforms.Resize(size): an int resizes the shorter side to it (keeping the
    aspect ratio); (h, w) resizes to exactly that."""

    @classmethod
    def from_torchvision(cls, t):
        size = t.size
        if isinstance(size, (list, tuple)) and len(size) == 1:
            size = size[0]
        return cls(size, t.interpolation, getattr(t, "max_size", None))

    def __init__(self, size, interpolation=None, max_size=None, antialias=None):
        _check_interpolation(interpolation, "Resize")
        if max_size is not None:
            raise _invalid("Resize: max_size is not supported")
        if isinstance(size, numbers.Integral) and not isinstance(size, bool):
            self.size = (int(size), 0)
        else:
            seq = list(size)
            self.size = (int(seq[0]), 0) if len(seq) == 1 else _size2(seq, "Resize")

    def _params(self):
        return {"size": self.size}


class CenterCrop(Op):
    """torchvision.transforms.CenterCrop(size) (zero padding when the image is smaller)."""

    _tv_args = ("size",)

    def __init__(self, size):
        self.size = _size2(size, "CenterCrop")

    def _params(self):
        return {"size": self.size}


def _padding4(padding, what):
    """torchvision's padding: an int (all sides), (left/right, top/bottom) or (left, top, right,
    bottom) -> the four."""
    if padding is None:
        return (0, 0, 0, 0)
    if isinstance(padding, numbers.Integral):
        return (int(padding),) * 4
    seq = [int(v) for v in padding]
    if len(seq) == 1:
        return (seq[0],) * 4
    if len(seq) == 2:
        return (seq[0], seq[1], seq[0], seq[1])
    if len(seq) == 4:
        return tuple(seq)
    raise _invalid(f"{what}: padding must be an int or a sequence of 1, 2 or 4, got {padding!r}")


PADDING_MODES = ("constant", "edge", "reflect", "symmetric")  # the C op's 0..3


def _fill(fill, what):
    """torchvision's fill -> 3 floats in 0..255 (stoker._warps._fill)."""
    from ._warps import _fill as fill3
    return fill3(fill, what)


def _padding_mode(padding_mode, what):
    if padding_mode not in PADDING_MODES:
        raise _invalid(f"{what}: padding_mode must be one of {', '.join(PADDING_MODES)}, got "
                       f"{padding_mode!r}")
    return PADDING_MODES.index(padding_mode)


class RandomCrop(Op):
    """torchvision.transforms.RandomCrop(size, padding, pad_if_needed, fill, padding_mode): a
    crop of size at a uniform position, after padding with fill (a number or one per channel)
    or by padding_mode 'edge', 'reflect' or 'symmetric'."""

    _tv_args = ("size", "padding", "pad_if_needed", "fill", "padding_mode")

    def __init__(self, size, padding=None, pad_if_needed=False, fill=0,
                 padding_mode="constant"):
        self.size = _size2(size, "RandomCrop")
        self.padding = _padding4(padding, "RandomCrop")
        self.pad_if_needed = bool(pad_if_needed)
        self.fill = _fill(fill, "RandomCrop")
        self.padding_mode = _padding_mode(padding_mode, "RandomCrop")

    def _params(self):
        return {"size": self.size, "padding": self.padding,
                "pad_if_needed": int(self.pad_if_needed), "fill": self.fill,
                "padding_mode": self.padding_mode}


class Pad(Op):
    """torchvision.transforms.Pad(padding, fill, padding_mode): padding with fill (a number or
    one per channel) or by padding_mode 'edge', 'reflect' or 'symmetric'."""

    _tv_args = ("padding", "fill", "padding_mode")

    def __init__(self, padding, fill=0, padding_mode="constant"):
        self.padding = _padding4(padding, "Pad")
        self.fill = _fill(fill, "Pad")
        self.padding_mode = _padding_mode(padding_mode, "Pad")

    def _params(self):
        return {"padding": self.padding, "fill": self.fill, "padding_mode": self.padding_mode}


class _Flip(Op):
    """An op with one parameter, the probability p."""

    _tv_args = ("p",)

    def __init__(self, p=0.5):
        self.p = float(p)

    def _params(self):
        return {"p": self.p}


class RandomHorizontalFlip(_Flip):
    """torchvision.transforms.RandomHorizontalFlip(p): mirrored with probability p."""


class RandomVerticalFlip(_Flip):
    """torchvision.transforms.RandomVerticalFlip(p): upside down with probability p."""


class RandomInvert(_Flip):
    """torchvision.transforms.RandomInvert(p): 255 - x with probability p."""


class RandomAutocontrast(_Flip):
    """torchvision.transforms.RandomAutocontrast(p): each channel stretched to 0..255 with
    probability p."""


class RandomEqualize(_Flip):
    """torchvision.transforms.RandomEqualize(p): each channel's histogram equalized with
    probability p."""


class RandomGrayscale(_Flip):
    """torchvision.transforms.RandomGrayscale(p=0.1): gray (in all three channels) with
    probability p."""

    def __init__(self, p=0.1):
        super().__init__(p)


class Grayscale(Op):
    """torchvision.transforms.Grayscale(num_output_channels): stoker's images keep three
    channels, so only num_output_channels=3 is accepted (the gray value in each channel)."""

    _tv_args = ("num_output_channels",)

    def __init__(self, num_output_channels=1):
        self.num_output_channels = int(num_output_channels)

    def _params(self):
        return {"num_output_channels": self.num_output_channels}


class _ValueP(Op):
    """An op with one value (named by _value, converted by _conv) and a probability p."""

    _value, _conv = "", float

    @classmethod
    def from_torchvision(cls, t):
        return cls(getattr(t, cls._value), t.p)

    def __init__(self, value, p=0.5):
        self.value, self.p = type(self)._conv(value), float(p)

    def _params(self):
        return {self._value: self.value, "p": self.p}


class RandomPosterize(_ValueP):
    """torchvision.transforms.RandomPosterize(bits, p): keep the top `bits` bits of each value
    with probability p."""

    _value, _conv = "bits", int


class RandomSolarize(_ValueP):
    """torchvision.transforms.RandomSolarize(threshold, p): values >= threshold (uint8 scale)
    inverted with probability p."""

    _value = "threshold"


class RandomAdjustSharpness(_ValueP):
    """torchvision.transforms.RandomAdjustSharpness(sharpness_factor, p): blend with the 3x3
    smoothed image (0 blurs, 1 keeps, 2 sharpens) with probability p."""

    _value = "sharpness_factor"


class GaussianBlur(Op):
    """torchvision.transforms.GaussianBlur(kernel_size, sigma=(0.1, 2.0)): kernel_size an odd int
    or (x, y) = (width, height) as torchvision orders it; sigma a number or a (min, max) range
    drawn uniformly per sample."""

    _tv_args = ("kernel_size", "sigma")

    def __init__(self, kernel_size, sigma=(0.1, 2.0)):
        if isinstance(kernel_size, numbers.Number):
            kernel_size = (kernel_size, kernel_size)
        ks = [int(k) for k in kernel_size]
        self.kernel_size = (ks[0], ks[0]) if len(ks) == 1 else tuple(ks)
        if isinstance(sigma, numbers.Number):
            sigma = (sigma, sigma)
        sg = [float(v) for v in sigma]
        self.sigma = (sg[0], sg[0]) if len(sg) == 1 else tuple(sg)

    def _params(self):
        return {"kernel_size": self.kernel_size, "sigma": self.sigma}


def _jitter_amount(value, name, center):
    """ColorJitter's argument: a number v (the range center-v..center+v) or a symmetric
    (lo, hi) range around center, as torchvision stores it."""
    if value is None:
        return 0.0
    if isinstance(value, numbers.Number):
        return float(value)
    lo, hi = (float(v) for v in value)
    amount = (hi - lo) / 2.0
    if abs((lo + hi) / 2.0 - center) > 1e-9 or (center == 1.0 and lo < 0):
        raise _invalid(f"ColorJitter: {name}={value!r} is not a range symmetric around "
                       f"{center:g}; only symmetric ranges are supported")
    return amount


class ColorJitter(Op):
    """torchvision.transforms.ColorJitter(brightness, contrast, saturation, hue); applied in a
    random order per sample, on the output-size image."""

    _tv_args = ("brightness", "contrast", "saturation", "hue")

    def __init__(self, brightness=0, contrast=0, saturation=0, hue=0):
        self.brightness = _jitter_amount(brightness, "brightness", 1.0)
        self.contrast = _jitter_amount(contrast, "contrast", 1.0)
        self.saturation = _jitter_amount(saturation, "saturation", 1.0)
        self.hue = _jitter_amount(hue, "hue", 0.0)

    def _params(self):
        return {"brightness": self.brightness, "contrast": self.contrast,
                "saturation": self.saturation, "hue": self.hue}


class Normalize(Op):
    """torchvision.transforms.Normalize(mean, std) on the 0..1 scale, three channels."""

    _tv_args = ("mean", "std")

    def __init__(self, mean, std, inplace=False):
        mean, std = [float(m) for m in mean], [float(s) for s in std]
        if len(mean) == 1:
            mean = mean * 3
        if len(std) == 1:
            std = std * 3
        if len(mean) != 3 or len(std) != 3:
            raise _invalid("Normalize: mean and std need 1 or 3 values (RGB)")
        self.mean, self.std = tuple(mean), tuple(std)

    def _params(self):
        return {"mean": self.mean, "std": self.std}


# The ops that warp with PIL's affine transforms (RandomRotation, RandomAffine, the policies)
# live in _warps.py; they need Op and _invalid above.
from ._warps import (AugMix, AutoAugment, RandAugment, RandomAffine,  # noqa: E402
                     RandomRotation, TrivialAugmentWide)


class RandomErasing(Op):
    """torchvision.transforms.RandomErasing(p, scale, ratio, value): with probability p, a box
    of the output tensor (after Normalize, in its dtype and layout) set to value (a number or
    one per channel; value="random" is not supported). Must come after the other ops."""

    _tv_args = ("p", "scale", "ratio", "value")

    def __init__(self, p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0, inplace=False):
        if isinstance(value, str):
            raise _invalid(f"RandomErasing: value={value!r} is not supported; use a number or "
                           "one per channel")
        vals = [float(value)] if isinstance(value, numbers.Number) else [float(v) for v in value]
        if len(vals) not in (1, 3):
            raise _invalid(f"RandomErasing: value needs 1 or 3 numbers, got {value!r}")
        self.p = float(p)
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))
        self.value = tuple(vals * 3) if len(vals) == 1 else tuple(vals)

    def _params(self):
        return {"p": self.p, "scale": self.scale, "ratio": self.ratio, "value": self.value}


class _Container(Op):
    """An op over the ops listed in it (flattened after it, with their count)."""

    def __init__(self, transforms):
        self.transforms = list(transforms)
        self.n = 0  # set when flattened

    @classmethod
    def from_torchvision(cls, t):
        return cls(list(t.transforms), *cls._extra(t))

    def _params(self):
        return {"transforms": self.n}

    def __eq__(self, other):
        return type(self) is type(other) and self.transforms == other.transforms and \
            self._params() == other._params()


class RandomApply(_Container):
    """torchvision.transforms.RandomApply(transforms, p=0.5): all of them with probability p.
    The transforms must keep the image size (flips, pixel ops, policies, nested RandomApply)."""

    @staticmethod
    def _extra(t):
        return (t.p,)

    def __init__(self, transforms, p=0.5):
        super().__init__(transforms)
        self.p = float(p)

    def _params(self):
        return {"transforms": self.n, "p": self.p}


class RandomChoice(_Container):
    """torchvision.transforms.RandomChoice(transforms, p=None): one of them, uniformly (weights
    are refused; torchvision draws with Python's random module, stoker from the sample's
    stream). The transforms must be single ops that keep the image size."""

    @staticmethod
    def _extra(t):
        return (getattr(t, "p", None),)

    def __init__(self, transforms, p=None):
        if p is not None:
            raise _invalid("RandomChoice: weights (p) are not supported; only a uniform choice")
        super().__init__(transforms)


class RandomOrder(_Container):
    """torchvision.transforms.RandomOrder(transforms): all of them, in a random order per sample
    (torchvision shuffles with Python's random module, stoker from the sample's stream). Each
    transform must be one op that keeps the image size, and warps (RandomRotation,
    RandomAffine) cannot be mixed with flips."""

    @staticmethod
    def _extra(t):
        return ()


class _DtypeMarker(Op):
    """An op that only chooses the output dtype."""
    dtype = "float32"

    def _params(self):
        return {"dtype": self.dtype}

    def to_dict(self):
        return None


class ToTensor(_DtypeMarker):
    """Output float32 in [0, 1] (torchvision.transforms.ToTensor)."""
    dtype = "float32"


class PILToTensor(_DtypeMarker):
    """Output uint8 0..255 (torchvision.transforms.PILToTensor)."""
    dtype = "uint8"


def _dtype_name(dtype):
    name = str(dtype)
    if name.startswith("torch."):
        name = name[6:]
    return {"float": "float32", "half": "float16", "double": "float64"}.get(name, name)


class ConvertImageDtype(_DtypeMarker):
    """Output `dtype` (torchvision.transforms.ConvertImageDtype): float32, float16 or
    bfloat16 scaled to [0, 1], or uint8."""

    _tv_args = ("dtype",)

    def __init__(self, dtype):
        self.dtype = _dtype_name(dtype)
        if self.dtype not in ("uint8", "float32", "float16", "bfloat16"):
            raise _invalid(f"{type(self).__name__}: output dtype must be uint8, float32, "
                           f"float16 or bfloat16, got {dtype}")


class ToDtype(ConvertImageDtype):
    """Output `dtype` (uint8, float32, float16 or bfloat16); floats are scaled to [0, 1]."""

    @classmethod
    def from_torchvision(cls, t):
        """torchvision.transforms.v2.ToDtype(dtype, scale): the image's dtype, scaled."""
        dtype = t.dtype
        if isinstance(dtype, dict):  # {tv_tensors.Image: dtype, "others": ...}
            image = [v for k, v in dtype.items() if getattr(k, "__name__", k) == "Image"]
            dtype = image[0] if image else dtype.get("others")
        if dtype is None:
            raise _invalid(f"ToDtype: no dtype for images in {t.dtype!r}")
        if not getattr(t, "scale", True) and _dtype_name(dtype) != "uint8":
            raise _invalid("ToDtype(scale=False) is not supported: stoker scales floats to "
                           "[0, 1]; use ToDtype(dtype, scale=True)")
        return cls(dtype)


class Compose:
    """A list of ops plus output options: dtype (None = from the markers, else float32),
    layout "NCHW" or "NHWC", exact (decode at full scale, no DCT-domain downscaling) and strict
    (the default: a JPEG that libjpeg reports as corrupt fails its record, as PIL would reject
    it; strict=False keeps libjpeg's recovery, grey or smeared blocks, as before)."""

    def __init__(self, transforms, dtype=None, layout="NCHW", exact=False, strict=True):
        self.transforms = list(transforms)
        self.dtype = None if dtype is None else _dtype_name(dtype)
        self.layout = layout
        self.exact = bool(exact)
        self.strict = bool(strict)

    def __repr__(self):
        inner = ",\n    ".join(repr(t) for t in self.transforms)
        return f"Compose([\n    {inner}\n], dtype={self.dtype!r}, layout={self.layout!r})"

    def __call__(self, *args, **kw):
        raise TypeError("stoker.transforms.Compose runs inside the loader's C workers; pass it "
                        "to stoker.Loader(transforms=...)")


def imagenet_train(size=224, dtype="float32"):
    """torchvision's ImageNet training recipe: RandomResizedCrop(size) + RandomHorizontalFlip +
    Normalize(ImageNet mean/std). With size=224 this is the C recipe "imagenet-train"."""
    return Compose([RandomResizedCrop(size), RandomHorizontalFlip(), ToTensor(),
                    Normalize(IMAGENET_MEAN, IMAGENET_STD)], dtype=dtype)


def imagenet_val(size=224, resize=None, dtype="float32"):
    """torchvision's ImageNet evaluation recipe: Resize(resize) + CenterCrop(size) + Normalize;
    resize defaults to size * 256 / 224 (256 for 224)."""
    resize = int(round(size * 256 / 224)) if resize is None else resize
    return Compose([Resize(resize), CenterCrop(size), ToTensor(),
                    Normalize(IMAGENET_MEAN, IMAGENET_STD)], dtype=dtype)


# compile() and the conversion of torchvision / v2 / albumentations objects into the ops above
# live in _convert.py; these names stay importable from here.
from ._convert import (V2_ONLY, _BY_TV_NAME, _flatten, _from_torchvision,  # noqa: E402,F401
                       _ops_and_options, _unsupported, compile, compile_for_device)


# Batch transforms (Loader(..., batch_transforms=...)): they run in C on each complete batch.
# RandomChoice is the per-sample op above; a RandomChoice of MixUp/CutMix given as
# batch_transforms= is read by _batchmap by its members.
from ._batchmap import CutMix, MixUp  # noqa: E402

__all__ += ["MixUp", "CutMix"]

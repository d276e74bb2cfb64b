"""The pixel ops (on the output-size uint8 image, after the geometry) and the tensor ops:
RandomInvert, RandomAutocontrast, RandomEqualize, (Random)Grayscale, RandomPosterize,
RandomSolarize, RandomAdjustSharpness, GaussianBlur, ColorJitter, Normalize, RandomErasing."""
import numbers

from ._base import Op, _Flip, _invalid

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

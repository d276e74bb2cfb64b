"""The geometry ops, folded by the C planner into one mapping per axis: RandomResizedCrop,
Resize, CenterCrop, RandomCrop, Pad (every padding_mode) and the flips."""
import numbers

from ._base import Op, _Flip, _check_interpolation, _fill, _invalid, _size2

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


class RandomHorizontalFlip(_Flip):
    """torchvision.transforms.RandomHorizontalFlip(p): mirrored with probability p."""


class RandomVerticalFlip(_Flip):
    """torchvision.transforms.RandomVerticalFlip(p): upside down with probability p."""

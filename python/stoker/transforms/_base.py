"""The base every transform op builds on: the Op class (torchvision name + C parameters), the
shared argument checks, the recipe names and constants (the C library's), and SUPPORTED (the C op table plus the
Python-side markers). The op families (_geometry, _pixel, _compose, _warps) import from here;
nothing here imports them."""
import numbers

from .. import _core

# The library's (include/stoker.h: STK_IMAGENET_MEAN/STD, the recipes of stk_transform_recipe).
IMAGENET_MEAN = _core.IMAGENET_MEAN
IMAGENET_STD = _core.IMAGENET_STD
# The image recipes (the audio ones, "kws-train" and "kws-val", are stoker.audio.RECIPES).
RECIPES = tuple(n for n in _core.recipes()
                if _core.recipe_ops(n)[0]["kind"] not in _core.op_names("audio"))
# Python-side names: they choose the output dtype or group ops, and run no C op.
MARKERS = ("ToTensor", "PILToTensor", "ConvertImageDtype", "ToDtype", "Compose")
# What a transform list may hold: the C library's ops (its op table), then the markers.
SUPPORTED = tuple(_core.op_names()) + MARKERS


def _invalid(msg):
    return _core.StokerInvalidError(msg)


def _unsupported(what):
    return _invalid(f"transform {what} is not supported by stoker; supported: "
                    f"{', '.join(SUPPORTED)} (torchvision's, v1 or v2, or stoker.transforms'), "
                    f"or a recipe name ({', '.join(RECIPES)})")


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


class _Flip(Op):
    """An op with one parameter, the probability p (the flips and the p-only pixel ops)."""

    _tv_args = ("p",)

    def __init__(self, p=0.5):
        self.p = float(p)

    def _params(self):
        return {"p": self.p}


def _fill(fill, what):
    """torchvision's fill (None, a number, or one per channel; v2: a dict by type) -> 3
    floats in 0..255."""
    if isinstance(fill, dict):  # v2: {tv_tensors.Image: fill, "others": ...}
        image = [v for k, v in fill.items() if getattr(k, "__name__", k) == "Image"]
        fill = image[0] if image else fill.get("others")
    if fill is None:
        fill = 0
    vals = [float(fill)] if isinstance(fill, numbers.Number) else [float(v) for v in fill]
    if len(vals) == 1:
        vals *= 3
    if len(vals) != 3 or not all(0 <= v < 256 for v in vals):
        raise _invalid(f"{what}: fill must be a number or 3 numbers in 0..255, got {fill!r}")
    return tuple(vals)

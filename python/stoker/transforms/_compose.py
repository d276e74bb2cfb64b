"""What groups ops or chooses the output: the containers (RandomApply, RandomChoice,
RandomOrder), the dtype markers (ToTensor, PILToTensor, ConvertImageDtype, ToDtype), Compose,
and the library's recipes (torchvision's two ImageNet recipes) as ops: their ops, defaults and
the ImageNet constants come from the C library (stk_recipe_op), sizes may be changed here."""
from .. import _core
from . import _geometry, _pixel
from ._base import Op, _invalid

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
    layout "NCHW" or "NHWC", exact (True: decode at full scale with PIL's IDCT and chroma
    upsampling, the closest to torchvision; False: the fast decode; None, the default: exact
    when no op is random, as for an evaluation transform, else fast) and strict (the default:
    a JPEG that libjpeg reports as corrupt fails its record, as PIL would reject it;
    strict=False keeps libjpeg's recovery, grey or smeared blocks, as before)."""

    def __init__(self, transforms, dtype=None, layout="NCHW", exact=None, strict=True):
        self.transforms = list(transforms)
        self.dtype = None if dtype is None else _dtype_name(dtype)
        self.layout = layout
        self.exact = None if exact is None else bool(exact)
        self.strict = bool(strict)

    def __repr__(self):
        inner = ",\n    ".join(repr(t) for t in self.transforms)
        return f"Compose([\n    {inner}\n], dtype={self.dtype!r}, layout={self.layout!r})"

    def __call__(self, *args, **kw):
        raise TypeError("stoker.transforms.Compose runs inside the loader's C workers; pass it "
                        "to stoker.Loader(transforms=...)")


def recipe(name, sizes=None, dtype="float32"):
    """The library's recipe `name` ("imagenet-train", "imagenet-val": _core.recipe_ops, the ops
    stk_transform_recipe compiles) as a Compose of ops, with `sizes` ({op name: size}) in place of
    those ops' sizes, and ToTensor before its Normalize."""
    ops = []
    for d in _core.recipe_ops(name):
        params = dict(d)
        kind = params.pop("kind")
        if sizes and kind in sizes:
            params["size"] = sizes[kind]
        elif kind == "Resize" and params["size"][1] == 0:  # the C op's "shorter side"
            params["size"] = params["size"][0]
        if kind == "Normalize":
            ops.append(ToTensor())
        cls = getattr(_geometry, kind, None) or getattr(_pixel, kind)
        ops.append(cls(**params))
    return Compose(ops, dtype=dtype)


def imagenet_train(size=224, dtype="float32"):
    """torchvision's ImageNet training recipe: RandomResizedCrop(size) + RandomHorizontalFlip +
    Normalize(ImageNet mean/std): the library's recipe "imagenet-train" (the same with
    size=224)."""
    return recipe("imagenet-train", {"RandomResizedCrop": size}, dtype)


def imagenet_val(size=224, resize=None, dtype="float32"):
    """torchvision's ImageNet evaluation recipe: Resize(resize) + CenterCrop(size) + Normalize;
    resize defaults to size * 256 / 224 (256 for 224): the library's recipe "imagenet-val" (the
    same with size=224)."""
    resize = int(round(size * 256 / 224)) if resize is None else resize
    return recipe("imagenet-val", {"Resize": resize, "CenterCrop": size}, dtype)

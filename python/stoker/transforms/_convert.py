"""The conversion behind stoker.transforms.compile: torchvision transforms (v1 and v2, matched
by class name), albumentations objects, stoker Compose objects and lists, flattened into the ops
of the op families (_geometry, _pixel, _compose, _warps), and those ops built into one C
transform (stoker._core.Transform). It sits above the families and imports them; the package's
__init__ re-exports compile and compile_for_device.
"""
import sys

from .. import _core
from . import _compose, _geometry, _pixel, _warps
from . import _albu
from ._base import RECIPES, SUPPORTED, Op, _invalid, _unsupported
from ._compose import (Compose, ConvertImageDtype, PILToTensor, RandomChoice, RandomOrder,
                       _Container, _DtypeMarker, _dtype_name)
from ._pixel import Normalize, RandomErasing

# torchvision class name -> the stoker class that converts it: every supported name but Compose
# (v1 and v2 alike), then the names only torchvision.transforms.v2 has (None: nothing to do).
_FAMILIES = (_geometry, _pixel, _compose, _warps)
_BY_TV_NAME = {name: next((getattr(m, name) for m in _FAMILIES if hasattr(m, name)), None)
               for name in SUPPORTED if name != "Compose"}
V2_ONLY = {
    "ToImage": PILToTensor,        # v2 (0.16+): a uint8 tv_tensors.Image
    "ToImageTensor": PILToTensor,  # v2 (0.15)
    "ConvertDtype": ConvertImageDtype,  # v2 (0.15)
    "ToPureTensor": None,          # unwraps tv_tensors
}
_BY_TV_NAME.update(V2_ONLY)


# torchvision transforms after which the image is a tensor, and those that resize it
_TO_TENSOR = ("ToTensor", "PILToTensor", "ToImage", "ToImageTensor", "ConvertImageDtype",
              "ConvertDtype", "ToDtype")
_RESIZING = ("Resize", "RandomResizedCrop")


def _tensor_antialias(t):
    """Whether torchvision's resize `t` antialiases a tensor: antialias=True; None (0.14) or
    "warn" (0.15, 0.16) mean False before torchvision 0.17 and True from it."""
    a = getattr(t, "antialias", None)
    if isinstance(a, bool):
        return a
    version = getattr(sys.modules.get("torchvision"), "__version__", "0.17")
    try:
        return tuple(int(x) for x in version.split("+")[0].split(".")[:2]) >= (0, 17)
    except ValueError:
        return True


def _check_tensor_resizes(transforms):
    """A resize after the image became a tensor (ToTensor, then Resize) is torchvision's
    tensor resize, which does not antialias unless asked to (before 0.17): stoker's resampling
    always does (PIL's), so such a transform is refused (the DataLoader's pixels, or a Python
    fallback, not a silently blurrier image: up to 129 grey levels apart)."""
    tensor = False
    for sub in transforms:
        name = type(sub).__name__
        if name == "Compose":
            tensor = _check_tensor_resizes(sub.transforms) or tensor
        elif name in _TO_TENSOR:
            tensor = True
        elif tensor and name in _RESIZING and not _tensor_antialias(sub):
            raise _invalid(f"{name} after the image became a tensor resizes without "
                           f"antialiasing in this torchvision (antialias="
                           f"{getattr(sub, 'antialias', None)!r}), while stoker's resampling "
                           f"antialiases as PIL's does; put {name} before ToTensor, or pass "
                           f"antialias=True")
    return tensor


def _from_torchvision(t):
    """One torchvision transform (torchvision.transforms or .v2, matched by class name) ->
    stoker ops (a list), or raise naming it and the supported list."""
    name = type(t).__name__
    if name == "Compose":
        _check_tensor_resizes(t.transforms)
        out = []
        for sub in t.transforms:
            out.extend(_from_torchvision(sub) if not isinstance(sub, Op) else [sub])
        return out
    if name not in _BY_TV_NAME:
        raise _unsupported(f"{type(t).__module__}.{name}")
    cls = _BY_TV_NAME[name]
    if cls is None:  # v2's ToPureTensor: nothing to do here
        return []
    op = cls.from_torchvision(t)
    if isinstance(op, _Container):  # its transforms: torchvision's, converted
        op.transforms = [s if isinstance(s, Op) else _Compose1(_from_torchvision(s))
                         for s in op.transforms]
    return [op]


def _Compose1(ops):
    """Converted ops of one torchvision transform: the op itself, or a Compose of several."""
    return ops[0] if len(ops) == 1 else Compose(ops)


def _flatten(obj, out):
    if isinstance(obj, _Container):
        out.append(obj)
        start = len(out)
        for t in obj.transforms:
            before = len(out)
            _flatten(t, out)
            if isinstance(obj, (RandomChoice, RandomOrder)) and len(out) - before != 1:
                raise _invalid(f"{type(obj).__name__}: each of its transforms must be one op")
        obj.n = len(out) - start
        if any(isinstance(o, _DtypeMarker) for o in out[start:]):
            raise _invalid(f"{type(obj).__name__}: dtype markers (ToTensor ...) cannot be inside")
    elif isinstance(obj, Op):
        out.append(obj)
    elif isinstance(obj, Compose):
        for t in obj.transforms:
            _flatten(t, out)
    elif isinstance(obj, (list, tuple)):
        for t in obj:
            _flatten(t, out)
    elif type(obj).__module__.startswith("torchvision"):
        for op in _from_torchvision(obj):  # containers flatten their transforms after them
            _flatten(op, out)
    elif type(obj).__module__.startswith("albumentations"):
        _flatten(_albu._from_albu(obj), out)
    else:
        raise _unsupported(repr(obj))


def _ops_and_options(transforms, dtype, layout, exact, strict=None):
    """(ops without dtype markers, output dtype, layout, exact, strict) of a list of ops, a
    stoker Compose or a torchvision Compose."""
    ops = []
    _flatten(transforms, ops)
    if isinstance(transforms, Compose):
        dtype = dtype if dtype is not None else transforms.dtype
        layout = layout if layout is not None else transforms.layout
        exact = exact if exact is not None else transforms.exact
        strict = strict if strict is not None else transforms.strict
    out_dtype = None
    normalized = any(isinstance(op, Normalize) for op in ops)
    for op in ops:
        if isinstance(op, _DtypeMarker):  # dtype None (ToTensorV2): keeps the data's type
            out_dtype = op.dtype or ("float32" if normalized else "uint8")
    if dtype is not None:
        out_dtype = _dtype_name(dtype)
    ops = [op for op in ops if not isinstance(op, _DtypeMarker)]
    if not ops:
        raise _invalid("the transform has no ops; its output size must be fixed by "
                       "RandomResizedCrop, CenterCrop or Resize((h, w))")
    strict = strict is None or bool(strict)
    return ops, out_dtype or "float32", layout or "NCHW", _exact(exact), strict


def _exact(exact):
    """exact as the C layer takes it: None (decide by the ops: exact when none draws from the
    sample's random stream, an evaluation transform), True or False."""
    return None if exact is None else bool(exact)


def _recipe(name):
    key = name.replace("_", "-").lower()
    if key not in RECIPES:
        raise _invalid(f"unknown transform recipe {name!r} (known: {', '.join(RECIPES)})")
    return key


def _recipe_compose(key):
    """The ops of recipe `key` (from _recipe) as a Compose: the library's (stk_recipe_op)."""
    return _compose.recipe(key)


def compile(transforms, dtype=None, layout=None, exact=None, strict=None):
    """Build the C transform for `transforms`: a recipe name ("imagenet-train",
    "imagenet-val"), a list of ops, a stoker Compose, or a torchvision Compose of supported
    transforms. Returns a stoker._core.Transform (its .output gives dtype and shape), or None
    for None. strict (default True, or the Compose's): a JPEG that libjpeg reports as corrupt
    fails its record; strict=False keeps libjpeg's lenient recovery. exact (default None, or the
    Compose's): None decodes exactly when no op is random (an evaluation transform: Resize,
    CenterCrop, Pad, Grayscale, Normalize, ToTensor) and fast otherwise (training); True or
    False forces it (docs/images.md "Exact by default")."""
    if transforms is None:
        return None
    if isinstance(transforms, _core.Transform):
        if strict is not None and bool(strict) != transforms.strict:
            raise _invalid(f"the prebuilt Transform has strict={transforms.strict}; compile "
                           f"it with strict={bool(strict)} instead")
        if exact is not None and bool(exact) != transforms.exact:
            raise _invalid(f"the prebuilt Transform has exact={transforms.exact}; compile "
                           f"it with exact={bool(exact)} instead")
        return transforms
    if isinstance(transforms, str):
        name = _recipe(transforms)
        if dtype in (None, "float32") and layout in (None, "NCHW") and strict in (None, True):
            return _core.Transform(name, exact=_exact(exact))
        transforms = _recipe_compose(name)
    ops, out_dtype, layout, exact, strict = _ops_and_options(transforms, dtype, layout, exact,
                                                             strict)
    return _core.Transform([op.to_dict() for op in ops], dtype=out_dtype, layout=layout,
                           exact=exact, strict=strict)


def compile_for_device(transforms, strict=None, exact=None):
    """Compile `transforms` for a loader that copies to a GPU: (the C transform, None). When
    the output is floating point and Normalize (if any) is the last op, the transform is built
    with finish="device": its CPU part stops at uint8 [H, W, 3] (4x fewer bytes to copy) and the
    loader finishes on the device: layout, (x / 255 - mean) / std and the cast, as the CPU store
    would have done. Otherwise (uint8 output, a prebuilt Transform) nothing is split."""
    if transforms is None or isinstance(transforms, _core.Transform):
        return compile(transforms, strict=strict, exact=exact), None
    if isinstance(transforms, str):
        transforms = _recipe_compose(_recipe(transforms))
    ops, out_dtype, layout, exact, strict = _ops_and_options(transforms, None, None, exact,
                                                             strict)
    norms = [i for i, op in enumerate(ops) if isinstance(op, Normalize)]
    erasing = any(isinstance(op, RandomErasing) for op in ops)  # works on the finished tensor
    if out_dtype == "uint8" or erasing or len(norms) > 1 or \
            (norms and norms[0] != len(ops) - 1):
        return compile(transforms, strict=strict, exact=exact), None
    if len(ops) == len(norms):
        return compile(transforms, strict=strict, exact=exact), None
    core = _core.Transform([op.to_dict() for op in ops], dtype=out_dtype, layout=layout,
                           exact=exact, finish="device", strict=strict)
    return core, None

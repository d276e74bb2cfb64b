"""Batch transforms (MixUp, CutMix, RandomChoice of them) and Loader(map=fn): the Python side.

The batch transforms run in C (src/batch/stk_batchops.c) on each complete batch; these classes
only carry their parameters. ``map=`` runs a Python function on stoker's worker threads
(python/stoker/_ext/_map.c); :class:`MapRunner` is what those threads call.
"""
import collections
import numbers
import time

import numpy as np

from . import _core

_MIXUP, _CUTMIX = 1, 2  # stk_batch_op_kind


def _check_batch_params(alpha, num_classes, what):
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not alpha > 0:
        raise _core.StokerInvalidError(f"{what}: alpha should be a number > 0, got {alpha!r}")
    if (isinstance(num_classes, bool) or not isinstance(num_classes, numbers.Integral)
            or num_classes < 2):
        raise _core.StokerInvalidError(f"{what}: num_classes should be an integer >= 2, got "
                                       f"{num_classes!r}")
    return float(alpha), int(num_classes)


class MixUp:
    """MixUp(alpha=1.0, num_classes=...) as torchvision.transforms.v2.MixUp: one lambda ~
    Beta(alpha, alpha) per batch; images and one-hot labels become lambda * x + (1 - lambda) *
    x rolled by one along the batch. Pass it in ``Loader(..., batch_transforms=[...])``; labels
    come out float32 [B, num_classes]. Needs float32 images (end the transforms with
    ToTensor/Normalize)."""
    kind = _MIXUP

    def __init__(self, alpha=1.0, num_classes=None, *, labels_getter="default"):
        if labels_getter != "default":
            raise _core.StokerInvalidError(f"{type(self).__name__}: labels_getter is not "
                                           "supported (stoker reads Loader(label_field=...))")
        self.alpha, self.num_classes = _check_batch_params(alpha, num_classes,
                                                           type(self).__name__)

    def __repr__(self):
        return f"{type(self).__name__}(alpha={self.alpha}, num_classes={self.num_classes})"


class CutMix(MixUp):
    """CutMix(alpha=1.0, num_classes=...) as torchvision.transforms.v2.CutMix: one lambda ~
    Beta(alpha, alpha) per batch; a box of area about (1 - lambda) around a uniform pixel takes
    the pixels of the batch rolled by one; labels mix with 1 - box area / image area."""
    kind = _CUTMIX


class RandomChoice:
    """RandomChoice([MixUp(...), CutMix(...)]): one of the batch transforms per batch, chosen
    uniformly from the batch's random stream (torchvision's RandomChoice with p=None)."""

    def __init__(self, transforms, p=None):
        self.transforms = list(transforms)
        self.p = p
        if not self.transforms:
            raise _core.StokerInvalidError("RandomChoice needs at least one transform")

    def __repr__(self):
        return f"RandomChoice({self.transforms!r})"


def _batch_op(t):
    name = type(t).__name__
    if name not in ("MixUp", "CutMix"):
        raise _core.StokerNotSupportedError(
            f"batch transform {t!r} is not supported (stoker has MixUp, CutMix and a "
            "RandomChoice of them)")
    alpha, num_classes = _check_batch_params(getattr(t, "alpha", None),
                                             getattr(t, "num_classes", None), name)
    return (_MIXUP if name == "MixUp" else _CUTMIX, alpha), num_classes


def batch_ops_args(batch_transforms):
    """The C loader's keyword arguments for `batch_transforms` (a MixUp/CutMix, a RandomChoice
    of them, or a list of these applied in turn), from stoker's or torchvision.transforms.v2's
    classes."""
    if batch_transforms is None:
        return {}
    items = batch_transforms
    if type(items).__name__ in ("RandomChoice", "MixUp", "CutMix"):
        items = [items]
    elif type(items).__name__ == "Compose":
        items = list(items.transforms)
    items = list(items)
    choice = False
    if len(items) == 1 and type(items[0]).__name__ == "RandomChoice":
        rc = items[0]
        p = getattr(rc, "p", None)
        if p is not None and len(set(float(x) for x in p)) > 1:
            raise _core.StokerNotSupportedError("RandomChoice of batch transforms: only equal "
                                                f"probabilities are supported, got p={p}")
        items, choice = list(rc.transforms), True
    ops, classes = [], set()
    for t in items:
        op, k = _batch_op(t)
        ops.append(op)
        classes.add(k)
    if not ops:
        return {}
    if len(classes) != 1:
        raise _core.StokerInvalidError(f"batch transforms disagree on num_classes: "
                                       f"{sorted(classes)}")
    return dict(batch_ops=ops, batch_choice=choice, num_classes=classes.pop())


# ---- map= ----

_NP_DTYPES = {"uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"}


def sample_dict(items):
    """One sample as the map function sees it, from (name, dtype, shape, data, length) items:
    bytes fields as bytes, scalar int64/float32 fields as int/float, arrays as numpy arrays."""
    out = {}
    for name, dtype, shape, data, length in items:
        if length >= 0:
            out[name] = bytes(data[:length])
        elif not shape:
            v = np.frombuffer(data, dtype=dtype if dtype in _NP_DTYPES else np.uint16)[0]
            out[name] = int(v) if v.dtype.kind in "iu" else float(v)
        else:
            dt = dtype if dtype in _NP_DTYPES else np.uint16  # bfloat16: its bits
            out[name] = np.frombuffer(data, dtype=dt).reshape(shape)
    return out


def _field_of(name, v, bytes_room=None):
    """(name, kind, dtype, shape) of a value fn returned for the first sample. A bytes value is
    kind "bytes" with shape (stride,): `bytes_room(name, len)` says how many bytes its rows
    hold (the batch then has `name`, uint8 [n, stride], and `name_lengths`, as a bytes field of
    the dataset has)."""
    if not isinstance(name, str) or not name or len(name) >= 32 or name == "index" or not all(
            c.isalnum() or c in "_.-" for c in name):
        raise _core.StokerInvalidError(f"map function: output field name {name!r} is invalid "
                                       "(1-31 characters of [A-Za-z0-9_.-], not 'index')")
    if isinstance(v, (bytes, bytearray)) and bytes_room is not None:
        if len(name) + len("_lengths") >= 32:
            raise _core.StokerInvalidError(f"map function: bytes field {name!r}: its name with "
                                           f"'_lengths' must fit 31 characters")
        return (name, "bytes", "uint8", (int(bytes_room(name, len(v))),))
    if isinstance(v, (bytes, bytearray, str)) or v is None:
        raise _core.StokerInvalidError(
            f"map function: field {name!r} is a {type(v).__name__}, which cannot be batched: "
            "return bytes, fixed-shape numpy arrays, ints or floats")
    if isinstance(v, (bool, numbers.Integral)) and not isinstance(v, np.ndarray):
        return (name, "int64", "int64", ())
    if isinstance(v, numbers.Real) and not isinstance(v, np.ndarray):
        return (name, "float32", "float32", ())
    try:
        a = np.asarray(v)
    except Exception as e:  # noqa: BLE001 - reported with the field's name
        raise _core.StokerInvalidError(f"map function: field {name!r} ({type(v).__name__}) "
                                       f"cannot be batched: {e}") from e
    if a.ndim == 0 and a.dtype.kind in "biu":
        return (name, "int64", "int64", ())
    if a.ndim == 0 and a.dtype.kind == "f":
        return (name, "float32", "float32", ())
    if str(a.dtype) not in _NP_DTYPES or not 1 <= a.ndim <= 4:
        raise _core.StokerInvalidError(
            f"map function: field {name!r} ({type(v).__name__} of dtype {a.dtype}, shape "
            f"{a.shape}) cannot be batched: arrays need 1 to 4 dimensions and one of the dtypes "
            f"{', '.join(sorted(_NP_DTYPES))}")
    return (name, "array", str(a.dtype), tuple(int(d) for d in a.shape))


def map_schema(out, bytes_room=None):
    """The output fields that the first sample's result `out` fixes (bytes fields sized by
    bytes_room(name, first length))."""
    if not isinstance(out, collections.abc.Mapping):
        raise _core.StokerInvalidError(f"map function must return a dict of fields, not "
                                       f"{type(out).__name__}")
    if not out:
        raise _core.StokerInvalidError("map function returned an empty dict")
    return [_field_of(k, v, bytes_room) for k, v in out.items()]


def c_fields(schema):
    """The C loader's sample fields for a map schema: a bytes field is a uint8 [stride] row
    plus its int64 `name_lengths`."""
    out = []
    for name, kind, dtype, shape in schema:
        if kind == "bytes":
            out.append((name, "array", "uint8", shape))
            out.append((name + "_lengths", "int64", "int64", ()))
        else:
            out.append((name, kind, dtype, shape))
    return out


class MapRunner:
    """Called by the worker threads (GIL held) with (index, items): runs fn on the sample and
    returns one buffer per output field. Remembers the last exceptions by record index so that
    the loader can chain them (with their tracebacks) to the error the batch raises."""

    KEEP = 64

    def __init__(self, fn, schema):
        self.fn = fn
        self.schema = schema
        self.names = [f[0] for f in schema]
        self.errors = collections.OrderedDict()
        self.py_ns = 0  # time in fn (stats()["python_s"])
        self.calls = 0

    def pack(self, out):
        if not isinstance(out, collections.abc.Mapping):
            raise TypeError(f"map function must return a dict of fields, not "
                            f"{type(out).__name__}")
        if len(out) != len(self.schema) or any(k not in out for k in self.names):
            raise ValueError(f"map function returned fields {sorted(map(str, out))}, but the "
                             f"first sample fixed {sorted(self.names)}")
        bufs = []
        for name, kind, dtype, shape in self.schema:
            v = out[name]
            if kind == "bytes":  # the row holds its bytes (the rest unspecified), then length
                if not isinstance(v, (bytes, bytearray)):
                    raise ValueError(f"field {name!r} is a {type(v).__name__}, but the first "
                                     f"sample's was bytes")
                if len(v) > shape[0]:
                    raise ValueError(f"field {name!r} has {len(v)} bytes, more than the "
                                     f"{shape[0]} its rows hold (the dataset's largest record "
                                     f"fixed that); return it from a field of the dataset, or "
                                     f"make it smaller")
                bufs.append(v)
                bufs.append(np.array(len(v), dtype=np.int64))
                continue
            a = np.asarray(v)
            if kind != "array":
                if a.ndim != 0 or (kind == "int64" and a.dtype.kind not in "biu") or \
                        a.dtype.kind not in "biuf":
                    raise ValueError(f"field {name!r}: {v!r} is not a {kind} scalar (as the "
                                     "first sample's was)")
                bufs.append(np.array(a, dtype=dtype))
                continue
            if a.shape != shape:
                raise ValueError(f"field {name!r} has shape {a.shape}, but the first sample "
                                 f"fixed {shape}")
            if a.dtype != dtype:
                if not np.can_cast(a.dtype, dtype, "same_kind"):
                    raise ValueError(f"field {name!r} has dtype {a.dtype}, but the first sample "
                                     f"fixed {dtype}")
                a = a.astype(dtype)
            bufs.append(np.ascontiguousarray(a))
        return bufs

    def __call__(self, index, items):
        t0 = time.perf_counter_ns()
        try:
            return self.pack(self.fn(sample_dict(items)))
        except BaseException as e:
            errors = self.errors
            errors[index] = e
            while len(errors) > self.KEEP:
                errors.popitem(last=False)
            raise
        finally:
            self.py_ns += time.perf_counter_ns() - t0  # (GIL held: no race)
            self.calls += 1

    def cause(self, message, describe):
        """The remembered exception of the record `message` names, or None."""
        for index, exc in reversed(list(self.errors.items())):
            try:
                where = describe(index)
            except Exception:  # noqa: BLE001
                continue
            if message.startswith(where + ":") or (where + ":") in message:
                return exc
        return None


def probe_items(raw):
    """(name, dtype, shape, data, length) items of sample 0 of a core Batch, as the worker
    threads pass them (without "index")."""
    items = []
    for name, tensor, lengths in raw.tensors():
        if name == "index":
            continue
        a = np.asarray(tensor)[0]
        items.append((name, str(a.dtype), tuple(a.shape), bytearray(a.tobytes()),
                      -1 if lengths is None else int(np.asarray(lengths)[0])))
    return items

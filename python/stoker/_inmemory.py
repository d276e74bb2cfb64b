"""Datasets whose samples are rows of arrays the training process holds, read natively: torch's
TensorDataset and torchvision's CIFAR10/100, SVHN, STL10 and MNIST (FashionMNIST, KMNIST, EMNIST,
QMNIST).

Their __getitem__ is a row of each array (TensorDataset: `tensor[i]` of each tensor) or a PIL
image made from a row of one uint8 array, put through the dataset's transform (CIFAR, MNIST).
stoker's C workers can make those samples themselves: the arrays (and labels) are written once,
when the loader is built, into memory files that the `npy` source reads in place (_memnpy.py),
and the transform is compiled (stoker's ops on the array give the pixels torchvision's give on
the PIL image). The consumer then shapes each batch tuple as the DataLoader's default_collate
gives it (`finish`): a one-channel image made in three equal channels keeps the first, a
TensorDataset's fields get their tensors' shapes and dtypes back.

Anything these cannot express raises StokerInvalidError, and the dataset runs its own
__getitem__ as any Python dataset (python/stoker/_pydataset.py).
"""
import functools
import os
import sys

import numpy as np

from . import _core, _memnpy
from . import transforms as _transforms
from .dataset import Dataset

# a TensorDataset larger than this (all its tensors' bytes) runs its __getitem__ in Python: the
# memory files hold a copy of it
TENSORS_MAX = min(4 << 30, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 8) \
    if hasattr(os, "sysconf") else 1 << 30


def _invalid(msg):
    return _core.StokerInvalidError(msg)


def kind(data):
    """The class whose __getitem__ makes `data`'s samples from arrays in memory: torch's
    TensorDataset, torchvision's CIFAR10 (CIFAR100: [N, 32, 32, 3] RGB), SVHN and STL10 ([N, 3,
    H, W] RGB), QMNIST or MNIST (FashionMNIST, KMNIST, EMNIST: [N, 28, 28] one-channel); None
    for anything else."""
    for mod, cls in (("torch.utils.data", "TensorDataset"),
                     ("torchvision.datasets.cifar", "CIFAR10"),
                     ("torchvision.datasets.svhn", "SVHN"),
                     ("torchvision.datasets.stl10", "STL10"),
                     ("torchvision.datasets.mnist", "QMNIST"),
                     ("torchvision.datasets.mnist", "MNIST")):
        m = sys.modules.get(mod)
        if m is not None and isinstance(data, getattr(m, cls)):
            return getattr(m, cls)
    return None


def plan(data):
    """(the arrays to write, {field: numpy array} in the batch tuple's order; the transform to
    compile or None; finish or None) for a dataset of kind(), nothing written yet; raise
    StokerInvalidError naming what does not hold."""
    base = kind(data)
    name = type(data).__name__
    if getattr(type(data), "__getitem__", None) is not base.__getitem__:
        raise _invalid(f"this {name} overrides __getitem__: its samples come from Python code")
    try:
        if base.__name__ == "TensorDataset":
            return _tensors(data, name)
        return _images(data, name, base.__name__)
    except (AttributeError, TypeError) as e:  # a subclass without the attributes its base sets
        raise _invalid(f"this {name} is not laid out as a {base.__name__} ({e})") from None


def dataset(data):
    """(stoker Dataset over memory files, transform to compile or None, the batch tuple's
    fields, finish or None) for a dataset of kind(): plan(data), its arrays written."""
    arrays, transform, finish = plan(data)
    return _open(type(data).__name__, arrays), transform, tuple(arrays), finish


def _open(name, arrays):
    """The stoker Dataset of `arrays` ({field: numpy array}, rows in C order), written into
    memory files closed with it."""
    files = _memnpy.MemFiles()
    try:
        paths = {field: files.path(f"{name}.{field}", a) for field, a in arrays.items()}
        return files.keep_with(Dataset(paths, format="npy"))
    except (OSError, _core.Error) as e:  # no memfd, no /proc, memory full: its __getitem__
        files.close()
        raise _invalid(f"this {name}'s arrays could not be put in memory files ({e})") from None
    except BaseException:
        files.close()
        raise


# ---- TensorDataset ----

# torch dtypes a memory file holds as another of the same size (the npy source has no bool or
# bfloat16), given back in the batch by a view
_AS = {"bool": "uint8", "bfloat16": "int16"}


def _tensors(data, name):
    torch = sys.modules["torch"]
    tensors = list(data.tensors)
    n = tensors[0].shape[0] if tensors and tensors[0].dim() > 0 else 0
    if not tensors or n == 0:
        raise _invalid(f"this {name} is empty")
    arrays, shapes, views = {}, [], []
    total = 0
    for k, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu" or t.is_sparse or \
                t.requires_grad or t.dim() == 0 or t.shape[0] != n:
            raise _invalid(f"this {name}'s tensor {k} is not a dense CPU tensor of {n} rows "
                           f"without requires_grad")
        dt = str(t.dtype).replace("torch.", "")
        as_name = _AS.get(dt)
        src = t.view(getattr(torch, as_name)) if as_name else t
        try:
            a = src.numpy()
        except (TypeError, RuntimeError) as e:
            raise _invalid(f"this {name}'s tensor {k} ({t.dtype}) has no numpy form ({e})") \
                from None
        if a.dtype.kind not in "iuf" or (a.dtype.kind == "u" and a.dtype.itemsize > 1):
            raise _invalid(f"this {name}'s tensor {k} is {t.dtype}, which stoker's npy source "
                           f"does not read")
        total += a.nbytes
        arrays[f"t{k}"] = a
        shapes.append(tuple(t.shape[1:]))
        views.append(t.dtype if as_name else None)
    if total > TENSORS_MAX:
        raise _invalid(f"this {name} holds {total / 2**30:.1f} GiB, more than stoker copies "
                       f"into memory files ({TENSORS_MAX / 2**30:.1f} GiB)")
    return arrays, None, functools.partial(_rows_back, tuple(shapes), tuple(views))


def _rows_back(shapes, views, batch):
    """A TensorDataset's batch tuple as default_collate gives it: a list of [B, *row shape]
    tensors of the tensors' dtypes (the npy source gives a 1-D row of another dtype than int64
    or float32 as [B, 1], a bool or bfloat16 tensor as its same-size integer)."""
    out = []
    for t, shape, view in zip(batch, shapes, views):
        t = t.view((t.shape[0],) + shape)
        out.append(t.view(view) if view is not None else t)
    return out


# ---- torchvision's CIFAR and MNIST ----

_GRAYSCALES = ("Grayscale", "RandomGrayscale")


def _gray_transform(transform, name):
    """(the transform to compile, the channels of its output) for a one-channel (PIL "L")
    image: torchvision's Grayscale and RandomGrayscale leave a gray image as it is (3 channels
    with Grayscale(num_output_channels=3): MNIST for an RGB model), so they are left out of a
    Compose (stoker's Grayscale would weigh the three equal channels again, a grey level off);
    one inside another container is refused."""
    ops = list(transform.transforms) if type(transform).__name__ == "Compose" else [transform]
    channels = 1
    for t in ops:
        if type(t).__name__ == "Grayscale" and int(getattr(t, "num_output_channels", 1)) == 3:
            channels = 3

    def nested(t):
        return any(type(u).__name__ in _GRAYSCALES or nested(u)
                   for u in getattr(t, "transforms", None) or ())
    if any(nested(t) for t in ops):
        raise _invalid(f"this {name}'s transform has a Grayscale inside another transform")
    return [t for t in ops if type(t).__name__ not in _GRAYSCALES], channels


# ops that keep an image's size, which may come before the Resize _sized_resize fixes
_SIZE_KEEPING = ("RandomHorizontalFlip", "RandomVerticalFlip", "ColorJitter", "Grayscale",
                 "RandomGrayscale")


def _sized_resize(transform, h, w):
    """`transform` with its first Resize to one side (`Resize(64)`: the shorter side to 64, the
    other in proportion) made a Resize to the (height, width) torchvision computes from the
    array's h x w (every image of these datasets has it), where only ops that keep the size come
    before it: stoker's pipeline needs its output size fixed. Else `transform` as it is."""
    ops = list(transform) if isinstance(transform, list) else \
        list(transform.transforms) if type(transform).__name__ == "Compose" else [transform]
    for k, t in enumerate(ops):
        if type(t).__name__ != "Resize":
            if type(t).__name__ in _SIZE_KEEPING:
                continue
            break
        size = t.size
        if isinstance(size, (list, tuple)) and len(size) == 1:
            size = size[0]
        if not isinstance(size, int) or getattr(t, "max_size", None) is not None:
            break
        short, long = (w, h) if w <= h else (h, w)
        new_long = int(size * long / short)
        out = (new_long, size) if w <= h else (size, new_long)
        resized = type(t)(out, interpolation=t.interpolation,
                          antialias=getattr(t, "antialias", None))
        return ops[:k] + [resized] + ops[k + 1:]
    return transform


def _images(data, name, base):
    """CIFAR10 / CIFAR100 (`data` uint8 [N, H, W, 3]), SVHN / STL10 (`data` uint8 [N, 3, H, W],
    `labels`) or MNIST and its kin (`data` a uint8 tensor [N, H, W]; QMNIST's `targets` rows
    of 8, the first its class where `compat` is set): the `image` and `label` arrays, the
    transform to compile, and for a one-channel image whose transform keeps one channel the
    finish that keeps the first of the three equal channels stoker's ops make."""
    gray, chw = base in ("MNIST", "QMNIST"), base in ("SVHN", "STL10")
    if data.target_transform is not None:
        raise _invalid(f"this {name} has a target_transform, which stoker cannot apply")
    if data.transform is None:
        raise _invalid(f"this {name} has no transform: it gives PIL images, which the "
                       f"DataLoader's default collate cannot batch either")
    images, targets = data.data, data.labels if chw else data.targets
    if targets is None:  # STL10's "unlabeled" split: None targets, which no collate batches
        raise _invalid(f"this {name} has no labels")
    if base == "QMNIST":
        if not getattr(data, "compat", False):
            raise _invalid(f"this {name} gives each target as its row of 8 (compat=False)")
        targets = targets[:, 0] if getattr(targets, "ndim", 0) == 2 else None
    if not isinstance(images, np.ndarray):  # MNIST's: a torch tensor
        images = images.numpy() if hasattr(images, "numpy") else None
    want = "[N, H, W]" if gray else "[N, 3, H, W]" if chw else "[N, H, W, 3]"
    if not isinstance(images, np.ndarray) or images.dtype != np.uint8 or images.shape[0] == 0 \
            or images.ndim != (3 if gray else 4) or \
            (not gray and images.shape[1 if chw else 3] != 3):
        raise _invalid(f"this {name}'s data is not a uint8 {want} array")
    labels = None if targets is None else \
        np.asarray(targets.numpy() if hasattr(targets, "numpy") else targets)
    if labels is None or labels.shape != (images.shape[0],) or labels.dtype.kind not in "iu":
        raise _invalid(f"this {name}'s targets are not {images.shape[0]} integers")
    transform, channels = data.transform, 3
    if gray:
        transform, channels = _gray_transform(transform, name)
    transform = _sized_resize(transform, *(images.shape[2:4] if chw else images.shape[1:3]))
    try:
        _transforms.compile(transform)
    except _core.StokerInvalidError as e:
        # An evaluation transform (ToTensor, Normalize) keeps the array's size, which the
        # compiled pipeline does not know: a CenterCrop of that size (the whole image) says it.
        transform = [_transforms.CenterCrop(tuple(images.shape[2:4] if chw else
                                                  images.shape[1:3])), transform]
        try:
            _transforms.compile(transform)
        except _core.StokerInvalidError:
            raise _invalid(f"stoker cannot express this {name}'s transform ({e})") from None
    # Rows as C stores them: CIFAR's [N, H, W, 3] is a view of [N, 3, H, W] (its transpose):
    # written as that [N, 3, H, W] array, which the npy source reads as 3-channel images, it is
    # written without a copy in between.
    # SVHN's and STL10's are [N, 3, H, W] (STL10's a transposed view: copied in C order).
    rows = images
    if not gray and not chw:
        planes = images.transpose(0, 3, 1, 2)
        rows = planes if planes.flags.c_contiguous and not images.flags.c_contiguous else images
    return {"image": rows, "label": labels.astype(np.int64)}, transform, \
        _first_channel if channels == 1 else None


def _first_channel(batch):
    """(images [B, 1, H, W], labels): a one-channel dataset's images, which stoker's ops made in
    three equal channels, cut to the first (contiguous)."""
    return (batch[0][:, :1].contiguous(),) + tuple(batch[1:])

"""Each next() on a stoker loader as a torch.profiler range, named as the DataLoader names its own.

PyTorch's DataLoader wraps every ``__next__`` of its iterator in
``torch.autograd.profiler.record_function("enumerate(DataLoader)#<IterClass>.__next__")``
(torch/utils/data/dataloader.py), so a ``torch.profiler.profile()`` of a training loop shows the
time spent waiting for data on that row, and tools that read profiles (TensorBoard's profiler
plugin, the articles that teach it) count rows with that prefix as data loading. stoker's
iterators record the same range, ``enumerate(DataLoader)#_LoaderIter.__next__`` (the class is
stoker's), so that row keeps its meaning when the loader changes (issue 24).

Unlike the DataLoader, which enters the range on every batch, stoker enters it only while a
profiler records: `range_for` costs a dict lookup and one C call otherwise
(torch.autograd._profiler_enabled), and nothing when torch was never imported.
"""
import sys

_PREFIX = "enumerate(DataLoader)#"


def profile_name(iterator):
    """The range's name for an iterator object: the DataLoader's pattern with its class."""
    return f"{_PREFIX}{type(iterator).__name__}.__next__"


_enabled = None  # torch.autograd._profiler_enabled, once torch is imported


def range_for(iterator):
    """A context manager recording iterator's __next__ as a profiler range, or None when no
    torch profiler is recording in this process (then the caller runs __next__ bare)."""
    global _enabled
    enabled = _enabled
    if enabled is None:
        torch = sys.modules.get("torch")
        if torch is None:
            return None
        enabled = _enabled = getattr(getattr(torch, "autograd", None), "_profiler_enabled",
                                     None) or (lambda: False)
    if not enabled():
        return None
    return sys.modules["torch"].autograd.profiler.record_function(profile_name(iterator))

"""stoker.Loader over a Python dataset: any map-style dataset (``__getitem__`` + ``__len__``:
TensorDataset, Subset, ConcatDataset, your own class) with the DataLoader's arguments, its
``__getitem__`` run by stoker's worker threads or worker processes (docs/python.md "Your own
Dataset", docs/design.md "Python datasets").

The dataset is a record source like any other: stoker's index dataset (records that are only
their number) gives the loader its order, ranks, tickets, ring, resume and stats, and the
per-sample callback runs ``__getitem__`` (the thread executor, _ext/_pyexec.c, or the process
executor, _ext/_procpool.c + _procpool.py) and writes the sample's fixed leaves into its rows of
the ring (_collate.py has the layout). The consumer assembles each batch with default_collate's
structure from views of the ring, or calls collate_fn on the rebuilt samples.

Construction: a server for worker processes is forked first, while the process is still
single-threaded (so the workers see the dataset as it was, whatever the probe below does to it),
then the first samples are probed in this thread (their layout, time, GIL-held share, use of the
global random generators; the generators' states are put back), the executor is chosen
(_executor.choose), and the C loader is created.
"""
import copy
import itertools
import json
import math
import os
import pickle
import sys
import time
import types
import warnings
import weakref

import numpy as np

from . import _collate
from . import _core
from . import _errors
from . import _executor
from . import _holds
from . import _listfetch
from . import loader as _loader
from . import _procpool
from . import _pyhelp
from . import _pyworker
from . import _seedwatch
from . import _torchcompat
from .loader import Loader, _TRACE_EVENTS, _torch

__all__ = ["PyLoader", "is_python_dataset", "loader_class"]



def is_python_dataset(data, kwargs=None):
    """Whether `data` is a Python dataset object whose __getitem__ stoker runs: not paths or a
    stoker Dataset, and not a dataset stoker reads natively (a torchvision folder dataset, or
    rows of arrays in memory: CIFAR, MNIST, TensorDataset; _torchcompat.native_dataset), nor a
    Subset of one (without a sampler, or a DistributedSampler over the Subset), which it reads
    natively unless the arguments need Python workers (collate_fn, worker_init_fn,
    batch_sampler, executor=, batch_size=None: unbatched samples)."""
    if data is None or not _torchcompat.is_dataset_object(data):
        return False
    kw = kwargs or {}
    inner = _torchcompat.native_subset(data)  # what a Subset selects from (random_split)
    if _torchcompat.native_kind(data) or inner is not None:
        if kw.get("worker_init_fn") is not None or kw.get("batch_sampler") is not None or \
                kw.get("executor") is not None or \
                ("batch_size" in kw and kw["batch_size"] is None) or \
                not _torchcompat.is_default_collate(kw.get("collate_fn")) or \
                (inner is not None and
                 not _torchcompat.subset_sampler_ok(data, kw.get("sampler"))):
            return True
        return not _torchcompat.native_ok(data if inner is None else inner)
    return True


def is_iterable(data):
    """An iterable-style dataset: a torch IterableDataset, or an object with __iter__ but no
    __getitem__/__len__."""
    torch = _torch()
    if torch is not None and isinstance(data, torch.utils.data.IterableDataset):
        return True
    return hasattr(data, "__iter__") and not (hasattr(data, "__getitem__") and
                                              hasattr(data, "__len__"))


def loader_class(data):
    """The Loader subclass for a Python dataset."""
    if is_iterable(data):
        from ._pyiterable import PyIterLoader
        return PyIterLoader
    return PyLoader


# ---- the thread executor's runner ----

HERE = _errors.HERE  # where a sample ran at num_workers=0, for errors
MEASURED_OBJECTS = 8  # probed samples whose object leaves measure() times at most

class ThreadRunner:
    """Called by the worker threads (GIL held) with (index, epoch, seed, worker, row): runs
    __getitem__ and returns (bufs, key, mask) for _ext/_pyexec.c. Object leaves are kept in
    `table` under the row's key until the consumer takes them. The first call on each thread
    sets its get_worker_info() and runs worker_init_fn(worker). After it, the thread calls
    __getitem__ itself (ThreadExec.set_fast: the layout's fast_plan() written from C), coming
    back here only for a sample the plan does not fit (_flatten) or an exception (failed)."""

    def __init__(self, dataset, layout, n_workers, base_seed, worker_init_fn, capacity,
                 kept=None):
        self.getitem = dataset.__getitem__
        self.kept = kept or None  # {index: (sample, ns)} the probe loaded: epoch 0's, once
        self.dataset = dataset
        self.layout = layout
        self.n_workers, self.base_seed, self.worker_init_fn = n_workers, base_seed, worker_init_fn
        self.cap = capacity
        self.table = [None] * capacity
        self.keys = itertools.count(1)
        self.errors = {}
        self.init_errors = {}
        self.inited = set()  # the worker numbers whose worker_init_fn ran
        self.py_ns = 0
        self.samples = 0
        self.none = [None] * len(layout.fixed)

    def _thread_start(self, worker):
        _pyworker.TLS.info = _pyworker.worker_info(worker, self.n_workers, self.base_seed + worker, self.dataset)
        _pyworker.TLS.ready = True
        # once per worker number: a ring the loop filled with kept batches is replaced with new
        # C threads (Loader._rebuild), which must not run it again (was: at every rebuild, 17-34
        # calls in 3 epochs of list(loader))
        if self.worker_init_fn is not None and worker not in self.inited:
            self.inited.add(worker)
            try:
                self.worker_init_fn(worker)
            except Exception:  # noqa: BLE001 - fails this thread's samples, named
                self.init_errors[worker] = _errors.wrapper(
                    f"in stoker worker thread {worker} (worker_init_fn)")

    def __call__(self, index, epoch, seed, worker, row):
        if not getattr(_pyworker.TLS, "ready", False):
            self._thread_start(worker)
        if worker in self.init_errors:
            self._remember(index, self.init_errors[worker])
            raise RuntimeError(f"worker_init_fn failed on worker thread {worker}")
        return self.load(index, epoch, f"in stoker worker thread {worker}")

    def load(self, index, epoch, where):
        """Sample `index` flattened (the probe's when it kept it); an exception is remembered
        with `where` (the thread that ran it) and raised."""
        kept = self.kept
        if kept is not None:
            if epoch != 0:
                self.kept = None  # epoch 0 is over (or was skipped by a resume)
            else:
                got = kept.pop(index, None)
                if not kept:
                    self.kept = None  # (the worker threads' fast path may take every sample)
                if got is not None:  # loaded by the probe: counted as this worker's
                    self.py_ns += got[1]
                    self.samples += 1
                    return self._flatten(got[0])
        t0 = time.perf_counter_ns()
        try:
            sample = self.getitem(index)
        except BaseException:  # a KeyboardInterrupt too: raised at next(), as at num_workers=0
            self._remember(index, _errors.caught(
                f"{where} while loading sample {index} (epoch {epoch})"))
            raise
        finally:
            self.py_ns += time.perf_counter_ns() - t0
            self.samples += 1
        return self._flatten(sample)

    def failed(self, index, epoch, worker, exc_info):
        """The fast path's __getitem__ raised exc_info (it goes on to the consumer); a worker
        number past the threads' is the training thread's (stk_loader_help)."""
        where = f"in stoker worker thread {worker}" if worker < self.n_workers else HERE
        self._remember(index, _errors.caught(
            f"{where} while loading sample {index} (epoch {epoch})", exc_info))

    def _flatten(self, sample):
        layout = self.layout
        if layout.whole:  # (the sample itself, for a collate_fn: no walk)
            key = next(self.keys)
            self.table[key % self.cap] = (key, [sample], {})
            return self.none, key, 0
        bufs, objects, extras, mask = layout.flatten(sample, True)
        key = 0
        if objects or mask:
            key = next(self.keys)
            self.table[key % self.cap] = (key, objects, extras)
        return (bufs if bufs is not None else self.none), key, mask

    def _remember(self, index, w):
        errors = self.errors
        errors[index] = w
        while len(errors) > 64:
            errors.pop(next(iter(errors)))

    def take(self, keys):
        out = []
        for k in keys:
            e = self.table[k % self.cap] if k else None
            if e is not None and e[0] == k:
                self.table[k % self.cap] = None
                out.append((e[1], e[2]))
            else:
                out.append(None)
        return out


def measure(first, rows, drew, kept=None):
    """The layout the first sample fixes and the Probe the measured rows make
    (_executor.probe_of: load-independent figures), with the time a sample's object leaves take
    to pickle and unpickle (a worker process sends them so, the training thread takes them
    back; torch tensors past the ring's fields cost ~70 us each): the mean over the probed
    samples (`kept`, else the first), each its best of 3, since a later sample whose tensor has
    another shape than the first's travels as an object too (variable-length sequences)."""
    layout = _collate.Layout(first)
    p = _executor.probe_of(rows, sum(leaf.nbytes for leaf in layout.fixed), drew)
    samples = [s for s, _ in list(kept.values())[:MEASURED_OBJECTS]] if kept else [first]
    try:
        costs = []
        for sample in samples:
            _, objects, extras, _ = layout.flatten(sample)
            best = 0.0
            if objects or extras:
                best = math.inf
                for _ in range(3):  # (CPU time, as the probe's figures: the load does not move it)
                    t0 = time.thread_time()
                    pickle.loads(_procpool._dumps_objects((objects, extras)))
                    best = min(best, time.thread_time() - t0)
            costs.append(best)
        p.object_s = sum(costs) / len(costs)
    except Exception:  # noqa: BLE001 - not picklable: processes fail on it anyway
        pass
    return layout, p


def probe_here(dataset, request, n_workers, base_seed, worker_init_fn, name, timeout=0):
    """probe_samples in this process, as worker 0 of the thread executor (get_worker_info()
    answers; worker_init_fn(0) runs first), with the global random generators put back as
    they were. With a timeout, on a thread of its own, watched from here: a __getitem__ that
    does not return within `timeout` seconds raises StokerIOError naming it, as during iteration
    (that thread is left to it, as a stuck worker thread is); Ctrl-C interrupts the wait."""
    if not timeout:
        return _probe_run(dataset, request, n_workers, base_seed, worker_init_fn, name, None)
    import threading
    cv = threading.Condition()
    at = {"index": None, "since": None, "done": False, "got": None, "error": None,
          "abandoned": False}
    ctl = {}  # the probe's switch interval and GIL meter, released if it is left

    def started(index):
        with cv:
            if at["abandoned"]:  # the constructor gave up: no further sample
                raise _Abandoned
            at["index"], at["since"] = index, time.monotonic()
            cv.notify_all()

    def run():
        try:
            got = _probe_run(dataset, request, n_workers, base_seed, worker_init_fn, name,
                             started, lambda: at["abandoned"], ctl)
        except BaseException as e:  # noqa: BLE001 - raised in the constructing thread
            got, at["error"] = None, e
        with cv:
            at["got"], at["done"] = got, True
            cv.notify_all()

    t = threading.Thread(target=run, name="stoker-probe", daemon=True)
    t.start()
    try:
        with cv:
            while not at["done"]:
                since = at["since"]
                left = None if since is None else since + timeout - time.monotonic()
                if left is not None and left <= 0:
                    raise _errors.StokerWorkerError(  # (a RuntimeError, as the DataLoader's)
                        f"__getitem__({at['index']}) did not return within {timeout:.3g} s "
                        f"(timeout=) while the constructor read the first samples of {name} "
                        f"(which fix the batch layout), on a thread of this process that is "
                        f"left to it")
                cv.wait(left)
    except BaseException:  # the timeout, or Ctrl-C
        with cv:
            at["abandoned"] = True
        _pyworker.release_probe(ctl)
        raise
    t.join()
    if at["error"] is not None:
        e, at["error"] = at["error"], None
        raise e
    return at["got"]


class _Abandoned(BaseException):
    """The constructor stopped waiting for the probe (its timeout, Ctrl-C): the probe's thread
    starts no further sample."""


def _probe_run(dataset, request, n_workers, base_seed, worker_init_fn, name, started,
               abandoned=lambda: False, ctl=None):
    """probe_here's work, on whichever thread runs it; the global generators are put back
    unless the constructor gave up meanwhile (they are the training loop's by then)."""
    _pyworker.install_worker_info_hook()
    states = _pyworker.rng_states()
    _pyworker.TLS.info = _pyworker.worker_info(0, n_workers, base_seed, dataset)
    try:
        if worker_init_fn is not None:
            worker_init_fn(0)
        got = _pyworker.probe_samples(dataset, request, started, ctl)
    except Exception:  # noqa: BLE001 - raised the DataLoader's way
        w = _errors.wrapper(f"in stoker.Loader, reading the first sample of {name} (which "
                            f"fixes the batch layout)")
    else:
        return got
    finally:
        _pyworker.TLS.info = None
        if not abandoned():
            _pyworker.rng_restore(states)
    _errors.reraise(w)


# The index space of a dataset without __len__ (its sampler or batch_sampler names the indices).
NO_LEN = 1 << 62


# ---- what cannot cross fork() ----

def fork_unsafe(dataset, depth=2):
    """A description of an open lmdb.Environment/Transaction or h5py File/Group/Dataset the
    dataset holds in its attributes (to `depth` levels), or None."""
    kinds = []
    for mod, names in (("lmdb", ("Environment", "Transaction", "Cursor")),
                       ("h5py", ("File", "Group", "Dataset"))):
        m = sys.modules.get(mod)
        if m is not None:
            kinds.extend((getattr(m, n), f"{mod}.{n}") for n in names if hasattr(m, n))
    if not kinds:
        return None
    for path, obj in _holds.reachable(dataset, depth):
        for cls, label in kinds:
            if isinstance(obj, cls):
                if label.startswith("h5py") and not bool(getattr(obj, "id", None)):
                    break  # closed
                return f"an open {label} ({path})"
    return None


def _files_text(found):
    """Open files as _holds.read_files found them, said in a few words ("dataset.f
    (/data/a.bin)"), or None when there are none."""
    if not found:
        return None
    more = f" and {len(found) - 1} more" if len(found) > 1 else ""
    return f"{found[0][0]} ({found[0][1]}){more}"


# Attributes that stoker's own calls of __getitem__ in the training process (the probe, the
# training thread's part in the first batch) set to an open h5py/lmdb handle, by the object that
# holds them (the dataset, or one it holds: a Subset's or ConcatDataset's dataset), with the value
# each had before (an h5py dataset's `self.file = None`, opened lazily). Worker processes of this
# loader and of any later loader reaching that object get a copy with those values back, as the
# DataLoader's workers find the dataset (it never calls __getitem__ in the training process),
# instead of threads (or a pickling error) for a handle stoker opened. The objects themselves
# keep their handles (they serve the training thread's calls).
_OPENED_HERE = weakref.WeakKeyDictionary()
_ABSENT = object()


def _objects(dataset):
    """The objects with attributes the dataset holds, itself included, to _holds.WALK_DEPTH
    levels."""
    return [o for _, o in _holds.reachable(dataset, _holds.WALK_DEPTH)
            if isinstance(getattr(o, "__dict__", None), dict)]


def vars_before(dataset):
    """The attributes of the dataset's objects (_objects), before stoker calls __getitem__ here."""
    return [(o, dict(o.__dict__)) for o in _objects(dataset)]


def _assigned_since(before):
    """Per object of `before` (vars_before's), the attributes assigned since: (obj, [(name,
    old value or _ABSENT, new value), ...])."""
    for obj, was in before:
        attrs = getattr(obj, "__dict__", None)
        if isinstance(attrs, dict):
            yield obj, [(k, was.get(k, _ABSENT), v) for k, v in list(attrs.items())
                        if was.get(k, _ABSENT) is not v]


def assigned_here(before):
    """After stoker called __getitem__ here: the first attribute it assigned since `before`
    (vars_before's, taken after the first sample, so a handle opened lazily on first use, an
    h5py file or an lmdb environment, does not count), "Dataset.cur", or None. A dataset that
    assigns its attributes at every call (self.cur = i used as scratch) is not safe on threads
    that share it: each worker process has a copy of its own, as the DataLoader's. (A plain
    file opened lazily is found by the open-file check: threads would share its position.)"""
    for obj, changed in _assigned_since(before):
        if changed:
            return f"{type(obj).__name__}.{changed[0][0]}"
    return None


def note_opened_here(dataset, before):
    """After stoker called __getitem__ here: note the attributes that now hold an open handle
    and held no handle before (`before`: vars_before's)."""
    for obj, changed in _assigned_since(before):
        for k, old, v in changed:
            if fork_unsafe(v, 0) is None:
                continue
            if old is not _ABSENT and fork_unsafe(old, 0) is not None:
                continue
            try:
                _OPENED_HERE.setdefault(obj, {}).setdefault(k, old)
            except TypeError:  # (not weakly referable: nothing noted)
                break


def _opened(obj):
    try:
        return _OPENED_HERE.get(obj)
    except TypeError:
        return None


def _as_found(obj, depth, memo):
    """obj, or a shallow copy of it with the noted attributes back and the objects below that
    have some copied the same way."""
    if _holds.leaf(obj):
        return obj
    if id(obj) in memo:
        return memo[id(obj)]
    memo[id(obj)] = obj  # (a cycle leads back to the object as it is)
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict):
        changes = dict(_opened(obj) or {})
        if depth > 0:
            for k, v in list(attrs.items()):
                if k not in changes:
                    c = _as_found(v, depth - 1, memo)
                    if c is not v:
                        changes[k] = c
        if changes:
            new = copy.copy(obj)
            if new.__dict__ is attrs:
                raise TypeError("a copy that shares its attributes")
            for k, v in changes.items():
                if v is _ABSENT:
                    new.__dict__.pop(k, None)
                else:
                    new.__dict__[k] = v
            memo[id(obj)] = new
    elif isinstance(obj, list) and depth > 0:  # (the items _holds.reachable looks at)
        items = [_as_found(v, depth - 1, memo) for v in obj[:16]]
        if any(a is not b for a, b in zip(items, obj)):
            memo[id(obj)] = items + obj[16:]
    return memo[id(obj)]


def as_first_found(dataset):
    """The dataset for worker processes: itself, or when stoker's calls here opened handles in it
    or in objects it holds (note_opened_here), a copy with those attributes as they were (only
    the objects on the way to them are copied, shallowly)."""
    if not any(_opened(o) for o in _objects(dataset)):
        return dataset
    try:
        return _as_found(dataset, _holds.WALK_DEPTH, {})
    except Exception:  # noqa: BLE001 - then the dataset as it is (threads, if it holds a handle)
        return dataset


# ---- the loader ----

class _Group:
    """A batch_sampler batch being gathered one ring row at a time: its size and samples."""

    __slots__ = ("size", "samples")

    def __init__(self, size):
        self.size, self.samples = size, []


_MARK_BUDGET = 4096  # attributes a mark reads at most (then it says "changed")


def dataset_mark(ds):
    """Which objects the dataset's attributes hold (their ids), and those the plain objects
    among them hold (a transform's attributes, a Compose's transforms: ds.transform.m = epoch),
    two levels down, and those of the datasets it wraps (Subset.dataset, ConcatDataset.datasets
    ...): it changes when the training loop assigns an attribute (dataset.set_epoch(e), a new
    transform, a transform's strength), not when a container is changed in place. A mark that
    cannot be read (too many attributes, one changed while read) is unequal to every other."""
    mark = []
    try:
        _mark_into(ds, mark, 3, True)
    except RuntimeError:  # (a dict changed size while a worker thread ran __getitem__)
        return object()
    return tuple(mark) if len(mark) <= _MARK_BUDGET else object()


def _attrs(obj):
    """obj's attribute dict, read past any __getattr__ (None: it has none, or is a class or a
    module, whose attributes are code)."""
    if isinstance(obj, (type, types.ModuleType)):
        return None
    try:
        attrs = object.__getattribute__(obj, "__dict__")
    except Exception:  # noqa: BLE001 - no instance dict
        return None
    return attrs if isinstance(attrs, dict) else None


def _mark_into(obj, mark, depth, dataset):
    attrs = _attrs(obj)
    if attrs is None:
        mark.append(id(obj))
        return
    for k, v in list(attrs.items()):
        mark.append((k, id(v)))
        if len(mark) > _MARK_BUDGET:
            return
        if dataset and k in ("dataset", "datasets"):  # a wrapped dataset: its own marks
            for d in (v if isinstance(v, (list, tuple)) else [v]):
                _mark_into(d, mark, 3, True)
        elif depth > 1:
            if isinstance(v, (list, tuple)) and len(v) <= 64:
                for x in v:  # (Compose.transforms)
                    if _attrs(x) is not None:
                        _mark_into(x, mark, depth - 1, False)
            elif _attrs(v) is not None:
                _mark_into(v, mark, depth - 1, False)


class PyLoader(Loader):
    """stoker.Loader for a Python dataset (made by stoker.Loader itself: see Loader.__new__)."""

    _ended_mark = None  # dataset_mark() when the last pass ended at its epoch's end
    _first_pass = False  # no pass has begun yet
    _timed_out = False  # next() raised timeout='s error (a worker thread may be stuck)
    _no_len = False     # the dataset has no __len__ (its sampler names the indices: NO_LEN)
    _inline = False     # no worker: the training thread loads each batch (_pyhelp, caller_loads)

    def __init__(self, data=None, batch_size=1, shuffle=None, seed=None, drop_last=False,
                 num_workers=None, prefetch=None, pin_memory=False, device=None, rank=None,
                 world_size=None, transforms=None, on_error="raise", trace=None, *,
                 dataset=None, sampler=None, batch_sampler=None, collate_fn=None, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None,
                 prefetch_factor=None, persistent_workers=False, pin_memory_device="",
                 in_order=None, executor="auto", reseed=True, output=None, fields=None,
                 n_threads=None, **native_only):
        self._core = None
        self._pool = None
        self._server = None
        self._runner = None
        self._thread_exec = None  # _core.ThreadExec (with _runner)
        self._renew_args = None  # (worker processes) what _renew sends a changed dataset with
        self._renewed = [None]  # (spec, blob) of the last renewal, for restarted workers
        self._helper = None  # _pyhelp.Helper: the training thread's part in the first batch
        self._map = None
        self._tokens = None  # (a token corpus is never a Python dataset)
        self._transit = None  # the ring batch (or _Group) being collated, until delivered
        self._taken = {}      # the object leaves of the last batch taken, by row key
        self._carry = None    # a batch_sampler batch being gathered (_Group)
        self._dataset = None
        self._own_dataset = True
        self._dataset_weak = None
        self._fields = None
        self._trace = None
        self._transform = None
        if data is not None and dataset is not None:
            raise _core.StokerInvalidError("pass the dataset once: stoker.Loader(dataset, ...) or "
                                           "stoker.Loader(dataset=dataset, ...)")
        ds = data if data is not None else dataset
        self._torch_dataset = ds
        bad = sorted(k for k, v in native_only.items() if v is not None and k not in
                     ("verify", "format", "strict", "label_field", "transform_field"))
        if transforms is not None or bad:
            raise _core.StokerInvalidError(
                f"{', '.join(['transforms'] * (transforms is not None) + bad)}: these apply to "
                f"datasets stoker reads itself; this {_pyworker.name(ds)} produces its samples in "
                f"__getitem__ (apply the transform there)")
        if device is not None and str(device) != "cpu":
            raise _core.StokerNotSupportedError(
                "device= with a Python dataset: pass pin_memory=True and move each batch with "
                ".to(device, non_blocking=True), as with the DataLoader")
        if fields is not None:
            raise _core.StokerInvalidError("fields= goes with output='tuple' for stoker's own "
                                           "datasets; a Python dataset's batches have the "
                                           "structure __getitem__ returns")
        if output not in (None, "torch", "numpy"):
            raise _core.StokerInvalidError(f"output={output!r}: a Python dataset's batches have "
                                           f"the structure __getitem__ returns")
        if executor not in _pyworker.EXECUTORS:
            raise _core.StokerInvalidError(f"executor should be one of {_pyworker.EXECUTORS}, not "
                                           f"{executor!r}")
        torch = _torch()
        if output == "numpy" or torch is None:
            torch = None
        self.output = "numpy" if torch is None else "torch"
        try:
            n = len(ds)
        except TypeError:  # no __len__: the DataLoader takes one with a sampler that names the
            if sampler is None and batch_sampler is None:  # indices (its default ones need it)
                raise
            n = NO_LEN
        if n <= 0:
            raise _core.StokerInvalidError(f"{_pyworker.name(ds)} is empty (len() = {n}): an epoch needs "
                                           f"at least one sample")
        # ---- the DataLoader's argument checks ----
        if n_threads is not None:  # stoker's name for the worker count (num_workers its alias)
            if num_workers is not None:
                raise _core.StokerInvalidError("n_threads= and num_workers= (its DataLoader "
                                               "alias) name one setting: pass one of them")
            num_workers = n_threads
        workers = num_workers
        if isinstance(workers, str) and workers == "auto":
            workers = None
        if workers is not None:
            workers = _torchcompat.check_int(workers, "num_workers", -1 << 62)
            if workers < 0:
                raise _core.StokerInvalidError("num_workers option should be non-negative; use "
                                               "num_workers=0 to disable multiprocessing.")
        _torchcompat.check_prefetch_factor(prefetch_factor, workers)
        _torchcompat.check_multiprocessing_context(multiprocessing_context, workers, executor)
        if timeout is None or isinstance(timeout, bool) or \
                not isinstance(timeout, (int, float)) or timeout < 0:
            raise _core.StokerInvalidError("timeout option should be non-negative")
        if persistent_workers and workers == 0:
            raise _core.StokerInvalidError("persistent_workers option needs num_workers > 0")
        if sampler is not None and shuffle:
            raise _core.StokerInvalidError("sampler option is mutually exclusive with shuffle")
        dl_attrs = _torchcompat.dataloader_attrs(
            ds, shuffle=bool(shuffle), sampler=sampler, batch_sampler=batch_sampler,
            batch_size=batch_size, drop_last=drop_last, generator=generator,
            collate_fn=collate_fn, num_workers=workers, prefetch_factor=prefetch_factor,
            worker_init_fn=worker_init_fn, multiprocessing_context=multiprocessing_context,
            persistent_workers=persistent_workers, pin_memory_device=pin_memory_device)
        self._unbatched = False
        self._group_sizes = None
        self._given_batches = batch_sampler is not None
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise _core.StokerInvalidError(
                    "batch_sampler option is mutually exclusive with batch_size, shuffle, "
                    "sampler, and drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None:
            if drop_last:
                raise _core.StokerInvalidError(
                    "batch_size=None option disables auto-batching and is mutually exclusive "
                    "with drop_last")
            self._unbatched = True
        else:
            batch_size = _torchcompat.check_int(batch_size, "batch_size", 1, 2**31 - 1)
        if on_error not in ("raise", "skip"):
            raise _core.StokerInvalidError(f"on_error should be 'raise' or 'skip', but got "
                                           f"on_error={on_error!r}")
        if collate_fn is not None and _torchcompat.is_default_collate(collate_fn):
            collate_fn = None
        self._collate_fn = collate_fn  # None: stoker's own collation, default_collate's rules
        self.reseed = bool(reseed)
        # ---- the order (stoker's: the sampler mapped onto it) ----
        if batch_sampler is not None:
            order = _torchcompat.BatchSamplerOrder(batch_sampler)
            picked = {"shuffle": False, "order": order.first(), "custom": order}
            ring_batch = order.uniform_size()
            if ring_batch is None:
                ring_batch = 1
                self._group_sizes = order
        else:
            picked = _torchcompat.map_sampler(sampler, shuffle, drop_last, generator,
                                              lists_ok=self._unbatched)
            ring_batch = 1 if self._unbatched else batch_size
            if n != NO_LEN:
                _torchcompat.check_sampler_size(picked, n)
            fetch = getattr(picked.get("custom"), "fetch", None)
            if fetch is not None:  # each of the sampler's lists goes whole to __getitem__
                fetch.dataset = ds
                if executor != "thread":  # (before the workers' spec is pickled)
                    fetch.for_processes()
                ds, n = fetch, len(fetch)
        shuffle = picked.get("shuffle", bool(shuffle))
        seed = _torchcompat.resolve_seed(seed, picked, generator, rank, world_size)
        if "rank" in picked:
            rank, world_size = picked["rank"], picked["world"]
        elif rank is None and world_size is None:
            rank, world_size = 0, 1  # the DataLoader reads everything on every rank
        rank, world_size = _torchcompat.resolve_rank(rank, world_size)
        self._dist_sampler = picked.get("distributed")
        self._order = picked.get("custom")
        name = _pyworker.name(self._torch_dataset)
        # ---- executor: server first (fork while single-threaded), then the probe ----
        cores = _core.n_cpus()  # the library's count (stk_n_cpus: the affinity mask)
        spec_ds = as_first_found(ds)  # (the workers' copy: without handles opened here)
        unsafe = fork_unsafe(spec_ds)
        found_files = _holds.read_files(spec_ds)
        files = _files_text(found_files)
        method = self._start_method(multiprocessing_context)
        # ("auto" prepares the fork server before the probe only where that is cheap: a fork
        # while this process is single-threaded, or one it has; in a process running threads
        # (a notebook kernel) it would be a fresh interpreter importing torch, ~0.9 s and ~230 MB
        # kept even when threads are chosen; it is started after the choice instead)
        want_server = executor == "process" or (
            executor == "auto" and workers != 0 and (unsafe is None or method == "spawn") and
            _procpool.cheap_to_prepare(method))
        if executor == "process" and unsafe and method == "fork":
            raise _core.StokerInvalidError(
                f"executor='process': {name} holds {unsafe}, which cannot be used in a forked "
                f"worker process (its library is not fork-safe); open it lazily in __getitem__ "
                f"(on first use in each worker), or use executor='thread'")
        n_pool = max(1, cores if workers is None else workers)
        if prefetch is None and prefetch_factor is not None:  # the DataLoader's batches in flight
            factor = _torchcompat.check_int(prefetch_factor, "prefetch_factor", 1)
            prefetch = factor * max(1, workers or 1)
        if prefetch is None or (isinstance(prefetch, str) and prefetch == "auto"):
            # one worker fills one batch at a time: one ahead of the held one is all it can
            # use (the DataLoader at num_workers=0 keeps none), so the ring is 2 slots, not 4
            prefetch = 1 if workers == 0 else 3
        self.prefetch = _torchcompat.check_int(prefetch, "prefetch", 1)
        base_seed = seed
        # num_workers=0 on a worker process (a dataset drawing random numbers, seeded per
        # sample there): it loads as the DataLoader's main process, get_worker_info() None and
        # no worker_init_fn (it answered worker 0 of 1 and ran worker_init_fn(0))
        spec_n, spec_init = (0, None) if workers == 0 else (n_pool, worker_init_fn)
        self._num_workers_arg = workers
        pending = None
        writes = None  # an attribute __getitem__ assigned when the probe ran here
        try:
            if want_server:  # the fork server first, while this process is single-threaded
                spec = _procpool.WorkerSpec(spec_ds, spec_n, base_seed, spec_init, name)
                pending = _procpool.prepare_server(spec, method)
            # The probe loads and measures no more than the choice reads (_executor.probe_plan):
            # one sample (the layout's) when nothing measured can change it, the GIL meter only
            # when the choice reads the GIL-held share ("auto" with 2 or more workers, or the
            # thread count left to stoker), and it stops at a sample that drew random numbers
            # when that settles it, so the workers start sooner. The probed samples are kept
            # for the thread executor to hand out as epoch 0's (they are its first batch's when
            # the order allows).
            request = self._probe_request(n, picked, shuffle, seed, rank, world_size, executor,
                                          workers, unsafe if method == "fork" else None, files)
            # The first samples run in worker process 0 when processes were asked for (as with
            # the DataLoader, __getitem__ then never runs in this process) or a worker_init_fn
            # must run first (it may change this process: torch.set_num_threads(1), files...);
            # else here, as worker 0 of the threads would run them (worker processes would be
            # forked from the fork server's copy of the dataset, which this does not touch).
            in_worker = pending is not None and (worker_init_fn is not None or
                                                 executor == "process")
            # "auto" takes threads where the workers cannot get the dataset: it does not pickle
            # and the fork server, forked before it existed, did not inherit it
            no_pickle = pending.unpicklable() if in_worker and executor == "auto" else None
            in_worker = in_worker and no_pickle is None
            if in_worker:
                self._start_pool(pending, n_pool, timeout, ring_batch)
            if in_worker:
                try:
                    status, payload = self._pool.probe(0, pickle.dumps(request))
                except _core.StokerIOError as e:  # worker 0 lost or past timeout=: also a
                    raise _errors.StokerWorkerError(*e.args) from None  # RuntimeError
                if status != 0:
                    tl = int.from_bytes(payload[:4], "little")
                    _errors.reraise(payload[4 + tl:])
                first, rows, drew, kept = pickle.loads(payload)
            else:
                request["keep"] = executor != "process"
                before = vars_before(ds)
                after_first = []  # the attributes after the first sample (lazy opens done)
                request["after_first"] = lambda: after_first.append(vars_before(ds))
                try:
                    first, rows, drew, kept = probe_here(
                        ds, request, max(1, workers or 1), base_seed,
                        worker_init_fn if executor == "thread" else None, name, timeout)
                finally:
                    note_opened_here(ds, before)
                request.pop("after_first")
                writes = assigned_here(after_first[0]) if after_first else None
                lazy = [f for f in _holds.read_files(ds) if not f[2] and f not in found_files]
                if lazy:  # opened by __getitem__: shared by threads as one opened before
                    found_files = found_files + lazy
                    files = files or _files_text(lazy)
                # the workers' spec, pickled later when the fork server already existed: the
                # dataset as the probe found it, not with the file the probe opened here
                spec_ds = as_first_found(ds)
                if pending is not None:
                    pending.spec.dataset = spec_ds
            layout, p = measure(first, rows, drew, kept)
            self._layout = layout
            self._probe = p
            choice = _executor.choose(p, executor, workers, cores, reseed=self.reseed,
                                      unsafe=unsafe if method == "fork" else None, files=files,
                                      ring_batch=ring_batch, writes=writes,
                                      timeout=timeout or 0)
            if choice.executor == "process" and self._pool is None:
                if pending is None:  # num_workers=0 drawing random numbers: one process, whose
                    # server is a fresh interpreter when this process runs threads by now
                    pending = _procpool.prepare_server(
                        _procpool.WorkerSpec(spec_ds, spec_n, base_seed, spec_init, name),
                        method)
                if executor == "auto":
                    no_pickle = no_pickle or pending.unpicklable()
            if choice.executor == "process" and no_pickle is not None:
                choice = _executor.threads_instead(p, workers, cores, no_pickle)
                _procpool.warn_threads_instead(name, no_pickle)
            shared = _files_text([f for f in found_files if not f[2]])  # (no ZipFile's lock)
            if shared and choice.executor == "thread" and choice.workers > 1:
                warnings.warn(f"stoker.Loader: {name} holds an open file, {shared}, which its "
                              f"{choice.workers} worker threads share with one position: a seek "
                              f"and a read from two threads at once read another sample's "
                              f"bytes unless __getitem__ reads with os.pread or under a lock "
                              f"(worker processes each read through a position of their own)",
                              RuntimeWarning, stacklevel=2)
            if writes and choice.executor == "thread" and choice.workers > 1:
                warnings.warn(f"stoker.Loader: {name}.__getitem__ assigns {writes}, which its "
                              f"{choice.workers} worker threads share: a value one thread set "
                              f"can be read by another thread's sample (worker processes each "
                              f"have a copy of their own; executor='auto' takes them)",
                              RuntimeWarning, stacklevel=2)
            if choice.executor == "thread" and executor == "thread" and self.reseed and \
                    p.uses_rng:
                warnings.warn(f"stoker.Loader(executor='thread'): {name}.__getitem__ draws from "
                              f"the global random generators, which the worker threads share "
                              f"with each other and with the training loop, so its samples "
                              f"are random but not reproducible per (seed, epoch, index); "
                              f"executor='process' seeds them per sample", RuntimeWarning,
                              stacklevel=2)
            if choice.executor == "thread" and self._collate_fn is not None:
                # the samples go to the user's collate_fn as they are: on threads they travel
                # by reference, whole (copying their leaves into the ring only to view them
                # back cost 0.58x the DataLoader on variable-length sequences)
                layout = self._layout = _collate.Layout(first, whole=True)
            if choice.executor == "thread":
                self._stop_pool()
                if pending is not None:
                    pending.forget()
                if isinstance(ds, _listfetch.ListFetch):
                    ds.drop_files()  # (threads read the lists from memory)
            elif self._pool is None:
                self._start_pool(pending, n_pool, timeout, ring_batch, probed_here=True)
            self._choice = choice
            self.executor = choice.executor
            # ---- the C loader ----
            fields = layout.fields()
            if choice.executor == "process":
                init = {"layout": layout, "reseed": self.reseed,
                        "watch": _seedwatch.watchable(p.drew_from)}
                blob = pickle.dumps(init, protocol=pickle.HIGHEST_PROTOCOL)
                self._pool.set_init(blob, fields)
                exec_obj = self._pool
                n_threads = n_pool
                # what the workers need when the training loop changes the dataset (_renew)
                self._renew_args = (ds, n_pool, spec_n, base_seed, spec_init, name)
            else:
                _pyworker.install_worker_info_hook()
                # (no worker: no worker_init_fn, as the DataLoader's main process runs none)
                init_fn = worker_init_fn if choice.workers else None
                self._runner = ThreadRunner(ds, layout, choice.workers, base_seed, init_fn,
                                            self._capacity(ring_batch),
                                            kept if init_fn is None and not (
                                                p.uses_rng and not self.reseed) else None)
                exec_obj = _core.ThreadExec(self._runner, fields)
                fast = (self._runner.getitem, layout.fast_plan(), self._runner._flatten,
                        self._runner.failed)
                exec_obj.set_fast(*fast)
                self._thread_exec = exec_obj
                n_threads = max(1, choice.workers)  # (no worker: one, which never loads)
                _loader._close_at_exit(self)  # before the interpreter stops threads
            self._helper = None
            self._inline = choice.executor == "thread" and choice.workers == 0
            if self._inline:  # the training thread loads every batch (caller_loads)
                runner = _pyhelp.HelpRunner(ds, layout, None, self._runner, self.reseed,
                                            where=HERE)
                self._helper = _pyhelp.Helper(runner, fields, False, inline=True, fast=fast)
            elif _pyhelp.allowed(executor, workers, worker_init_fn, choice.executor, self.reseed,
                                 p.uses_rng, choice.workers):
                info = _pyworker.worker_info(0, max(1, workers or 1), base_seed, ds)
                threads = choice.executor == "thread"
                runner = _pyhelp.HelpRunner(ds, layout, info, self._runner if threads else None,
                                            self.reseed, None if threads else kept)
                self._helper = _pyhelp.Helper(runner, fields, not threads)
            pinned = False
            if pin_memory:
                pinned = torch is not None and torch.cuda.is_available()
                if not pinned:
                    warnings.warn("stoker.Loader: pin_memory=True but no CUDA device is "
                                  "available; batches stay in pageable memory", UserWarning,
                                  stacklevel=2)
            self._dataset = _core.Dataset(name, format="index", count=n)
            self._no_len = n == NO_LEN
            self._core_kwargs = dict(
                batch_size=ring_batch, n_threads=n_threads, n_slots=self.prefetch + 1,
                seed=seed, rank=rank, world=world_size, shuffle=bool(shuffle),
                drop_last=bool(drop_last), skip_corrupt=on_error == "skip", pinned=pinned,
                executor=exec_obj, trace_events=_TRACE_EVENTS if trace else 0,
                caller_loads=self._inline,
                **picked.get("order", {}), **picked.get("split", {}))
            self._trace = os.fspath(trace) if trace is not None else None
            self._core = _core.Loader(self._dataset, **self._core_kwargs)
            self._announce_ring()
        except BaseException:
            self._stop_pool()
            if pending is not None:
                pending.forget()
            raise
        self.timeout = timeout or 0
        if self.timeout:
            self._core.set_timeout(float(self.timeout))
        self._device = None
        self._on_device = False
        self.batch_size = None if (self._unbatched or batch_sampler is not None) else batch_size
        self.generator = generator
        for attr, value in dl_attrs.items():  # sampler, batch_sampler, collate_fn, ...:
            setattr(self, attr, value)         # the DataLoader's
        self.seed = seed
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.on_error = on_error
        self.rank, self.world_size = rank, world_size
        self.pin_memory = bool(pin_memory)  # the argument, as the DataLoader's
        self.autotune = False
        self._gen = 0
        self._iter = None
        self._mid_epoch = False
        self._cur_epoch = 0
        self._live = []
        self._held_slots = 0  # times the loop held a slot the next batch needed
        self._stats_base = None
        self._debug_delay = 0
        self._torch = torch
        # _assemble's path for fixed leaves, collated by default_collate's rules or (batch_size
        # None) a sample passed through default_convert (Batch.leaf_views)
        self._leaf_spec = self._layout.leaf_spec() if (
            torch is not None and self._collate_fn is None) else None
        if self._leaf_spec is not None and self._unbatched:
            from torch.utils.data._utils.collate import default_convert
            self._convert = default_convert
        # the dataset as the prepared batches and the workers' copies have it: a change the
        # training loop makes before the first pass (ds.set_epoch(start), a new transform) is
        # seen by the whole pass (__iter__), as by the DataLoader's workers, forked at iter()
        self._ended_mark = dataset_mark(self._torch_dataset)
        self._first_pass = True

    # ---- construction helpers ----

    @staticmethod
    def _start_method(ctx):
        """"fork" (worker servers come from stoker's fork server: _procpool.start_server) or
        "spawn" (multiprocessing's spawn, when multiprocessing_context asks for it)."""
        if ctx is not None:
            m = ctx if isinstance(ctx, str) else getattr(ctx, "get_start_method", lambda: None)()
            if m not in ("fork", "spawn", "forkserver"):
                raise _core.StokerInvalidError(
                    f"multiprocessing_context should be 'fork', 'spawn' or 'forkserver' (or a "
                    f"multiprocessing context), got {ctx!r}")
            return "spawn" if m == "spawn" else "fork"
        return "fork"

    def _start_pool(self, pending, n, timeout, ring_batch, probed_here=False):
        """The worker server and its n worker processes (forked at once; after the last, the
        fork server goes on as a lean interpreter: _pyworker_server.py). probed_here: the
        first samples ran in this process (_procpool.Pending.start)."""
        self._server = pending.start(probed_here)
        self._pool = _core.ProcPool(self._server.ctl.detach(), self._server.pid, n,
                                    timeout=float(timeout or 0),
                                    capacity=self._capacity(ring_batch),
                                    startup=_procpool.startup_limit(timeout),
                                    ready_owed=self._server.ready_owed,
                                    **pending.pool_options(self._renewed))

    def _capacity(self, ring_batch):
        """Rows whose object leaves are kept until the consumer takes them: every row the ring
        holds, twice (rows of batches a reset dropped are overwritten, oldest first)."""
        return max(4096, 2 * (self.prefetch + 2) * int(ring_batch))

    def _probe_request(self, n, picked, shuffle, seed, rank, world, executor, workers, unsafe,
                       files):
        """What the constructor asks of probe_samples (_pyworker): the indices, the seeding,
        whether the GIL meter runs, and when the probe may stop early."""
        samples, gil, by_rng = _executor.probe_plan(executor, workers, reseed=self.reseed,
                                                    unsafe=unsafe, files=files)
        indices = self._probe_indices(n, picked, shuffle, seed, rank, world)
        return {"indices": indices[:1] if samples == "one" else indices, "seed": seed,
                "reseed": self.reseed, "stop_on_rng": by_rng, "gil": gil}

    def _probe_indices(self, n, picked, shuffle, seed, rank, world):
        """The samples the constructor probes: the first of epoch 0's order on one rank, or this
        rank's first under a DistributedSampler's strided split (the first batch's, which the
        thread executor then takes from the probe instead of loading them again), else the
        first indices."""
        order = picked.get("order", {})
        k = _pyworker.PROBE_SAMPLES
        strided = picked.get("split", {}).get("strided")
        if "indices" in order:
            ours = order["indices"][rank::world] if strided else order["indices"]
            return [int(i) for i in (ours if len(ours) else order["indices"])[:k]]
        if not order and world == 1:
            return _core.epoch_order(n, bool(shuffle), seed, 0, k)
        if strided and rank < n:
            return list(range(rank, n, world)[:k])
        return list(range(min(n, k)))

    def _announce_ring(self):
        if self._pool is not None:
            fd, base, size, _ = self._core.ring_memory()
            self._pool.set_arena(fd, base, size)

    def _stop_pool(self):
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        server, self._server = self._server, None
        if server is not None:
            try:
                server.ctl.close()
            except OSError:
                pass
            server.wait()

    # ---- the consumer ----

    def _next_batch(self):
        out = self._next_group() if self._group_sizes is not None else self._next_rows()
        if out is None:  # the epoch's end: the dataset as it is
            self._ended_mark = dataset_mark(self._torch_dataset)
        return out

    def _next_raw(self):
        """The next ring batch, its error raised as the worker's exception where there is one."""
        core = self._core
        while True:
            helper = self._helper
            try:
                if helper is not None and helper.inline:
                    helper.run(core)
                elif helper is not None and helper.on:
                    before = vars_before(self._torch_dataset)
                    try:
                        helper.run(core)  # (a KeyboardInterrupt leaves it on: its sample again)
                    finally:
                        note_opened_here(self._torch_dataset, before)
                    helper.on = False
                return next(core, None)
            except _core.StokerBusyError:
                self._check_open()
                self._relieve_ring()
                core = self._core
                continue
            except _core.StokerStateError:
                # num_workers=0 with batches kept on another thread (a producer thread feeding a
                # queue): the next batch's slot was still held when this thread loaded, then
                # released there, so it is free but not loaded. Loading it is this thread's turn.
                if helper is None or not helper.inline or core.closed or not helper.run(core):
                    raise
                continue
            except _core.Error as e:
                self._after_error()
                w = self._worker_error(str(e))
                if w is None:
                    if type(e) is not _core.StokerIOError or self._pool is None:
                        raise
                    w = e.args  # a worker process lost (killed, timed out, not started)
            except RuntimeError:  # timeout= passed (the C core's): a worker may be stuck
                self._timed_out = True
                raise
            # Raised here, outside the except block: raising from inside it would keep the
            # error in this frame, a cycle (frame -> error -> traceback -> frame) holding the
            # callers' frames, and with them the loop's last batch, until the collector runs.
            if isinstance(w, tuple):
                raise _errors.StokerWorkerError(*w) from None
            w = [w]  # (reraise takes it out: no frame here holds it)
            _errors.reraise(w)

    def _worker_error(self, msg):
        """The wrapped exception __getitem__ raised for the sample the error message names, or
        None (stoker's own error stands)."""
        prefix = self._dataset_name_prefix()
        at = msg.find(prefix)
        if at < 0:
            return None
        digits = msg[at + len(prefix):].split("]", 1)[0]
        if not digits.isdigit():
            return None
        index = int(digits)
        if self._runner is not None:
            return self._runner.errors.pop(index, None)
        if self._helper is not None and index in self._helper.runner.errors:
            return self._helper.runner.errors.pop(index)  # loaded here (processes)
        if self._pool is not None:
            blob = self._pool.take_error(index)
            if blob is not None:
                tl = int.from_bytes(blob[:4], "little")
                return blob[4 + tl:]
        return None

    @property
    def num_workers(self):
        """num_workers as given, the DataLoader's attribute (a dataset drawing random numbers
        at num_workers=0 loads on one worker process, and this said 1); when it was not given,
        the worker count stoker chose (info()["n_threads"])."""
        given = self.__dict__.get("_num_workers_arg")
        return given if given is not None else self.n_threads

    @property
    def collate_fn(self):
        """The DataLoader's attribute (default_collate when none was given)."""
        return self.__dict__.get("_collate_attr")

    @collate_fn.setter
    def collate_fn(self, fn):
        # the training thread collates, so one assigned after construction collates the next
        # batches, as the DataLoader's next iter() takes it (it was silently ignored)
        if "_collate_attr" in self.__dict__:
            self._collate_fn = None if _torchcompat.is_default_collate(fn) else fn
            if self._collate_fn is not None:
                self._leaf_spec = None  # (the fast path below collates by default_collate's rules)
        self.__dict__["_collate_attr"] = fn

    def _dataset_name_prefix(self):
        return _pyworker.name(self._torch_dataset) + "["

    def _rows(self, raw):
        """(arrays of the fixed leaves, keys, masks, n) of a ring batch."""
        arrays, km = [], None
        for name, tensor, _ in raw.tensors():
            if name == "_obj":
                km = np.asarray(tensor)
            elif name != "index":
                arrays.append(np.asarray(tensor))
        n = km.shape[0]
        return arrays, km[:, 0], km[:, 1].view(np.uint64), n

    def _payloads(self, keys, masks, n):
        """Per row: (objects, extras) (objects padded with Nones when the row has none)."""
        empty = [None] * self._layout.n_objects
        if not keys.any():
            return [empty] * n, [None] * n
        keys = keys.tolist()
        # A batch handed back by a KeyboardInterrupt comes again with its rows' objects already
        # taken from the table: they are kept here (as taken) until the next batch is taken.
        # Asked by the batch's first keyed row: a row with nothing beside it has key 0 in every
        # batch, so it cannot tell this batch from the last.
        taken = self._taken
        if next(k for k in keys if k) not in taken:
            got = self._runner.take(keys) if self._runner is not None else \
                self._pool_objects(keys)
            self._taken = {k: g for k, g in zip(keys, got) if k}
        else:
            got = [taken.get(k) for k in keys]
        for r, (k, g) in enumerate(zip(keys, got)):
            if k and g is None:
                raise _core.StokerStateError(
                    f"row {r} of the batch lost its object leaves (more batches were prepared "
                    f"than the object table holds); please report this")
        return ([empty if g is None else g[0] for g in got],
                [None if g is None else g[1] for g in got])

    def _pool_objects(self, keys):
        """Per key, the (objects, extras) the worker processes kept, or those of a row the
        training thread loaded (a key < 0: _pyhelp)."""
        got = [None if b is None else pickle.loads(b) for b in
               self._pool.take_objects([max(k, 0) for k in keys])]
        if self._helper is not None:
            for r, k in enumerate(keys):
                if k < 0:
                    got[r] = self._helper.runner.take(k)
        return got

    def _assemble(self, raw):
        spec = self._leaf_spec
        if spec is not None:  # fixed leaves only, made by default_collate's (default_convert's)
            views = raw.leaf_views(spec, np.asarray, self._torch.from_numpy)  # rules
            if views is not None:  # (else a row did not fit: the general path below)
                if self._unbatched:
                    return self._convert(self._layout.sample_fixed(views))
                return self._layout.collate_fixed(views)
        arrays, keys, masks, n = self._rows(raw)
        objects, extras = self._payloads(keys, masks, n)
        layout, torch = self._layout, self._torch
        views = layout.views(arrays, n, torch)
        masks = masks.tolist()  # Python ints (a comprehension of int(m) cost 4-5 us a batch)
        np_views = layout.views(arrays, n, None) if (self._collate_fn is not None or
                                                     self._unbatched or any(masks)) else None
        if self._unbatched:  # batch_size=None: each sample on its own, default_convert'ed
            sample = layout.samples(views, np_views, objects, extras, masks)[0]
            if self._collate_fn is not None:
                return self._collate_fn(sample)
            if torch is not None:
                from torch.utils.data._utils.collate import default_convert
                return default_convert(sample)
            return sample
        return _collate.collate_rows(layout, views, np_views, objects, extras, masks,
                                     self._collate_fn, torch)

    def _next_rows(self):
        self._transit = None
        raw = self._next_raw()
        if raw is None:
            return None
        self._transit = raw  # handed back to the C loader if a KeyboardInterrupt comes
        self._mid_epoch = True
        self._cur_epoch = raw.epoch
        out = self._assemble(raw)
        return _loader.NONE_BATCH if out is None else out

    def _next_group(self):
        """A batch of a batch_sampler whose batches differ in size: its samples come one ring
        row at a time and are collated together. The samples gathered so far stay in
        self._carry until the batch is delivered, so a KeyboardInterrupt while waiting for a row
        or while collating costs none of them."""
        group = self._carry
        if group is None:
            size = self._group_sizes.next_size()
            if size is None:
                raw = self._next_raw()  # the end of the epoch
                if raw is not None:
                    raise _core.StokerStateError("batch_sampler: more samples than its batches")
                return None
            group = self._carry = _Group(size)
        layout, torch = self._layout, self._torch
        while len(group.samples) < group.size:
            raw = self._next_raw()
            if raw is None:
                raise _core.StokerStateError("batch_sampler: the epoch ended inside a batch")
            self._mid_epoch = True
            self._cur_epoch = raw.epoch
            arrays, keys, masks, n = self._rows(raw)
            objects, extras = self._payloads(keys, masks, n)
            views = layout.views(arrays, n, torch)
            np_views = layout.views(arrays, n, None)
            group.samples.extend(layout.samples(views, np_views, objects, extras,
                                                masks.tolist()))
        fn = self._collate_fn if self._collate_fn is not None else \
            _collate._default_collate(torch)
        out = fn(group.samples)
        if out is None:
            out = _loader.NONE_BATCH
        self._transit = group  # until delivered: a KeyboardInterrupt puts it back in _carry
        self._carry = None
        return out

    def _hand_back(self):
        """The delivery of the batch being collated was interrupted. By a KeyboardInterrupt
        (any BaseException that is not an Exception): the next call delivers it (a ring batch
        goes back to the C loader, its taken object leaves stay in self._taken; a batch_sampler
        batch's samples stay gathered), so a signal never costs a batch. By an Exception (the
        collate_fn failed): the batch is dropped and the loader goes on, as the DataLoader's."""
        t, self._transit = self._transit, None
        if isinstance(sys.exc_info()[1], Exception):
            self._carry = None
            return
        if isinstance(t, _Group):
            self._carry = t
        elif t is not None and self._core is not None and not self._core.closed:
            self._core._unget(t)

    def __iter__(self):
        mark, self._ended_mark = self._ended_mark, None
        first, self._first_pass = self._first_pass, False
        resumed = self._resumed  # (load_state_dict: the pass starts at the state's position)
        it = super().__iter__()
        if mark is not None and mark != dataset_mark(self._torch_dataset):
            self._reread_prepared(mark, first)
        self._carry = None  # a batch held back by a KeyboardInterrupt belongs to the old pass
        if self._group_sizes is not None:  # the batch the pass starts at
            self._group_sizes.restart(
                json.loads(self._core.save_state())["consumed"] if resumed else 0)
        return it

    def _reread_prepared(self, mark, first=False):
        """The training loop changed the dataset since the last pass ended, or since the
        constructor for the first pass (`first`) (dataset_mark, `mark` before): the new pass
        reads its samples from now on. The batches of its epoch prepared before (the ring runs
        ahead across the epoch's end) and the samples the constructor's probe kept for it are
        discarded, so the change (dataset.set_epoch(e), a new difficulty) is seen by every
        sample of the pass, as by the DataLoader's fresh workers, never by part of a batch.
        Worker threads share the dataset; worker processes hold a copy of their own, which they
        replace (_renew), unless persistent_workers=True asked to keep them after the first pass
        (the DataLoader's then keep their copy: they were started by the first iter())."""
        core = self._core
        if core is None or core.closed:
            return
        for runner in (self._runner, getattr(self._helper, "runner", None)):
            if runner is not None:
                runner.kept = None
        if self.executor == "thread":
            core.load_state(core.save_state())
            return
        if self._renew_args is None or (self.persistent_workers and not first):
            return
        ds, n, spec_n, base_seed, init_fn, name = self._renew_args
        try:
            spec = _procpool.WorkerSpec(as_first_found(ds), spec_n, base_seed, init_fn, name)
            blob = _procpool.pickle_spec(spec)
        except TypeError as e:
            since = "the loader was made" if first else "the last epoch ended"
            warnings.warn(f"stoker.Loader: {name} changed since {since}, but its "
                          f"worker processes keep the copy they have: it no longer pickles "
                          f"({type(e.__cause__).__name__}: {e.__cause__})", RuntimeWarning,
                          stacklevel=4)
            return
        failed = []

        def renew():
            failed.extend(self._renew(blob, n))
            if not failed:  # a worker restarted from now on (before the new loader's first
                self._renewed[0] = (spec, blob)  # sample) gets this copy too, not the fork
                self._pool.fresh_restarts()      # server's
        self._rebuild(between=renew)
        if failed:  # (the next pass tries again)
            self._ended_mark = mark
            w = failed[0]
            if isinstance(w, BaseException):
                raise w
            tl = int.from_bytes(w[:4], "little")
            _errors.reraise(w[4 + tl:])

    def _renew(self, blob, n):
        """The DataLoader starts its workers anew each epoch (persistent_workers=False, its
        default), so they see what the training loop changed; stoker's worker processes, when
        it changed something (dataset_mark), take the dataset as it is now in place of their
        copy, as a new worker would (seeded, worker_init_fn run again): the spec pickled
        (`blob`) sent to each, while the C loader is closed (no worker is in a sample). Cheaper
        than new processes, which a lean fork server makes without torch imported (~0.9 s for
        CIFAR10). Returns the failures: a worker's error reply (it could not load it), or the
        exception of a worker that is gone; the caller raises the first."""
        request = pickle.dumps({"spec": blob}, protocol=pickle.HIGHEST_PROTOCOL)
        failed = []
        for wid in range(n):
            try:
                status, payload = self._pool.probe(wid, request)
            except _core.Error as e:
                failed.append(e)
                continue
            if status != 0:
                failed.append(payload)
            elif payload != _procpool.RENEWED:  # another reply (a sample's) taken for the answer:
                # its worker may still hold the old copy, so no pass may run on it (mixed copies)
                failed.append(_core.StokerStateError(
                    f"worker process {wid} answered the dataset's renewal with another reply "
                    f"({len(payload)} bytes), so it may still hold the copy it had: no pass runs "
                    f"on a mix of the two (please report this; the next pass tries again)"))
        return failed

    def __len__(self):
        """len(batch_sampler) when one was given (the DataLoader's length, though a pass may
        give another count), else the batches of an epoch."""
        self._check_open()
        if self._given_batches:  # (batches of several sizes are a given batch_sampler's)
            try:
                return len(self.batch_sampler)
            except TypeError:  # no __len__ (the DataLoader's len() raises): the batches counted
                if self._group_sizes is not None:
                    return self._group_sizes.n_batches()
        return len(self._core)

    def _relieve_ring(self):
        """The loop holds the batch in the ring slot the next batch needs: give the loader a
        fresh ring at the same position (held batches stay valid)."""
        # (once is a batch kept from next(iter(loader)), the tutorials' peek: no warning for it)
        self._held_slots += 1
        if self._held_slots == 2:
            warnings.warn(
                f"stoker.Loader: the training loop still holds the batch in the ring slot the "
                f"next batch needs (prefetch={self.prefetch}, {self.prefetch + 1} ring slots); "
                f"stoker gives the loader a new ring to go on, which costs time and memory. Drop "
                f"references to old batches (or .clone() the tensors you keep), or raise "
                f"prefetch.", RuntimeWarning, stacklevel=5)
        self._rebuild()

    def _rebuild(self, between=None):
        """A new C loader at the old one's position (held batches stay valid); the worker
        processes learn its ring before it resumes (its reset waits for their samples).
        between(): called once the old one is closed, before the new one is made."""
        old = self._core
        state = old.save_state()
        self._stats_base = self._add_stats(self._stats_base, self._core_stats(old))
        old.close()
        self._core = None
        if between is not None:
            between()
        # (started at the state: made at epoch 0 and then moved, its workers loaded epoch 0's
        # first batches for nothing, again at each rebuild of a list(loader)). Its tickets wait
        # for the new ring's announcement: the new ring may be mapped where the old one was,
        # and a row there taken for the old ring's went to the old memory, a batch of zeros.
        if self._pool is not None:
            self._pool.set_arena(-1, 0, 0)
        core = _core.Loader(self._dataset, state=state, **self._core_kwargs)
        self._core = core
        self._announce_ring()
        if self.timeout:
            core.set_timeout(float(self.timeout))

    # ---- information ----

    def info(self):
        """Loader.info() plus executor ("thread" or "process"), executor_reason (one sentence),
        start_method (how worker processes were started: "fork", "spawn"; None on threads) and
        layout (the structure the first sample fixed)."""
        i = super().info()
        i.update(executor=self.executor, executor_reason=self._choice.reason,
                 start_method=None if self.executor == "thread" else self._server_method,
                 layout=self._layout.describe())
        return i

    @property
    def _server_method(self):
        return self._server.method if self._server is not None else None

    def stats(self):
        """Loader.stats() plus python_s (seconds in __getitem__, summed over the workers and
        the training thread), python_samples, help_samples (those of them the training thread
        loaded for the first batch: _pyhelp), gil_share (the GIL-held share of __getitem__ measured over the first
        samples), worker_deaths and worker_restarts (worker processes)."""
        st = super().stats()
        if self._runner is not None:
            fast, fast_ns = self._thread_exec.fast_counts()
            py, ns = self._runner.py_ns + fast_ns, self._runner.samples + fast
            deaths = restarts = 0
        elif self._pool is not None:
            ps = self._pool.stats()
            py, ns, deaths, restarts = ps["python_ns"], ps["samples"], ps["deaths"], \
                ps["restarts"]
        else:
            py = ns = deaths = restarts = 0
        helped = self._helper.runner.samples if self._helper is not None else 0
        if self._pool is not None and self._helper is not None:
            py, ns = py + self._helper.runner.py_ns, ns + helped
        if self._helper is not None and self._helper.inline:  # its fast path's
            fast, fast_ns = self._helper.exec.fast_counts()
            py, ns, helped = py + fast_ns, ns + fast, helped + fast
        st.update(python_s=py / 1e9, python_samples=ns, gil_share=self._probe.gil_share,
                  worker_deaths=deaths, worker_restarts=restarts, help_samples=helped)
        return st

    def worker_pids(self):
        """The worker processes' ids (the process executor; [] on threads)."""
        return self._pool.pids() if self._pool is not None else []

    # ---- lifetime ----

    def close(self):
        """Stop the workers (threads finish the sample they are in; worker processes are
        stopped at once) and free the loader. Batches still held stay valid. After a timeout=
        error on worker threads, one may be in a __getitem__ that never returns: close() then
        waits for them at most the timeout, and leaves the loader to be freed when they return
        (a RuntimeWarning says so), so that neither close() nor the interpreter's exit hangs."""
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.interrupt()  # threads waiting on a worker return now
        try:
            super().close()
        finally:
            self._stop_pool()
            fetch = getattr(getattr(self, "_order", None), "fetch", None)
            if fetch is not None:  # (its worker processes are gone)
                fetch.drop_files()

    def _close_wait(self):
        """After a timeout= error on worker threads (one may be in a __getitem__ that never
        returns): the seconds close() waits for them (Loader.close)."""
        if self._timed_out and self._pool is None:
            return max(1.0, float(self.timeout))
        return None

    def __repr__(self):
        if self._core is None:
            return "<stoker.Loader (closed)>"
        size = "no len()" if self._no_len else f"{len(self._dataset)} samples"
        return (f"<stoker.Loader {_pyworker.name(self._torch_dataset)} ({size}), "
                f"{self.executor} executor, {len(self)} batches/epoch, rank "
                f"{self.rank}/{self.world_size}, epoch {self.epoch}>")


_loader.register_python_datasets(is_python_dataset, loader_class)

"""stoker.Loader: the PyTorch-facing loader over the C core.

Each batch is a :class:`Batch` (a dict) of torch tensors (numpy arrays when torch is not
importable, or with ``output="numpy"``) that are zero-copy views of a slot of the loader's
ring: every field of the dataset plus ``index`` (int64, the global record number of each
sample). A bytes field ``name`` comes as a uint8 tensor ``[n, stride]`` (each sample's bytes at
the start of its row; the rest of the row is unspecified) plus ``name_lengths`` (int64 [n]).
The slot goes back to the ring when the last tensor viewing it is garbage-collected.

See docs/python.md for the full contract.
"""
import atexit
import collections
import json
import os
import sys
import threading
import warnings
from _thread import get_ident
import weakref

import numpy as np

from . import _core
from . import _nvrtc
from . import _batchmap
from . import _torchcompat
from . import _torchprof
from . import tokens as _tokens
from ._torchcompat import check_int as _check_int, resolve_rank as _resolve_rank
from . import transforms as _transforms
from . import audio as _audio
from . import video as _video
from .batch import Batch, _DeviceView
from .dataset import Dataset

__all__ = ["Loader", "Batch"]

_DEFAULT_PREFETCH = 3
_TRACE_EVENTS = 1 << 16  # per thread, with trace=: the first 65536 events of each thread

# stats() fields that describe the present (taken from the newest core after a rebuild);
# every other field is a counter and adds up.
_GAUGES = ("active_threads", "depth", "autotune_reason", "n_threads", "pinned", "pinned_bytes",
           "pinned_total", "device", "finish", "device_reason")


def _torch():
    """torch if importable (None when absent or blocked with sys.modules['torch'] = None)."""
    try:
        import torch
    except ImportError:
        return None
    return torch


class _NoneBatch:
    """What _next_batch returns for a batch that is None (a Python dataset's unbatched sample,
    or its collate_fn's result), which the DataLoader delivers as such; None itself means the
    end of the epoch there."""
    __slots__ = ()


NONE_BATCH = _NoneBatch()


def superseded(loader):
    """The error next() raises on an iterator whose pass a later iter(), set_epoch() or
    load_state_dict() on the same loader ended before its epoch's end. Not StopIteration: that
    would end a for loop, or zip(loader, loader), as if the epoch were over, silently short."""
    return _core.StokerStateError(
        f"this iterator's pass was ended by a later {loader._ended_by} on the same "
        f"stoker.Loader, before the end of its epoch: a loader delivers one pass at a time "
        f"(the DataLoader runs two live iterators of one loader as two independent passes). "
        f"Iterate the iterator iter() returned last, or make a second stoker.Loader for a "
        f"second pass at the same time")


class _LoaderIter:
    """The iterator of one pass over a Loader (one epoch). It ends (StopIteration) at the end
    of its epoch. The loader serves one pass at a time: when a later iter() started another
    pass before this one's end, the rest of this pass comes from a loader of its own (as the
    DataLoader's two live iterators are two independent passes): a second Loader made with the
    same arguments and resumed at this pass's position (`_resume`, a state_dict() taken when it
    was ended), made when this iterator is used again and closed at the pass's end. Where that
    cannot give the same samples (a sampler of the user's, which the second loader would
    iterate and set_epoch() again; an IterableDataset), and after set_epoch() or
    load_state_dict(), next() raises StokerStateError instead; after close(), too.
    While a torch profiler records, each next() is its range "enumerate(DataLoader)#
    _LoaderIter.__next__", as the DataLoader's (_torchprof)."""

    __slots__ = ("_loader", "_gen", "_done", "_thread", "_ident", "_resume", "_rest",
                 "_rest_kw", "__weakref__")

    def __init__(self, loader, gen):
        self._loader, self._gen, self._done = loader, gen, False
        self._thread = threading.current_thread()
        self._ident = self._thread.ident
        self._resume = None  # the position this pass was ended at, when it may go on
        self._rest = None    # (the second loader, its iterator): this pass's rest
        self._rest_kw = {}   # the second loader's arguments besides the loader's own

    def __iter__(self):
        return self

    def __len__(self):
        return len(self._loader)

    def __next__(self):
        rng = _torchprof.range_for(self)  # a torch.profiler range, as the DataLoader's
        if rng is None:
            return self._next()
        with rng:
            return self._next()

    def _next(self):
        loader = self._loader
        if self._done:
            raise StopIteration
        if loader._core is None:
            self._end_rest()
            raise _core.StokerStateError(
                "the loader was closed (close() was called) before this epoch ended")
        if self._gen != loader._gen:
            if self._resume is None:
                raise superseded(loader)
            return self._next_of_rest()
        ident = get_ident()
        if ident != self._ident:  # (current_thread() is a Python call: once per thread)
            self._thread, self._ident = threading.current_thread(), ident
        try:
            batch = loader._next_batch()
            if batch is None:
                self._done = True
                loader._mid_epoch = False
                raise StopIteration
            if batch is NONE_BATCH:  # a Python dataset's sample or collate_fn result: None
                batch = None
            elif loader._fields is not None:
                batch = tuple(batch[f] for f in loader._fields)
                if loader._finish_tuple is not None:  # _inmemory's (MNIST, TensorDataset)
                    batch = loader._finish_tuple(batch)
        except BaseException:
            loader._hand_back()  # e.g. Ctrl-C while it was converted: the next call has it
            raise
        loader._transit = None  # delivered (no signal check between here and the caller)
        return batch

    def _next_of_rest(self):
        """The next batch of this pass after a later iter() ended it on its loader: from a
        second loader resumed at its position (made at the first call)."""
        if self._rest is None:
            second = self._loader._second_loader(self._rest_kw)
            try:
                second.load_state_dict(self._resume)
                self._rest = (second, iter(second))
            except BaseException:
                second.close()
                raise
        try:
            return next(self._rest[1])
        except StopIteration:
            self._done = True
            self._end_rest()
            raise

    def _end_rest(self):
        if self._rest is not None:
            second, self._rest = self._rest[0], None
            second.close()

    def _active_elsewhere(self):
        """The thread iterating this pass, when it is another live thread and the pass is not
        over (None otherwise)."""
        t = self._thread
        if self._done or self._gen != self._loader._gen or t is threading.current_thread():
            return None
        return t if t.is_alive() else None


# Python datasets (their samples come from __getitem__) are run by a Loader subclass defined
# above this module (stoker/_pydataset.py), which registers here when imported (the package's
# __init__ imports it): (is_python_dataset(data, kwargs), loader_class(data)).
_PYTHON_DATASETS = []


def register_python_datasets(is_python_dataset, loader_class):
    _PYTHON_DATASETS[:] = [is_python_dataset, loader_class]


def _pydataset_class(data, kwargs):
    """The Loader subclass that runs `data`'s __getitem__, or None for data stoker reads."""
    if not _PYTHON_DATASETS or not _PYTHON_DATASETS[0](data, kwargs):
        return None
    return _PYTHON_DATASETS[1](data)


def _remade(cls, data, args, dataset, kwargs):
    """A loader made again from its arguments (Loader.__reduce__)."""
    return cls(data, *args, dataset=dataset, **kwargs)


def _user_subclass(cls):
    """Whether `cls` is a subclass of Loader the user wrote (not one of stoker's own)."""
    return issubclass(cls, Loader) and not cls.__module__.startswith("stoker.")


_MIXED = {}


def _mixed(cls, sub):
    """The class of a user's Loader subclass over a Python dataset: the user's class first in
    its MRO, then stoker's Python-dataset loader `sub` (class MyLoader(stoker.Loader) gave the
    native loader, which refused every user Dataset)."""
    key = (cls, sub)
    if key not in _MIXED:
        _MIXED[key] = type(cls.__name__, (cls, sub), {"__module__": cls.__module__,
                                                      "__qualname__": cls.__qualname__})
    return _MIXED[key]


_MAPPED = weakref.WeakSet()  # loaders whose worker threads run Python (map=)


@atexit.register
def _close_mapped():
    for loader in list(_MAPPED):
        try:
            loader.close()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass


def _close_at_exit(loader):
    """Close `loader` at exit before the exit handlers registered so far run (atexit runs the
    last registered first, so the hook is registered again): a library the dataset uses must
    not finalise while a worker thread is inside it. h5py's handler holds HDF5's lock and then
    takes the GIL; a worker thread still loading a sample holds the GIL and waits for that lock:
    the process hung at exit (bench_pydataset.py's HDF5 scenario, a loader not closed)."""
    _MAPPED.add(loader)
    atexit.unregister(_close_mapped)
    atexit.register(_close_mapped)


def _close_core(core, trace):
    """Write the trace asked for, then stop the C loader's threads and free it."""
    try:
        if trace and not core.closed:
            core.trace_write(trace)
    finally:
        core.close()


class Loader:
    """stoker.Loader(data, batch_size, shuffle=False, seed=0, drop_last=False,
    n_threads=None, n_slots=None, pin_memory=None, device=None, rank=None,
    world_size=None, transforms=None, on_error="raise", trace=None, format=None,
    output=None, fields=None, strict=None, memory_budget=None, **DataLoader arguments)

    ``data`` is a dataset of any format stoker reads (``.stk`` shards, an ImageFolder
    directory, ``.npy`` files; ``format=`` names it instead of detecting it) or a
    stoker.Dataset. ``n_threads`` is the number of worker threads; ``num_workers``, the
    DataLoader's name, is its alias (one or the other). ``prefetch``: batches prepared ahead of
    the one the training loop holds (the ring has ``prefetch + 1`` slots). Iterating gives :class:`Batch` dicts (``output="tuple"``: tuples of
    ``fields``); each ``iter()`` is the next epoch. See docs/python.md for every argument.

    The one-name switch: ``data`` may also be a ``torchvision.datasets.ImageFolder`` (or a
    DatasetFolder with the default loader) whose transform stoker can express, with the
    DataLoader's arguments (sampler, collate_fn, timeout, generator, prefetch_factor,
    persistent_workers, ...): it then yields ``(images, labels)`` as the DataLoader would,
    reading the folder directly (docs/python.md "From DataLoader"). ``n_threads=None`` (or ``"auto"``) lets the loader
    choose its thread count and depth online (at most one thread per CPU and ``prefetch``
    batches): the fewest threads that keep the training loop from waiting; ``stats()`` says
    what it chose and why. ``trace="out.json"`` records a Chrome/Perfetto trace written at
    ``close()`` (or with ``write_trace()``). ``strict`` (default: the transform's, else True):
    a JPEG that libjpeg reports as corrupt fails its record (skipped under
    ``on_error="skip"``); ``strict=False`` keeps libjpeg's lenient recovery. ``exact``
    (default: the transform's, else None): None decodes exactly when no op is random (an
    evaluation transform gives torchvision's pixels to within a level) and fast otherwise;
    True/False force it.
    ``memory_budget=`` (bytes) bounds what the loader
    takes: the ring and each thread's scratch (over them the Loader is not created,
    StokerLimitError saying what takes what) and the decode buffers as they grow (a decode that
    would go over fails its record, named; skipped under ``on_error="skip"``).
    ``cache_dir=`` / ``cache_limit=`` (bytes or "20G"; default ``STOKER_CACHE_DIR`` /
    ``STOKER_CACHE_LIMIT``): the on-disk cache of s3:// and http(s):// data, shared by every
    process on the machine (docs/remote.md). Audio (docs/audio.md): ``transforms`` may be
    torchaudio transforms and ``stoker.audio`` ops (batch field ``audio``); ``sample_rate=``
    resamples every file to that rate when the ops have no Resample. Video (docs/video.md):
    ``frames_per_clip=T`` with ``frame_step=S`` or ``frame_rate=F``, ``clips_per_video=K``,
    ``clip_sampling=`` ("random", the default with shuffle=True, or "uniform": K evenly spaced
    clips per video, the default with shuffle=False) and ``short_video=`` ("pad", "loop" or
    "skip") make each sample a clip of a video file, the image ``transforms`` applied to all of
    its frames with one set of parameters (batch fields ``video`` and ``video_pts``).
    """

    # The DataLoader's attributes that describe the epochs: assigning one after construction
    # (loader.batch_size = 64) would not change the batches already planned, so it is refused
    # as the DataLoader refuses it, not accepted silently.
    _SET_ONCE = frozenset(("batch_size", "batch_sampler", "sampler", "drop_last", "dataset",
                           "persistent_workers"))
    # The DataLoader reads these at each iter(); stoker's workers started with the constructor's
    # values, so a later assignment, which was silently ignored (loader.timeout = 0.3 never
    # timed out), is refused too. A Python dataset's collate_fn is the exception: the training
    # thread collates, and takes a new one (PyLoader.collate_fn).
    _STARTED_WITH = frozenset(("collate_fn", "timeout", "worker_init_fn", "generator",
                               "multiprocessing_context", "prefetch_factor", "pin_memory",
                               "pin_memory_device", "num_workers"))
    _GUARDED = _SET_ONCE | _STARTED_WITH

    _resumed = False  # load_state_dict() was called and no pass began since

    def __setattr__(self, attr, val):
        if attr in Loader._GUARDED:  # (one lookup for the attributes set at every batch)
            if attr in Loader._SET_ONCE and (attr in self.__dict__ or attr == "dataset"):
                raise ValueError(f"{attr} attribute should not be set after stoker.Loader is "
                                 f"initialized (as with the DataLoader): create a new Loader")
            if attr in self.__dict__ or attr == "num_workers":
                raise ValueError(f"{attr} attribute should not be set after stoker.Loader is "
                                 f"initialized: its workers started with the value the "
                                 f"constructor got; create a new Loader")
        object.__setattr__(self, attr, val)

    def __new__(cls, data=None, *args, dataset=None, **kwargs):
        # A Python dataset (its samples come from __getitem__) is a PyLoader (_pydataset.py).
        src = data if data is not None else dataset
        given = dict(kwargs, batch_size=args[0]) if args else kwargs  # (batch_size=None:
        sub = _pydataset_class(src, given) if cls is Loader or _user_subclass(cls) else None
        obj = super().__new__(cls if sub is None else sub if cls is Loader else _mixed(cls, sub))
        # the arguments, for a second loader that goes on with an ended pass (_LoaderIter)
        object.__setattr__(obj, "_made_with", (cls, data, args, dataset, kwargs))
        return obj

    def __init__(self, data=None, batch_size=None, shuffle=False, seed=None, drop_last=False,
                 num_workers=None, prefetch=None, pin_memory=None, device=None, rank=None,
                 world_size=None, transforms=None, on_error="raise", trace=None, *,
                 transform_field=None, verify=True, output=None, format=None, fields=None,
                 strict=None, sampler=None, batch_sampler=None, collate_fn=None, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None,
                 prefetch_factor=None, persistent_workers=None, pin_memory_device=None,
                 in_order=None, batch_transforms=None, map=None, label_field="label",
                 memory_budget=None, cache_dir=None, cache_limit=None, n_threads=None,
                 seq_len=None, tokens=None, eos=None, bos=None, packing=None, token_dtype=None,
                 token_field=None, ids_dtype=None, pad_id=None, exact=None, sample_rate=None,
                 dataset=None, frames_per_clip=None, frame_step=None, frame_rate=None,
                 clips_per_video=None, clip_sampling=None, short_video="pad"):
        # multiprocessing_context, persistent_workers (always true: the threads live as long
        # as the loader), pin_memory_device (the pinned ring serves any device) and in_order
        # (always in order) are accepted with those meanings: nothing to do.
        self._core = None  # so that close()/__del__ work on a half-built object
        self._map = None
        self._dataset = None
        self._own_dataset = False
        self._fields = None
        self._finish_tuple = None
        self._dist_sampler = None
        self._torch_dataset = None
        self._dataset_weak = None  # the dataset this loader opened, after close()
        if dataset is not None:  # the DataLoader's keyword
            if data is not None:
                raise _core.StokerInvalidError("pass the data once: stoker.Loader(data, ...) or "
                                               "stoker.Loader(dataset=data, ...)")
            data = dataset
        if data is None:
            raise _core.StokerInvalidError("stoker.Loader needs the data (a path, a dataset)")
        threads_arg = "num_workers"  # the name the thread count came under, for messages
        if n_threads is not None:
            if num_workers is not None:
                raise _core.StokerInvalidError("n_threads= and num_workers= (its DataLoader "
                                               "alias) name one setting: pass one of them")
            num_workers, threads_arg = n_threads, "n_threads"
        # A token corpus (seq_len=, stoker.mix): rows of seq_len tokens (stoker/tokens.py).
        self._tokens = _tokens.loader_corpus(
            data, seq_len, tokens, dict(eos=eos, bos=bos, packing=packing, token_dtype=token_dtype,
                                        token_field=token_field, ids_dtype=ids_dtype,
                                        pad_id=pad_id), format, verify, cache_dir, cache_limit)
        self._tokens_finish = self._tokens.finish if self._tokens is not None and \
            self._tokens.finishes else None
        if self._tokens is not None:
            data, format, cache_dir, cache_limit = self._tokens.dataset, None, None, None
            self._own_dataset = True
        dl = _torchcompat.dataloader_args(  # the DataLoader's arguments in stoker's terms
            data, batch_size=batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last,
            num_workers=num_workers, prefetch=prefetch, rank=rank, world_size=world_size,
            transforms=transforms, output=output, fields=fields, sampler=sampler,
            batch_sampler=batch_sampler, collate_fn=collate_fn, timeout=timeout,
            worker_init_fn=worker_init_fn, generator=generator, prefetch_factor=prefetch_factor)
        given = dict(worker_init_fn=worker_init_fn, persistent_workers=persistent_workers,
                     multiprocessing_context=multiprocessing_context,
                     pin_memory_device=pin_memory_device)
        dl_attrs = {"sampler": sampler, "batch_sampler": batch_sampler,  # stoker's own data
                    "collate_fn": collate_fn, "prefetch_factor": prefetch_factor, **given}
        if dl.torch_dataset is not None:  # as the DataLoader's attributes
            dl_attrs = _torchcompat.dataloader_attrs(
                dl.torch_dataset, shuffle=bool(shuffle), sampler=sampler,
                batch_sampler=batch_sampler, batch_size=dl.batch_size, drop_last=drop_last,
                generator=generator, collate_fn=collate_fn, num_workers=num_workers,
                prefetch_factor=prefetch_factor, **given)
        torch_dataset, data, transforms, output = dl.torch_dataset, dl.data, dl.transforms, \
            dl.output
        fields, batch_size, shuffle, seed = dl.fields, dl.batch_size, dl.shuffle, dl.seed
        rank, world_size, prefetch, picked = dl.rank, dl.world_size, dl.prefetch, dl.picked
        if torch_dataset is not None:
            self._own_dataset = True  # opened here: closed with the loader unless shared
        self._finish_tuple = dl.finish
        self._dist_sampler = picked.get("distributed")
        self._order = picked.get("custom")  # a sampler iterated each epoch (_torchcompat)
        if output == "tuple":
            if fields is None:
                fields = ("image", "label")
            if isinstance(fields, str) or not fields or \
                    not all(isinstance(f, str) for f in fields):
                raise _core.StokerInvalidError(
                    f"fields should be a sequence of field names, got {fields!r}")
            self._fields = tuple(fields)
            output = None
        elif fields is not None:
            raise _core.StokerInvalidError("fields= goes with output='tuple'")
        autotune = num_workers is None or (isinstance(num_workers, str) and num_workers == "auto")
        if autotune:
            threads = 0  # at most one per online CPU (the C default); the autotuner picks
        else:
            threads = _check_int(num_workers, threads_arg, -1 << 62)
            if threads < 0:
                raise _core.StokerInvalidError(f"{threads_arg} option should be non-negative, "
                                               f"but got {threads_arg}={threads}")
            # 0 means "in the main process" in PyTorch; threads are cheap: one worker thread
            threads = max(1, threads)
        if prefetch is None or (isinstance(prefetch, str) and prefetch == "auto"):
            prefetch = _DEFAULT_PREFETCH  # an upper bound when the autotuner runs
        self.prefetch = _check_int(prefetch, "prefetch", 1)
        seed = _torchcompat.check_seed(seed)
        if on_error not in ("raise", "skip"):
            raise _core.StokerInvalidError(f"on_error should be 'raise' or 'skip', but got "
                                           f"on_error={on_error!r}")
        rank, world_size = _resolve_rank(rank, world_size)
        torch = _torch()
        if output is None:
            output = "torch" if torch is not None else "numpy"
        if output not in ("torch", "numpy"):
            raise _core.StokerInvalidError(f"output should be 'torch', 'numpy' or 'tuple', got "
                                           f"{output!r}")
        if output == "torch" and torch is None:
            raise ImportError("stoker.Loader(output='torch') needs torch, which is not "
                              "importable")
        self._device = self._resolve_device(device, torch)
        if self._device is not None and output == "numpy":
            raise _core.StokerInvalidError("output='numpy' gives host arrays; it cannot be "
                                           f"combined with device={device!r}")
        pinned = False
        if self._device is not None:
            pinned = True  # the C loader pins the ring to copy from it
        elif pin_memory:
            if torch is not None and torch.cuda.is_available():
                pinned = True
            else:
                warnings.warn("stoker.Loader: pin_memory=True but no CUDA device is available; "
                              "batches stay in pageable memory", UserWarning, stacklevel=2)
        if trace is not None:
            trace = os.fspath(trace)
        self._trace = trace
        finish = None
        batch_args = _batchmap.batch_ops_args(batch_transforms)
        if map is not None and not callable(map):
            raise _core.StokerInvalidError(f"map should be a function of one sample dict, not "
                                           f"{type(map).__name__}")
        if _video.is_video(frames_per_clip, frame_step, frame_rate, clips_per_video):
            self._transform = _video.compile(  # docs/video.md
                transforms, frames_per_clip, frame_step, frame_rate, clips_per_video,
                clip_sampling or ("random" if shuffle else "uniform"), short_video, strict)
        elif sample_rate is not None or _audio.is_audio(transforms):  # docs/audio.md
            self._transform = _audio.compile(transforms, sample_rate=sample_rate, strict=strict)
        elif self._device is not None and not batch_args and map is None:
            self._transform, finish = _transforms.compile_for_device(transforms, strict=strict,
                                                                     exact=exact)
        else:
            self._transform = _transforms.compile(transforms, strict=strict, exact=exact)
        if isinstance(data, _core.Dataset):
            if cache_dir is not None or cache_limit is not None:
                raise _core.StokerInvalidError("cache_dir=/cache_limit= apply where the data is "
                                               "opened: pass them to stoker.Dataset")
            self._dataset = data
        else:
            self._dataset = Dataset(data, verify=verify, format=format, cache_dir=cache_dir,
                                    cache_limit=cache_limit)
            self._own_dataset = True
        self._torch_dataset = torch_dataset
        _torchcompat.check_sampler_size(picked, len(self._dataset))
        if self._fields is not None:
            names = [f["name"] for f in self._dataset.fields] + ["index"]
            missing = [f for f in self._fields if f not in names]
            if missing:
                raise _core.StokerInvalidError(f"fields {missing} are not in the dataset "
                                               f"(its fields: {', '.join(names)})")
        self._core_kwargs = dict(
            batch_size=batch_size, n_threads=threads, n_slots=self.prefetch + 1, seed=seed,
            rank=rank, world=world_size, shuffle=bool(shuffle), drop_last=bool(drop_last),
            skip_corrupt=on_error == "skip", verify=bool(verify), pinned=pinned,
            transform=self._transform, transform_field=transform_field, autotune=autotune,
            trace_events=_TRACE_EVENTS if trace else 0, **picked.get("order", {}),
            **picked.get("split", {}))
        if memory_budget is not None:
            self._core_kwargs["memory_budget"] = _check_int(memory_budget, "memory_budget", 1)
        if self._device is not None:
            self._core_kwargs["device"] = self._device.index
            self._core_kwargs.update(finish or {})
        if batch_args:
            self._core_kwargs.update(batch_args, label_field=label_field)
        self._map = None
        if map is not None:
            self._map = self._map_setup(map, seed, transform_field, verify)
            self._core_kwargs.update(map_fn=self._map,
                                     map_fields=_batchmap.c_fields(self._map.schema))
            _close_at_exit(self)  # before the interpreter stops running threads
        self._core = _core.Loader(self._dataset, **self._core_kwargs)
        self.timeout = timeout or 0
        if self.timeout:
            self._core.set_timeout(float(self.timeout))
        self._on_device = False   # batches come in the loader's device ring
        if self._device is not None:
            st = self._core.stats()
            self._on_device = st["device"] >= 0
            if not self._on_device:
                warnings.warn(f"stoker.Loader(device={str(self._device)!r}): stoker cannot copy "
                              f"on its own stream ({st['device_reason']}); batches are copied "
                              f"with a synchronous .to(device) instead", RuntimeWarning,
                              stacklevel=2)
        self.batch_size = batch_size
        self.generator = generator
        for attr, value in dl_attrs.items():  # sampler, batch_sampler, collate_fn, ...:
            setattr(self, attr, value)         # the DataLoader's
        self.seed = seed
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.on_error = on_error
        self.rank, self.world_size = rank, world_size
        self.output = output
        # a torch dataset's: the argument, as the DataLoader's (True without CUDA too)
        self.pin_memory = bool(pin_memory) if self._torch_dataset is not None else pinned
        self.autotune = autotune
        self._convert = self._converter(output, torch)
        # Host batches made by the extension in one call (Batch.as_dict: a bytes field or
        # bfloat16 falls back to convert, tensor by tensor); a copy to the device goes through
        # convert as well.
        self._fast = None if self._device is not None else (
            Batch, np.asarray, torch.from_numpy if output == "torch" else None)
        self._gen = 0             # bumped by iter(), set_epoch and load_state_dict
        self._iter = None         # weakref to the newest _LoaderIter
        self._transit = None      # the ring Batch being converted, until delivered
        self._mid_epoch = False   # a pass stopped before the end of its epoch
        self._cur_epoch = 0       # epoch of the last batch delivered
        self._live = collections.deque()  # (weakref Batch dict, weakref ring Batch)
        self._held_slots = 0  # times the loop held a slot the next batch needed
        self._stats_base = None   # counters of cores replaced by a rebuild
        self._debug_delay = 0

    # ---- construction helpers ----

    def _map_setup(self, fn, seed, transform_field, verify):
        """Run `fn` on record 0 (decoded and transformed as the workers will) in this thread:
        its result fixes the output fields. Returns the runner the worker threads call."""
        probe = _core.Loader(self._dataset, batch_size=1, n_threads=1, n_slots=1, seed=seed,
                             rank=0, world=1, verify=bool(verify), transform=self._transform,
                             transform_field=transform_field)
        try:
            raw = next(probe, None)
            items = _batchmap.probe_items(raw)
            del raw
        finally:
            probe.close()
        try:
            out = fn(_batchmap.sample_dict(items))
        except Exception as e:
            raise _core.StokerInvalidError(
                f"{self._dataset.describe(0)}: map function raised {type(e).__name__}: {e} "
                "(on the first record, which fixes the output fields)") from e
        fields = {f["name"]: f for f in self._dataset.fields}

        def bytes_room(name, first):
            # a bytes field of the dataset: its largest record; a new one: the largest record
            # (what fn derives its value from), at least twice the first value
            f = fields.get(name)
            room = f["max_size"] if f is not None and f["kind"] == "bytes" else \
                max(self._dataset.max_record_size, 2 * first)
            return max(64, -(-int(room) // 64) * 64)
        schema = _batchmap.map_schema(out, bytes_room)
        runner = _batchmap.MapRunner(fn, schema)
        runner.pack(out)  # the first sample's values must be batchable as they are
        return runner

    @staticmethod
    def _resolve_device(device, torch):
        if device is None:
            return None
        if torch is None:
            raise ImportError("stoker.Loader(device=...) needs torch")
        dev = torch.device(device)
        if dev.type == "cpu":
            return None
        if dev.type != "cuda":
            raise _core.StokerNotSupportedError(f"device {str(dev)!r} is not supported (use "
                                                "'cpu' or 'cuda')")
        if not torch.cuda.is_available():
            raise _core.StokerNotSupportedError(
                f"device={str(device)!r} needs a CUDA device, but torch.cuda.is_available() is "
                "False on this machine; leave device=None (CPU tensors)")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        _nvrtc.export()  # the NVRTC torch ships, for the finishing kernel (unless set)
        return dev

    def _converter(self, output, torch):
        asarray = np.asarray
        if output == "numpy":
            return asarray
        from_numpy, bf16, device = torch.from_numpy, torch.bfloat16, self._device

        def convert(t):
            a = asarray(t)
            if a.dtype == np.uint16:  # bfloat16 (torch has no uint16): reinterpret the bits
                x = from_numpy(a.view(np.int16)).view(bf16)
            else:
                x = from_numpy(a)
            if device is not None:
                # Only when the C loader could not copy on its own stream: a synchronous copy,
                # after which the ring slot is free again.
                x = x.to(device)
            return x
        return convert

    def _device_batch(self, raw, out):
        """Fill `out` with zero-copy CUDA tensors of a batch in the loader's device ring, made
        safe for the current stream: it waits (on the device, no host sync) for the batch's
        copy, and the batch's release is recorded on it. To read them on another stream s, call
        out.record_stream(s): tensor.record_stream(s) does nothing for them (torch skips memory
        it did not allocate, and these tensors view stoker's ring through
        __cuda_array_interface__)."""
        torch = sys.modules["torch"]
        dev = self._device
        raw.device_wait(torch.cuda.current_stream(dev).cuda_stream)
        as_tensor, bf16 = torch.as_tensor, torch.bfloat16
        with torch.cuda.device(dev):
            for name, address, shape, dtype, lengths in raw.device_tensors():
                x = as_tensor(_DeviceView(raw, address, shape, dtype), device=dev)
                out[name] = x.view(bf16) if dtype == "bfloat16" else x
                if lengths is not None:
                    out[name + "_lengths"] = torch.from_numpy(np.asarray(lengths))
        out._raw = weakref.ref(raw)

    # ---- iteration ----

    def __iter__(self):
        self._check_open()
        self._check_consumer("iterate")
        old = self._iter() if self._iter is not None else None
        ahead = False
        rest = self._rest_overrides() if old is not None and not old._done and \
            old._gen == self._gen else None
        if rest is not None:
            try:
                old._resume = self.state_dict()  # where that pass goes on (_LoaderIter)
                old._rest_kw = rest
            except Exception:  # noqa: BLE001 - no state: its next() says the pass was ended
                old._resume = None
            # one that had not begun keeps its epoch too: this pass is the next, in an order of
            # its own (zip(loader, loader) pairs two orders, as the DataLoader's two iterators)
            ahead = old._resume is not None and not self._mid_epoch
        if self._mid_epoch:
            # The previous pass was abandoned mid-epoch: this pass is the next epoch.
            self._core.set_epoch(self._cur_epoch + 1)
            self._mid_epoch = False
        elif ahead:
            self._core.set_epoch(self._core.epoch + 1)
        sampler = self._dist_sampler
        if sampler is not None and self._core.epoch != sampler.epoch and not self._resumed:
            # DistributedSampler.set_epoch(e) chooses the epoch, as it does for the DataLoader
            # (a pass resumed by load_state_dict() keeps the state's epoch and position)
            self._core.set_epoch(_check_int(sampler.epoch, "DistributedSampler.epoch", 0))
        if self._order is not None:
            self._order.next_pass(self)  # the custom sampler's indices for this epoch
        self._resumed = False
        self._gen += 1
        self._ended_by = "iter()"
        it = _LoaderIter(self, self._gen)
        self._iter = weakref.ref(it)
        return it

    def _rest_overrides(self):
        """The arguments a second loader needs besides this one's to go on with the pass a later
        iter() ends ({} for stoker's own order and a DistributedSampler's, which the state's
        epoch gives again; the pass's own index list or batches for a sampler or batch_sampler
        of the user's, which a second loader must not iterate again), or None when it cannot (a
        sampler of lists fetched whole)."""
        order = self._order
        if order is None or isinstance(order, _torchcompat.DistributedOrder):
            return {}
        indices = self._core_kwargs.get("indices")
        if getattr(order, "fetch", None) is not None or indices is None:
            return None
        flat = indices.tolist() if hasattr(indices, "tolist") else list(indices)
        if isinstance(order, _torchcompat.BatchSamplerOrder):
            batches, at = [], 0
            for k in order.sizes:
                batches.append(flat[at:at + k])
                at += k
            return {"batch_sampler": batches}
        return {"sampler": flat}

    def __reduce__(self):
        """copy.copy, copy.deepcopy and pickle give a new loader made with this one's arguments
        and the seed it took, from epoch 0 (they copied this one's C loader before: the copy's
        pass ended the original's, whose iterator started the epoch over, and pickle failed on
        it)."""
        cls, data, args, dataset, kwargs = self._made_with
        kwargs = dict(kwargs)
        if kwargs.get("seed") is None and kwargs.get("generator") is None:
            kwargs["seed"] = getattr(self, "seed", None)
        return _remade, (cls, data, args, dataset, kwargs)

    def _second_loader(self, overrides):
        """A loader made with this one's arguments and `overrides` (_rest_overrides; no trace
        file of its own), for the rest of a pass a later iter() ended (_LoaderIter). It follows
        its state's epoch, not a DistributedSampler's set_epoch, which the user may have moved
        on since."""
        cls, data, args, dataset, kwargs = self._made_with
        kwargs = dict(kwargs, **overrides)
        if kwargs.get("trace") is not None:
            kwargs["trace"] = None
        second = _remade(cls, data, args, dataset, kwargs)
        second._dist_sampler = None
        return second

    def _check_consumer(self, what):
        """Refuse a call that would move the position while another thread iterates (the
        other thread's pass goes on undisturbed)."""
        it = self._iter() if self._iter is not None else None
        other = it._active_elsewhere() if it is not None else None
        if other is not None:
            raise _core.StokerStateError(
                f"cannot {what}: thread {other.name!r} is iterating this loader (one consumer "
                f"at a time: each batch is handed out once); give each thread its own Loader")

    def __len__(self):
        self._check_open()
        return len(self._core)

    def _next_batch(self):
        """The next Batch of the current epoch, or None at its end."""
        core = self._core
        self._transit = None
        while True:
            try:
                raw = next(core, None)
            except _core.StokerBusyError:  # the slot the next batch needs is still held
                self._check_open()  # (closed by another thread meanwhile)
                self._relieve_ring()
                core = self._core
                continue
            except _core.Error as e:
                self._after_error()
                cause = self._map.cause(str(e), self._dataset.describe) if self._map else None
                if cause is not None:  # the map function's own exception, with its traceback
                    raise e from cause
                raise
            break
        if raw is None:
            return None
        self._transit = raw
        self._mid_epoch = True
        self._cur_epoch = raw.epoch
        fast = self._fast
        out = raw.as_dict(*fast) if fast is not None else None
        if out is not None:
            out._raw = None  # (made without Batch.__init__)
        else:
            out = Batch()
            if self._on_device:
                self._device_batch(raw, out)
            else:
                convert = self._convert
                for name, tensor, lengths in raw.tensors():
                    out[name] = convert(tensor)
                    if lengths is not None:
                        out[name + "_lengths"] = convert(lengths)
        out.epoch, out.number, out._attached = raw.epoch, raw.number, False
        finish = self._tokens_finish
        if finish is not None:
            finish(out)  # cu_seqlens of packed rows; a mixture's source counts
        if self._device is None or self._on_device:
            out._attached = True
            live = self._live
            while live and live[0][1]() is None:
                live.popleft()
            live.append((weakref.ref(out), weakref.ref(raw)))
        return out

    def _hand_back(self):
        """An exception interrupted the delivery of the batch being converted: give it back to
        the C loader, which returns it from the next call (a signal never costs a batch)."""
        raw, self._transit = self._transit, None
        core = self._core
        if raw is not None and core is not None and not core.closed:
            core._unget(raw)

    def _after_error(self):
        """A batch failed: the position moved past it (the loader goes on with the next)."""
        core = self._core
        if core is not None and not core.closed:  # (closed by another thread meanwhile)
            self._mid_epoch = True
            self._cur_epoch = core.epoch

    def _relieve_ring(self):
        """The consumer holds the ring slot the next batch needs. Detach held batches, oldest
        first, until that slot is free; if their tensors are referenced elsewhere, give the
        loader a fresh ring (the old one lives until its last batch is gone)."""
        # (once is a batch kept from next(iter(loader)), the tutorials' peek: no warning for it)
        self._held_slots += 1
        if self._held_slots == 2:
            warnings.warn(
                f"stoker.Loader: the training loop still holds the batch in the ring slot the "
                f"next batch needs (prefetch={self.prefetch}, {self.prefetch + 1} ring slots); "
                f"stoker copies held batches out of the ring to go on, which costs time and "
                f"memory. Drop references to old batches (or .clone() the tensors you keep), or "
                f"raise prefetch.", RuntimeWarning, stacklevel=4)
        live = self._live
        freed = False
        while live and live[0][1]() is None:
            live.popleft()
            freed = True
        if freed:
            return  # batches died since the last delivery: retry
        if live:
            batch_ref, ring_ref = live.popleft()
            batch = batch_ref()
            if batch is not None:
                batch.detach()
                del batch
            if ring_ref() is None:
                return  # detaching the oldest batch freed its slot: retry
        # The oldest batch's tensors are referenced outside their Batch dict: rebuild.
        self._rebuild()

    def _rebuild(self):
        """Replace the C loader by a new one at the same position (held batches stay valid)."""
        old = self._core
        state = old.save_state()
        self._stats_base = self._add_stats(self._stats_base, self._core_stats(old))
        if self._trace:
            old.trace_write(self._trace)  # the new core's trace starts afresh
        old.close()  # (its save_state() still answers, for state_dict() on other threads)
        try:
            # (started at the state, so its workers read no epoch-0 batch for nothing)
            core = _core.Loader(self._dataset, state=state, **self._core_kwargs)
        except BaseException:
            self._core = None
            raise
        if self._debug_delay:
            core._set_debug_delay(self._debug_delay)
        self._core = core
        self._live.clear()

    @staticmethod
    def _add_stats(a, b):
        if a is None:
            return dict(b)
        return {k: b[k] if k in _GAUGES else a[k] + b[k] for k in b}

    @staticmethod
    def _core_stats(core):
        """The C stats with times in seconds."""
        c = core.stats()
        out = {}
        for k, v in c.items():
            if k.endswith("_ns"):
                out[k[:-3] + "_s"] = v / 1e9
            else:
                out[k] = v
        out["n_threads"] = core.info()["n_threads"]
        return out

    # ---- epochs and state ----

    @property
    def epoch(self):
        """The epoch the next batch belongs to."""
        self._check_open()
        return self._core.epoch

    def set_epoch(self, epoch):
        """Jump to the start of `epoch` (free when it is the epoch about to start anyway, so
        calling it before every epoch, the DistributedSampler habit, is harmless; after
        load_state_dict(), the resumed epoch keeps the state's position). A DistributedSampler
        given as sampler= is set to it too (it chooses each pass's epoch)."""
        self._check_open()
        self._check_consumer("set_epoch")
        epoch = _check_int(epoch, "epoch", 0)
        if self._dist_sampler is not None:  # (it chooses each pass's epoch: kept in step)
            self._dist_sampler.set_epoch(epoch)
        if self._resumed and epoch == self._core.epoch:
            return  # (the loop's set_epoch(e) before the resumed epoch's pass)
        self._core.set_epoch(epoch)
        self._mid_epoch = False
        self._gen += 1
        self._ended_by = "set_epoch()"

    def state_dict(self):
        """The resume state, a JSON-serialisable dict: the position reached by the batches
        delivered so far (global, so it resumes on any world size). Safe from any thread at any
        time (a checkpoint thread while the training thread iterates)."""
        core = self._core
        if core is None:
            raise _core.StokerStateError("the loader is closed")
        return json.loads(core.save_state())

    def load_state_dict(self, state):
        """Resume from `state` (a dict from state_dict(), or its JSON text). The next iter()
        yields exactly the batches an uninterrupted run would have yielded after it."""
        self._check_open()
        self._check_consumer("load_state_dict")
        if isinstance(state, (bytes, bytearray)):
            state = state.decode()
        if not isinstance(state, str):
            if not isinstance(state, dict):
                raise _core.StokerInvalidError(f"state should be a dict from state_dict(), not "
                                               f"{type(state).__name__}")
            state = json.dumps(state)
        if self._order is not None:  # the custom sampler's indices of the state's epoch
            try:
                epoch = json.loads(state).get("epoch")
            except (ValueError, AttributeError):
                epoch = None  # not a state: the C loader says why
            if isinstance(epoch, int) and epoch >= 0:
                self._order.next_pass(self, epoch)
        self._core.load_state(state)
        self._mid_epoch = False
        self._resumed = True  # until the next pass begins (set_epoch keeps the position)
        self._gen += 1
        self._ended_by = "load_state_dict()"

    # ---- information ----

    @property
    def dataset(self):
        """The dataset given: the torchvision dataset (as DataLoader.dataset), else the
        stoker.Dataset being read. It outlives the loader: close() closes a stoker.Dataset the
        loader opened only when nothing else holds it."""
        if self._torch_dataset is not None:
            return self._torch_dataset
        if self._dataset is None and self._dataset_weak is not None:
            ds = self._dataset_weak()
            if ds is None:
                raise _core.StokerStateError("the loader is closed and nothing else held its "
                                             "dataset, so it was closed too: take loader.dataset "
                                             "before closing the loader")
            return ds
        return self._dataset

    @property
    def n_threads(self):
        """Worker threads actually running."""
        self._check_open()
        return self._core.info()["n_threads"]

    @property
    def num_workers(self):
        """n_threads under the DataLoader's name."""
        return self.n_threads

    def info(self):
        """Resolved settings: n_threads, prefetch, n_slots (ring slots), batch_size, rank,
        world_size, n_records, slot_size (bytes), pinned, output, device, transform output,
        autotune (whether n_threads and prefetch are upper bounds the autotuner works in)."""
        self._check_open()
        i = self._core.info()
        return {"n_threads": i["n_threads"], "prefetch": self.prefetch,
                "n_slots": i["n_slots"], "batch_size": i["batch_size"], "rank": i["rank"],
                "world_size": i["world"], "n_records": i["n_records"],
                "slot_size": i["slot_size"], "pinned": i["pinned"], "output": self.output,
                "device": None if self._device is None else str(self._device),
                "transform": i["transform"],
                "autotune": self.autotune, "executor": "native",
                "executor_reason": "stoker reads this dataset itself: its C worker threads read, "
                                   "decode and transform each record" +
                                   (" (map= runs Python on them)" if self._map else "")}

    def stats(self):
        """Counters since construction, a dict:

        - batches, samples (delivered), bytes_read, skipped (samples replaced under
          on_error="skip"), errors (batches that failed);
        - seconds: wall_s (since construction), and summed over worker threads read_s,
          decode_s, augment_s, collate_s, copy_s (device copies), worker_wait_s (workers held
          back by a full ring: the training loop is slower than the loader); consumer_wait_s
          (the training loop blocked in next(): the loader is slower);
        - indexed: videos indexed by this loader (a pass over a file's packets), not found in
          its memory or in an index file (docs/video.md); index_loaded: videos whose index it
          read from an index file instead; index_unsaved: local videos it indexed whose index
          found no place on disk (kept in its memory only);
        - active_threads (threads working now; the autotuner may park some of n_threads),
          depth (batches allowed in flight), autotune_changes, autotune_reason (why the
          autotuner took its last decision, "" when it has not run).
        """
        self._check_open()
        cur = self._core_stats(self._core)
        out = self._add_stats(self._stats_base, cur) if self._stats_base else cur
        m = self._map  # map=: the Python time per sample (no __getitem__ on this path)
        out.update(python_s=m.py_ns / 1e9 if m else 0.0, python_samples=m.calls if m else 0,
                   gil_share=None)
        if self._tokens is not None:
            out.update(self._tokens.stats())  # a mixture's rows per source
        return out

    def write_trace(self, path=None):
        """Write the Chrome/Perfetto trace (trace-event JSON: one track per worker thread and
        one for the training loop, every stage a slice) recorded so far to `path` (default:
        the trace= path). Needs trace= at construction. Open it at https://ui.perfetto.dev."""
        self._check_open()
        path = self._trace if path is None else os.fspath(path)
        if not self._trace:
            raise _core.StokerStateError("write_trace() needs stoker.Loader(..., trace=PATH) "
                                         "(tracing records events from the start)")
        self._core.trace_write(path)
        return path

    # ---- lifetime ----

    def _check_open(self):
        if self._core is None:
            raise _core.StokerStateError("the loader is closed")

    @property
    def closed(self):
        return self._core is None

    def close(self):
        """Stop the worker threads and free the loader. Batches still held stay valid."""
        core, self._core = getattr(self, "_core", None), None
        if core is not None:
            trace = getattr(self, "_trace", None)
            # On a loader's worker thread (the collector finalized this loader while that
            # thread ran Python for a sample), closing joins the workers, this one too; after a
            # timeout= error a worker thread may never return (_close_wait): then it is done on
            # a thread of its own, which holds the core until then, waited for not at all or
            # for that long.
            wait = 0.0 if _core.in_worker_call() else self._close_wait()
            if wait is None:
                _close_core(core, trace)
            else:
                closer = threading.Thread(target=_close_core, args=(core, trace), daemon=True,
                                          name="stoker-close")
                closer.start()
                if wait > 0:
                    closer.join(wait)
                    if closer.is_alive():
                        warnings.warn("stoker.Loader.close(): a worker thread is still in "
                                      "__getitem__ (timeout= passed for it); the loader is "
                                      "freed when it returns", RuntimeWarning, stacklevel=3)
        if getattr(self, "_own_dataset", False) and self._dataset is not None:
            # Closed by its last reference: `ds = loader.dataset; del loader; len(ds)` works.
            self._dataset_weak = weakref.ref(self._dataset)
            self._dataset = None

    def _close_wait(self):
        """None: close() closes the C loader here and now (PyLoader: a bound after a timeout)."""
        return None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        if self._core is None:
            return "<stoker.Loader (closed)>"
        return (f"<stoker.Loader {len(self._dataset)} records, batch_size={self.batch_size}, "
                f"{len(self)} batches/epoch, rank {self.rank}/{self.world_size}, "
                f"epoch {self.epoch}>")

    # ---- test hooks ----

    def _set_debug_delay(self, ms):
        """Make every batch take at least `ms` milliseconds (tests of Ctrl-C)."""
        self._debug_delay = int(ms)
        self._core._set_debug_delay(self._debug_delay)

"""The one-name switch: torch.utils.data.DataLoader's arguments and the datasets stoker reads
itself (torchvision's folder datasets; CIFAR, MNIST and TensorDataset: _inmemory.py), mapped
onto stoker.Loader's settings (docs/python.md "From DataLoader").

Every DataLoader argument is accepted with its DataLoader meaning or a stated mapping; one
that cannot apply raises a ValueError (StokerInvalidError) that says why and what to do
instead. Nothing here imports torch or torchvision unless the caller handed over one of their
objects (they are then already imported).

dataloader_args() is Loader.__init__'s DataLoader half, and check_int/resolve_rank its integer
and rank checks (all three moved out of loader.py, which imports them from here).
"""
import os
import sys
import types
import weakref

from . import _core, _inmemory
from ._listfetch import ListFetch, index_list
from . import transforms as _transforms
from .dataset import Dataset

# What stoker reads natively, for the errors that refuse something else.
READS = ("a path (or list of paths) to .stk shards, an ImageFolder directory tree or .npy "
         "files; a stoker.Dataset; or a torchvision.datasets.ImageFolder / DatasetFolder with "
         "the default loader, or a CIFAR10 / CIFAR100 / MNIST / FashionMNIST / KMNIST / EMNIST, "
         "whose transform stoker can express; a torch TensorDataset")
CONVERT = ("convert it once to .stk shards, with stoker.pack(src, 'out/') (any format stoker "
           "reads) or stoker.write_shard(path, fields, records) / stoker.Writer (records from "
           "Python), and pass their path")


def _invalid(msg):
    return _core.StokerInvalidError(msg)


def _mod(name):
    """An already imported module (None when the program did not import it)."""
    return sys.modules.get(name)


def is_dataset_object(data):
    """Whether `data` is a Python dataset object (a torch Dataset, or anything indexable or
    iterable that is neither paths nor a stoker Dataset), not something Dataset() opens."""
    if isinstance(data, (str, bytes, os.PathLike, _core.Dataset)):
        return False
    if isinstance(data, (list, tuple)) and \
            all(isinstance(p, (str, bytes, os.PathLike)) for p in data):
        return False
    if isinstance(data, dict) and \
            all(isinstance(p, (str, bytes, os.PathLike)) for p in data.values()):
        return False  # {"image": "x.npy", ...}: one file per field (format npy)
    return hasattr(data, "__getitem__") or hasattr(data, "__iter__")


def refuse_dataset(data):
    """The error for a dataset object stoker cannot read."""
    return _invalid(f"stoker.Loader cannot read a {type(data).__module__}."
                    f"{type(data).__qualname__}: its samples come from Python code (__getitem__) "
                    f"that stoker's C workers cannot run. stoker reads {READS}. For this "
                    f"dataset, {CONVERT}; or keep torch.utils.data.DataLoader")


def _base_method(obj, base, name):
    return getattr(type(obj), name, None) is getattr(base, name)


def folder_dataset(data):
    """For a torchvision ImageFolder / DatasetFolder that stoker can read: (the stoker Dataset
    of its root, read with format="imagefolder", the transform to compile). Raise a
    StokerInvalidError explaining anything that does not hold."""
    folder = _mod("torchvision.datasets.folder")
    if folder is None or not isinstance(data, folder.DatasetFolder):
        raise refuse_dataset(data)
    name = type(data).__name__
    if not _base_method(data, folder.DatasetFolder, "__getitem__"):
        raise _invalid(f"this {name} overrides __getitem__: its samples come from Python code "
                       f"stoker's C workers cannot run; keep torch.utils.data.DataLoader, or "
                       f"{CONVERT}")
    if data.loader not in (folder.default_loader, folder.pil_loader):
        raise _invalid(f"this {name} reads files with {getattr(data.loader, '__name__', data.loader)!r}, "
                       f"not torchvision's default loader (PIL, converted to RGB), so stoker's "
                       f"decoder would not give the same images; keep torch.utils.data.DataLoader")
    if data.target_transform is not None:
        raise _invalid(f"this {name} has a target_transform, which stoker cannot apply (its "
                       f"labels are the class indices); apply it to the labels in the training "
                       f"loop instead and pass target_transform=None")
    if data.transform is None:
        raise _invalid(f"this {name} has no transform: it gives PIL images, which the "
                       f"DataLoader's default collate cannot batch either; give it a transform "
                       f"ending in ToTensor() (stoker supports {', '.join(_transforms.SUPPORTED)})")
    try:
        _transforms.compile(data.transform)
    except _core.StokerInvalidError as e:
        raise _invalid(f"stoker cannot express this {name}'s transform ({e}); keep "
                       f"torch.utils.data.DataLoader for it") from None
    sds = Dataset(os.fspath(data.root), format="imagefolder")
    try:
        _check_same_samples(data, sds)
    except BaseException:
        sds.close()
        raise
    return sds, data.transform


def native_dataset(data):
    """(stoker Dataset, transform, fields, finish) of a dataset stoker reads natively: a
    torchvision folder dataset (folder_dataset), or one whose samples are rows of arrays in
    memory (CIFAR, MNIST, TensorDataset: _inmemory.dataset); `fields` the batch tuple's fields,
    `finish` None or what the consumer applies to each batch tuple. Else raise why not."""
    if _inmemory.kind(data) is not None:
        return _inmemory.dataset(data)
    sds, transform = folder_dataset(data)
    return sds, transform, ("image", "label"), None


def native_kind(data):
    """Whether `data` is of a kind stoker may read natively (a torchvision DatasetFolder,
    CIFAR10/100, MNIST and its kin, a TensorDataset), before checking its transform and
    samples."""
    folder = _mod("torchvision.datasets.folder")
    return (folder is not None and isinstance(data, folder.DatasetFolder)) or \
        _inmemory.kind(data) is not None


_NATIVE = weakref.WeakKeyDictionary()  # native_ok's accepted datasets, for dataloader_args


def native_ok(data):
    """Whether stoker reads this dataset natively (native_dataset accepts it); the
    opened result is kept for the Loader being built. Otherwise its __getitem__ runs as any
    Python dataset's."""
    try:
        _NATIVE[data] = native_dataset(data)
    except _core.StokerInvalidError:
        return False
    return True


def _native(data):
    got = _NATIVE.pop(data, None)
    return got if got is not None else native_dataset(data)


def native_subset(data):
    """The dataset stoker reads natively (native_kind) a torch.utils.data.Subset selects from
    (random_split's halves), or None: stoker reads such a Subset natively as that dataset in the
    order of the Subset's indices (subset_order)."""
    data_mod = _mod("torch.utils.data")
    if data_mod is None or type(data) is not data_mod.Subset:
        return None
    return data.dataset if native_kind(data.dataset) else None


def subset_sampler_ok(subset, sampler):
    """Whether stoker reads a Subset natively with this sampler: none, or a DistributedSampler
    over the Subset itself (its positions name the Subset's indices)."""
    data = _mod("torch.utils.data")
    return sampler is None or (
        isinstance(sampler, data.DistributedSampler) and sampler.dataset is subset and
        _base_method(sampler, data.DistributedSampler, "__iter__"))


def subset_order(subset, n_records, shuffle, sampler=None):
    """map_sampler's answer for a Subset read natively: its indices as the order (shuffled per
    epoch with shuffle=True, each index once, as the DataLoader's RandomSampler over the Subset
    takes each once), or with a DistributedSampler over the Subset its split of the Subset's
    positions, each naming one of its indices (subset_sampler_ok); an index past the folder's
    samples is refused as the DataLoader's __getitem__ would refuse it."""
    idx = _index_array(subset.indices, "Subset")
    if len(idx) and int(idx.max()) >= n_records:
        raise IndexError(f"Subset index {int(idx.max())} is out of range: its "
                         f"{type(subset.dataset).__name__} has {n_records} samples")
    if sampler is not None:
        if shuffle:
            raise _invalid("sampler option is mutually exclusive with shuffle (as in the "
                           "DataLoader): the sampler decides the order")
        out = distributed(sampler, idx)
        out.pop("n_records")  # (the sampler counts the Subset's positions, not the records)
        return out
    return {"shuffle": bool(shuffle), "order": {"indices": idx}}


def _check_same_samples(data, sds):
    """stoker's class list and sample list (path, label) equal the torchvision dataset's."""
    name = type(data).__name__
    if list(sds.classes or []) != list(data.classes):
        raise _invalid(f"stoker finds classes {_short(sds.classes)} under {data.root!r}, this "
                       f"{name} has {_short(data.classes)} (a custom find_classes?): stoker "
                       f"numbers classes as torchvision's ImageFolder does (sorted folder names); "
                       f"keep torch.utils.data.DataLoader for this dataset")
    samples = data.samples
    if len(sds) != len(samples):
        raise _invalid(f"stoker finds {len(sds)} images under {data.root!r}, this {name} has "
                       f"{len(samples)} samples (custom extensions or is_valid_file?): stoker "
                       f"takes torchvision's IMG_EXTENSIONS; keep torch.utils.data.DataLoader "
                       f"for this dataset")
    index = {c: i for i, c in enumerate(sds.classes)}
    root = os.fspath(data.root)
    for i, (path, label) in enumerate(samples):
        mine = sds.describe(i)
        mine = mine[:mine.rfind(" (record ")]
        rel = os.path.relpath(mine, root)
        want = index.get(rel.split(os.sep, 1)[0])
        if os.path.normpath(mine) != os.path.normpath(path) or want != label:
            raise _invalid(f"sample {i} differs: stoker reads {mine!r} (label {want}), this "
                           f"{name} has {path!r} (label {label}); keep "
                           f"torch.utils.data.DataLoader for this dataset")


def _short(names):
    names = list(names or [])
    return repr(names) if len(names) <= 6 else repr(names[:6])[:-1] + f", ... ({len(names)})]"


# ---- DataLoader arguments ----

def check_int(value, name, minimum, maximum=None):
    """`value` as an int in [minimum, maximum], else the error the DataLoader would raise
    (its wording: "batch_size should be a positive integer value, but got ...")."""
    if isinstance(value, bool) or not isinstance(value, (int, _np().integer)):
        raise _invalid(f"{name} should be an integer, but got {name}={value!r}")
    value = int(value)
    if value < minimum:
        what = "a positive" if minimum == 1 else "a non-negative"
        raise _invalid(f"{name} should be {what} integer value, but got {name}={value}")
    if maximum is not None and value > maximum:
        raise _invalid(f"{name}={value} is too large (at most {maximum})")
    return value


def resolve_rank(rank, world_size):
    """rank/world_size from the arguments; None takes torch.distributed's (when initialised),
    else the environment's (RANK/WORLD_SIZE, SLURM_*, OMPI_*), else 0/1."""
    if rank is None or world_size is None:
        dist = None
        torch = sys.modules.get("torch")
        if torch is not None:
            dist = getattr(torch, "distributed", None)
        if dist is not None and dist.is_available() and dist.is_initialized():
            r, w = dist.get_rank(), dist.get_world_size()
        else:
            r, w = _core.env_rank()
        rank = r if rank is None else rank
        world_size = w if world_size is None else world_size
    rank = check_int(rank, "rank", 0)
    world_size = check_int(world_size, "world_size", 1)
    if rank >= world_size:
        raise _invalid(f"Invalid rank {rank}, rank should be in the interval "
                       f"[0, {world_size - 1}] (world_size={world_size})")
    return rank, world_size


def is_default_collate(fn):
    if fn is None:
        return True
    data = _mod("torch.utils.data")
    collate = _mod("torch.utils.data._utils.collate")
    return any(fn is getattr(m, "default_collate", object()) for m in (data, collate) if m)


def check_dataloader_args(collate_fn, batch_sampler, worker_init_fn, timeout):
    """Refuse the DataLoader arguments that cannot apply (with why and what to do)."""
    if not is_default_collate(collate_fn):
        raise _invalid("collate_fn: stoker collates in its C workers, straight into each batch's "
                       "memory; a Python collate_fn cannot run there. Leave collate_fn=None (the "
                       "default collate's result: stacked tensors) and do the rest on the batch "
                       "in the training loop")
    if batch_sampler is not None:
        raise _invalid("batch_sampler: stoker forms the batches itself (batch_size, drop_last, "
                       "and per rank); pass batch_size= with sampler=/shuffle= instead")
    if worker_init_fn is not None:
        raise _invalid("worker_init_fn: stoker's workers are C threads that run no Python, so "
                       "there is nothing for it to set up (random augmentation is seeded from "
                       "(seed, epoch, sample index), the same for any number of workers); drop "
                       "worker_init_fn")
    if timeout is not None and (isinstance(timeout, bool) or
                                not isinstance(timeout, (int, float)) or timeout < 0):
        raise _invalid(f"timeout should be a non-negative number of seconds, got {timeout!r}")


def check_prefetch_factor(prefetch_factor, num_workers):
    """The installed DataLoader's refusal of prefetch_factor with num_workers=0 (given as 0;
    stoker's own default worker count is not 0): torch 1.13 refuses any value but its default
    2, torch 2 any value (its default is None)."""
    if prefetch_factor is None or isinstance(num_workers, bool) or num_workers != 0:
        return
    import inspect
    dl = getattr(_mod("torch.utils.data"), "DataLoader", None)
    default = None
    if dl is not None:
        default = inspect.signature(dl.__init__).parameters["prefetch_factor"].default
    if prefetch_factor != default:
        raise _invalid("prefetch_factor option could only be specified in multiprocessing."
                       "let num_workers > 0 to enable multiprocessing, otherwise set "
                       "prefetch_factor to None.")


def dataloader_attrs(dataset, *, shuffle, sampler, batch_sampler, batch_size, drop_last,
                     generator, collate_fn, num_workers, prefetch_factor, iterable=False,
                     worker_init_fn=None, multiprocessing_context=None,
                     persistent_workers=False, pin_memory_device=""):
    """The DataLoader's attributes sampler, batch_sampler, collate_fn, prefetch_factor,
    worker_init_fn, multiprocessing_context, persistent_workers and pin_memory_device for these
    arguments, as the installed DataLoader sets them: the default sampler
    (SequentialSampler, RandomSampler(generator=...), an IterableDataset's infinite constant
    one), the BatchSampler over it, default_collate (default_convert without batching). A
    script reads them (len(loader.sampler), loader.sampler.set_epoch, loader.collate_fn); stoker
    orders the samples itself and does not iterate them. batch_size is None with batch_sampler
    given or without batching; num_workers as given (None: stoker's default, not 0); a start
    method's name as its multiprocessing context."""
    if isinstance(multiprocessing_context, str):  # checked: a start method's name
        import multiprocessing
        multiprocessing_context = multiprocessing.get_context(multiprocessing_context)
    given = {"worker_init_fn": worker_init_fn, "multiprocessing_context": multiprocessing_context,
             "persistent_workers": bool(persistent_workers),
             "pin_memory_device": pin_memory_device or ""}
    data = _mod("torch.utils.data")
    if data is None:  # no torch: the arguments as given
        return {"sampler": sampler, "batch_sampler": batch_sampler, "collate_fn": collate_fn,
                "prefetch_factor": prefetch_factor, **given}
    if sampler is None:
        if iterable:
            from torch.utils.data.dataloader import _InfiniteConstantSampler
            sampler = _InfiniteConstantSampler()
        elif shuffle:
            sampler = data.RandomSampler(dataset, generator=generator)
        else:
            sampler = data.SequentialSampler(dataset)
    if batch_size is not None and batch_sampler is None:
        batch_sampler = data.BatchSampler(sampler, batch_size, drop_last)
    if collate_fn is None:
        from torch.utils.data._utils import collate
        collate_fn = collate.default_collate if batch_sampler is not None else \
            collate.default_convert
    if prefetch_factor is None:
        import inspect
        prefetch_factor = inspect.signature(data.DataLoader.__init__).parameters[
            "prefetch_factor"].default
        if prefetch_factor is None and num_workers != 0:  # torch 2: 2 with workers
            prefetch_factor = 2
    return {"sampler": sampler, "batch_sampler": batch_sampler, "collate_fn": collate_fn,
            "prefetch_factor": prefetch_factor, **given}


def check_multiprocessing_context(context, num_workers, executor):
    """The DataLoader's refusals of multiprocessing_context: a name that is no start method,
    and any with num_workers=0 (given as 0), unless stoker's one worker process was asked for
    (executor="process")."""
    methods = ["fork", "spawn", "forkserver"]
    if isinstance(context, str) and context not in methods:
        raise _invalid(f"multiprocessing_context option should specify a valid start method in "
                       f"{methods!r}, but got multiprocessing_context={context!r}")
    if context is not None and not isinstance(num_workers, bool) and num_workers == 0 and \
            executor != "process":
        raise _invalid("multiprocessing_context can only be used with multi-process loading "
                       "(num_workers > 0), but got num_workers=0")


def seed_of(generator):
    """The shuffle seed a torch.Generator stands for (its initial_seed())."""
    seed_fn = getattr(generator, "initial_seed", None)
    if seed_fn is None:
        raise _invalid(f"generator should be a torch.Generator, not {type(generator).__name__}")
    return int(seed_fn()) & ((1 << 64) - 1)


def check_seed(seed):
    """seed= as a 64-bit number: an int from 0 to 2**64 - 1 (larger ones were cut silently,
    2**64 + 5 reading as 5; torch.manual_seed refuses them)."""
    return check_int(seed, "seed", 0, (1 << 64) - 1)


def resolve_seed(seed, picked=None, generator=None, rank=None, world_size=None, draw=True):
    """The loader's seed: seed= as given, else the sampler's (`picked`, map_sampler's: a
    DistributedSampler's seed, a RandomSampler's generator), else generator='s, else 0 when
    ranks are given as arguments (they split one order: each rank drew its own before, and the
    ranks' shares overlapped), else one drawn from torch's global RNG when `draw` (as the
    DataLoader draws its shuffle: torch.manual_seed makes it reproducible), else 0; checked."""
    picked = picked or {}
    if seed is None:
        seed = picked.get("seed")
    if seed is None and generator is not None:
        seed = seed_of(generator)
    if seed is None:
        ranks_given = "rank" not in picked and (rank is not None or world_size is not None)
        seed = draw_seed() if draw and not ranks_given else 0
    return check_seed(seed)


def draw_seed():
    """A shuffle seed drawn from torch's global RNG, as the DataLoader's RandomSampler draws
    one (so torch.manual_seed makes the order reproducible)."""
    torch = _mod("torch")
    if torch is None:
        return 0
    return int(torch.empty((), dtype=torch.int64).random_().item()) & ((1 << 63) - 1)


SAMPLERS_OK = ("shuffle=True/False and any torch Sampler: SequentialSampler, RandomSampler, "
               "SubsetRandomSampler, WeightedRandomSampler and DistributedSampler map onto "
               "stoker's own order; any other Sampler is iterated for its indices each epoch")


def _np():
    import numpy
    return numpy


def _index_array(values, what):
    """values (a sequence, tensor or iterator of ints) -> a C-contiguous uint64 array; refuses
    negative or non-integer indices naming `what`."""
    np = _np()
    try:
        a = np.asarray(list(values) if not hasattr(values, "__len__") else values)
    except (TypeError, ValueError) as e:
        raise _invalid(f"{what} should give integer indices: {e}") from None
    if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
        raise _invalid(f"{what} should give one integer index per sample (a Sampler, not a "
                       f"BatchSampler: pass batch_size= instead), got "
                       f"{a.dtype if a.ndim == 1 else f'an array of shape {a.shape}'}")
    if a.size == 0:
        raise _invalid(f"{what} gave no indices: an epoch needs at least one sample")
    if a.dtype.kind == "i" and a.min() < 0:
        raise _invalid(f"{what} gave index {int(a.min())}: indices must be >= 0")
    return np.ascontiguousarray(a, dtype=np.uint64)


def _sampler_seed(sampler, generator):
    gen = getattr(sampler, "generator", None)
    gen = gen if gen is not None else generator
    return None if gen is None else seed_of(gen)


def _weighted(weights, num_samples, replacement):
    np = _np()
    return {"weights": np.ascontiguousarray(np.asarray(weights, dtype=np.float64).reshape(-1)),
            "num_samples": int(num_samples), "replacement": bool(replacement)}


class CustomOrder:
    """A Sampler stoker's order cannot express: iterated for its indices once per epoch, as the
    DataLoader iterates it (the first time when the loader is created, for len() and to start
    reading), and handed to the C loader (Loader.set_indices; an equal list keeps what is
    prepared). A sampler with set_epoch gets the loader's epoch before each iteration, unless
    the user called set_epoch since: then the loader follows the sampler's epoch. Resume is
    exact when the sampler gives the same indices when iterated again for that epoch."""

    def __init__(self, sampler, lists_ok=False):
        self.sampler = sampler
        self.ready = None       # the list already given to the C loader for the next pass
        self.ready_epoch = None  # the epoch it was iterated for
        self.seen_epoch = None  # the sampler's epoch after the last iteration
        self.lists_ok = lists_ok  # batch_size=None: the sampler may yield lists (ListFetch)
        self.fetch = None       # the ListFetch when it does (decided by the first epoch)

    def indices(self):
        what = f"sampler {type(self.sampler).__name__}"
        if not self.lists_ok:
            return _index_array(iter(self.sampler), what)
        items = list(self.sampler)
        if self.fetch is None and items and all(index_list(b) for b in items):
            self.fetch = ListFetch(len(items), what)
        if self.fetch is None:
            return _index_array(items, what)
        return self.fetch.publish(items)

    def _moved(self):
        """Whether the user called the sampler's set_epoch since the loader last iterated it
        (its epoch is not the one the loader saw after that iteration)."""
        cur = getattr(self.sampler, "epoch", None)
        return isinstance(cur, int) and self.seen_epoch is not None and cur != self.seen_epoch

    def _sync_epoch(self, core, epoch):
        """Return the epoch to use: the sampler's if the user moved it, else `epoch`."""
        set_epoch = getattr(self.sampler, "set_epoch", None)
        if set_epoch is None:
            return epoch
        if self._moved():
            epoch = self.sampler.epoch  # the user called set_epoch(epoch): the loader follows
            if core is not None and core.epoch != epoch:
                core.set_epoch(epoch)
        else:
            set_epoch(epoch)
        return epoch

    def _iterate(self, epoch):
        """Iterate the sampler for `epoch` (synced first). The epoch it shows after the
        iteration is the one seen: a sampler whose __iter__ moves its own epoch on has not been
        moved by the user."""
        self.ready = self.indices()
        self.ready_epoch = epoch
        self.seen_epoch = getattr(self.sampler, "epoch", epoch)

    def first(self):
        """The loader's create-time kwargs: the indices of the first epoch."""
        cur = getattr(self.sampler, "epoch", 0)
        self._iterate(self._sync_epoch(None, cur if isinstance(cur, int) else 0))
        return {"indices": self.ready}

    def next_pass(self, loader, epoch=None):
        """Before a pass (iter()) or a load_state_dict for `epoch`: this epoch's indices (the
        ones already iterated for it, unless the user moved the sampler's epoch since)."""
        core = loader._core
        e = core.epoch if epoch is None else epoch
        if self.ready is None or self.ready_epoch != e or self._moved():
            e = self._sync_epoch(core, e)
            self._iterate(e)
            core.set_indices(self.ready)
        loader._core_kwargs["indices"] = self.ready  # what a rebuilt C loader starts from
        if epoch is None:
            self.ready = None  # consumed by this pass: the next one iterates again
        return e


class DistributedOrder:
    """DistributedSampler(shuffle=True)'s order: each epoch's torch.randperm(len(dataset)) from
    a generator seeded with seed + epoch, as its __iter__ draws it, handed to the C loader as the
    epoch's index list (Loader.set_indices), which the C loader pads or truncates and deals to
    the ranks as the sampler does (strided). The list is the same on every rank and depends on
    the epoch only, so the resume state is global as for stoker's own order; load_state_dict
    makes the list of the state's epoch first."""

    def __init__(self, sampler, base=None):
        self.sampler = sampler
        self.base = base   # a Subset's indices: the permutation's positions name them
        self.epoch = None  # the epoch of `ready`
        self.ready = None  # the list given to the C loader

    def indices(self, epoch):
        torch = _mod("torch")
        g = torch.Generator()
        g.manual_seed(int(self.sampler.seed) + int(epoch))
        perm = torch.randperm(len(self.sampler.dataset), generator=g).numpy()
        out = perm if self.base is None else self.base[perm]
        return _np().ascontiguousarray(out, dtype=_np().uint64)

    def _make(self, epoch):
        if self.epoch != epoch:
            self.ready, self.epoch = self.indices(epoch), epoch
            return True
        return False

    def first(self):
        """The loader's create-time kwargs: the list of the sampler's epoch."""
        self._make(check_int(self.sampler.epoch, "DistributedSampler.epoch", 0))
        return {"indices": self.ready}

    def next_pass(self, loader, epoch=None):
        """Before a pass (the loader already moved to the sampler's epoch) or a
        load_state_dict for `epoch`: that epoch's list."""
        core = loader._core
        e = core.epoch if epoch is None else epoch
        if self._make(e):
            core.set_indices(self.ready)
        loader._core_kwargs["indices"] = self.ready  # what a rebuilt C loader starts from
        return e


def distributed(sampler, base=None):
    """map_sampler's answer for a torch DistributedSampler: its rank and world, its seed, and
    its split exactly (DataLoader parity, issue 24): the ranks take every world-th position
    (strided) of the order, which is 0..N-1 or, with shuffle, the sampler's own permutation of
    each epoch (DistributedOrder); its drop_last decides the uneven tail across ranks
    (drop_tail), and the loader's drop_last only the partial last batch, as in the DataLoader
    (pytorch/examples' imagenet validation: DistributedSampler(shuffle=False, drop_last=True)
    under a DataLoader with drop_last=False evaluates every sample of floor(N/W) per rank).
    base: the indices of a Subset read natively (subset_order), which the sampler's positions
    name."""
    out = {"shuffle": False, "seed": int(sampler.seed) & ((1 << 64) - 1),
           "rank": int(sampler.rank), "world": int(sampler.num_replicas),
           "distributed": sampler,
           "split": {"strided": True, "drop_tail": 1 if sampler.drop_last else 0},
           "n_records": len(sampler.dataset)}
    if sampler.shuffle:
        order = DistributedOrder(sampler, base)
        out["order"], out["custom"] = order.first(), order
    elif base is not None:
        out["order"] = {"indices": base}
    return out


def check_sampler_size(picked, n_records):
    """A DistributedSampler must cover the dataset stoker reads: its dataset's length equals the
    record count (else it would deal the ranks another dataset's positions)."""
    want = picked.get("n_records")
    if want is not None and want != n_records:
        raise _invalid(f"the DistributedSampler's dataset has {want} samples, the data stoker "
                       f"reads has {n_records} records: build the sampler over the same dataset")


class BatchSamplerOrder(CustomOrder):
    """A batch_sampler for a Python dataset: iterated once per epoch like a sampler, its batches
    flattened into the epoch's index list; their sizes are kept, so the loader batches by them
    (one ring batch per batch when they share a size, else batch by batch in the consumer)."""

    def __init__(self, batch_sampler):
        super().__init__(batch_sampler)
        self.sizes = []
        self.pos = 0

    def indices(self):
        batches = [list(b) for b in self.sampler]
        self.sizes = [len(b) for b in batches]
        if not batches or any(k == 0 for k in self.sizes):
            raise _invalid(f"batch_sampler {type(self.sampler).__name__} gave an empty epoch or "
                           f"an empty batch")
        self.pos = 0
        return _index_array([i for b in batches for i in b],
                            f"batch_sampler {type(self.sampler).__name__}")

    def uniform_size(self):
        """The batch size when every batch but the last has it (and the last is no larger),
        else None."""
        s = self.sizes
        if all(k == s[0] for k in s[:-1]) and s[-1] <= s[0]:
            return s[0]
        return None

    def restart(self, consumed=0):
        """The pass starts at the batch after `consumed` samples of the epoch (0, or a resumed
        position, which must fall between two of its batches)."""
        pos, at = 0, 0
        while at < consumed and pos < len(self.sizes):
            at += self.sizes[pos]
            pos += 1
        if at != consumed:
            raise _core.StokerStateError(
                f"load_state_dict: the state's position, {consumed} samples into its epoch, falls "
                f"inside a batch of batch_sampler {type(self.sampler).__name__}: it batches this "
                f"epoch otherwise than when the state was saved (a batch_sampler must give the "
                f"same batches when iterated again for an epoch, to resume)")
        self.pos = pos

    def next_size(self):
        if self.pos >= len(self.sizes):
            return None
        self.pos += 1
        return self.sizes[self.pos - 1]

    def n_batches(self):
        return len(self.sizes)


def map_sampler(sampler, shuffle, drop_last, generator, lists_ok=False):
    """A torch sampler -> dict(shuffle=, seed= (None: not fixed by the sampler), rank=, world=,
    distributed= (the DistributedSampler, whose set_epoch the loader follows), order= (the C
    loader's order kwargs: indices= or weights=/num_samples=/replacement=), custom= (a
    CustomOrder or DistributedOrder: next_pass() before each pass), split= (the C loader's
    strided=/drop_tail= kwargs), n_records= (the sampler's dataset length, checked against the
    data: check_sampler_size)); keys absent when the sampler does not say. lists_ok
    (batch_size=None): a sampler of another type may yield lists of indices, each fetched whole
    (the CustomOrder's `fetch`, a ListFetch)."""
    data = _mod("torch.utils.data")
    if sampler is None:
        return {}
    if shuffle:
        raise _invalid("sampler option is mutually exclusive with shuffle (as in the "
                       "DataLoader): the sampler decides the order")
    if data is not None and isinstance(sampler, data.DistributedSampler) and \
            _base_method(sampler, data.DistributedSampler, "__iter__"):
        return distributed(sampler)
    if data is not None and type(sampler) is data.SequentialSampler:
        return {"shuffle": False}
    if data is not None and type(sampler) is data.RandomSampler:
        n = len(sampler.data_source)
        seed = _sampler_seed(sampler, generator)
        if sampler.replacement or sampler.num_samples != n:
            # a uniform draw of num_samples, with or without replacement
            return {"shuffle": False, "seed": seed,
                    "order": _weighted([1.0] * n, sampler.num_samples, sampler.replacement)}
        return {"shuffle": True, "seed": seed}
    if data is not None and type(sampler) is data.SubsetRandomSampler:
        return {"shuffle": True, "seed": _sampler_seed(sampler, generator),
                "order": {"indices": _index_array(sampler.indices, "SubsetRandomSampler")}}
    if data is not None and type(sampler) is data.WeightedRandomSampler:
        return {"shuffle": False, "seed": _sampler_seed(sampler, generator),
                "order": _weighted(sampler.weights, sampler.num_samples, sampler.replacement)}
    if not hasattr(sampler, "__iter__"):
        raise _invalid(f"sampler should be a torch Sampler (or any iterable of indices), not "
                       f"{type(sampler).__name__}")
    custom = CustomOrder(sampler, lists_ok)
    return {"shuffle": False, "order": custom.first(), "custom": custom}


# ---- the Loader's arguments ----

def dataloader_args(data, *, batch_size, shuffle, seed, drop_last, num_workers, prefetch, rank,
                    world_size, transforms, output, fields, sampler, batch_sampler, collate_fn,
                    timeout, worker_init_fn, generator, prefetch_factor):
    """stoker.Loader's arguments with the DataLoader's mapped onto stoker's (moved out of
    Loader.__init__): a torchvision dataset unwrapped (the stoker Dataset it reads, its
    transform, (images, labels) tuples, batch_size 1 by default), the sampler mapped
    (map_sampler), the seed (the sampler's, the generator's, or drawn as the DataLoader draws
    it), rank/world_size from a DistributedSampler, prefetch from prefetch_factor. Returns a
    namespace of torch_dataset (None for stoker's own data), data, transforms, output, fields,
    batch_size, shuffle, seed, rank, world_size, prefetch, picked (map_sampler's dict) and
    finish (None, or what the consumer applies to each batch tuple: _inmemory); the arguments
    not mapped here come back as given."""
    check_dataloader_args(collate_fn, batch_sampler, worker_init_fn, timeout)
    torch_dataset = finish = None
    subset = None
    if is_dataset_object(data):
        torch_dataset = data
        subset = data if native_subset(data) is not None else None
        data, tv_transform, fields, finish = _native(data if subset is None else
                                                     subset.dataset)
        if transforms is not None:
            raise _invalid(f"transforms= with a {type(torch_dataset).__name__} object: the "
                           f"dataset's own transform is applied (as the DataLoader would); set "
                           f"it there")
        transforms = tv_transform
        if output not in (None, "tuple"):
            raise _invalid(f"a {type(torch_dataset).__name__} gives the tuples its __getitem__ "
                           f"gives, as the DataLoader does; output={output!r} applies to "
                           f"stoker's own datasets")
        output = "tuple"
        if batch_size is None:
            batch_size = 1  # the DataLoader's default
    if batch_size is None:
        raise _invalid("batch_size is required (samples per batch)")
    batch_size = check_int(batch_size, "batch_size", 1, 2**31 - 1)
    picked = map_sampler(sampler, shuffle, drop_last, generator) if subset is None else \
        subset_order(subset, len(data), shuffle, sampler)
    shuffle = picked.get("shuffle", shuffle)
    # The DataLoader draws its shuffle from torch's global RNG (so do the random samplers stoker
    # maps onto its order); stoker's own datasets keep their documented default, seed 0
    random_order = "order" in picked and picked.get("custom") is None
    seed = resolve_seed(seed, picked, generator, rank, world_size,
                        draw=(torch_dataset is not None and shuffle) or random_order)
    if "rank" in picked:
        if rank is not None and rank != picked["rank"] or \
                world_size is not None and world_size != picked["world"]:
            raise _invalid(
                f"rank={rank}, world_size={world_size} disagree with the "
                f"DistributedSampler's rank={picked['rank']}, "
                f"num_replicas={picked['world']}; pass one of them")
        rank, world_size = picked["rank"], picked["world"]
    elif torch_dataset is not None and rank is None and world_size is None:
        rank, world_size = 0, 1  # the DataLoader reads everything on every rank
    if prefetch is None and prefetch_factor is not None:
        # the DataLoader keeps prefetch_factor batches per worker in flight
        factor = check_int(prefetch_factor, "prefetch_factor", 1)
        workers = num_workers if isinstance(num_workers, (int, _np().integer)) and \
            not isinstance(num_workers, bool) else 1
        prefetch = factor * max(1, int(workers))
    return types.SimpleNamespace(
        torch_dataset=torch_dataset, data=data, transforms=transforms, output=output,
        fields=fields, batch_size=batch_size, shuffle=shuffle, seed=seed, rank=rank,
        world_size=world_size, prefetch=prefetch, picked=picked, finish=finish)

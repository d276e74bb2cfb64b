"""The advice of stoker.profile: every line comes from a measurement taken here or during the
profiled loop (the loader re-created alone at several worker counts, the stoker loader's stage
times, a sample's cost in __getitem__, file sizes), never from a fixed list. Which advice fits
is decided by _core.diagnose (stk_diagnose, shared with `stoker doctor`); this module measures
and words it.

Imports go one way: _profile imports this module, never the reverse (what both need, the
batch-size probe and the sweep's limits, lives here).
"""
import multiprocessing
import os
import shutil
import sys
import time
import warnings

from . import _core
from . import _costs
from . import _inmemory
from . import _torchcompat
from .loader import Loader

_BATCHES = 40      # batches timed per worker count in the sweep (after the first)
_SECONDS = 2.0     # ... or this long, whichever comes first
_ROUNDS = 3        # the sweep is repeated until two in a row choose the same, at most this often

# > 0 while the advice re-creates loaders to measure them: stoker.doctor's patched __iter__
# leaves those iterators alone (their batches are not the training loop's).
_measuring = 0


def _batch_size(batch):
    """The number of samples in a batch (the first dimension of its first array), or None."""
    x = batch
    for _ in range(3):
        if isinstance(x, dict):
            x = next(iter(x.values()), None)
        elif isinstance(x, (list, tuple)):
            x = x[0] if x else None
        else:
            break
    shape = getattr(x, "shape", None)
    if shape is not None and len(shape) > 0:
        return int(shape[0])
    return None


SMALL_MOVE = 50e6  # bytes/s: batches moved slower than this are bound by their count


def _transfer_fix(nbytes, batch_size, transfer):
    """What helps a DataLoader whose batches' hand-over is the limit: fewer bytes when it moves
    many (the bytes are the cost), larger batches when it moves few (each batch's fixed cost:
    a 1 KB batch was told to move fewer bytes)."""
    if nbytes and batch_size and transfer:
        moved = nbytes * transfer / batch_size
        if moved < SMALL_MOVE:
            return (f"Its batches move only {moved / 1e6:.2f} MB/s, so each batch's fixed cost "
                    f"({1e3 * batch_size / transfer:.2f} ms to hand over, whatever its size) is "
                    f"what limits it: use larger batches")
    return "Move fewer bytes per sample (uint8 instead of float32 is 4x fewer)"


def batch_bytes(batch):
    """Bytes of the arrays in a batch (tensors, numpy arrays, nested in dicts, lists and
    tuples), or None when it holds none: what a DataLoader moves between processes per batch."""
    total, found, todo = 0, False, [batch]
    while todo:
        x = todo.pop()
        if isinstance(x, dict):
            todo.extend(x.values())
        elif isinstance(x, (list, tuple)):
            todo.extend(x)
        else:
            n = getattr(x, "nbytes", None)
            if n is None and hasattr(x, "element_size") and hasattr(x, "numel"):
                n = x.element_size() * x.numel()  # torch tensors
            if isinstance(n, int):
                total, found = total + n, True
    return total if found else None


def _cpus():
    return _core.n_cpus()  # the library's count (what n_threads=0 means)


def _kind(it):
    torch = sys.modules.get("torch")
    if torch is not None:
        from torch.utils.data import DataLoader
        if isinstance(it, DataLoader):
            return "torch"
    if isinstance(it, Loader):
        return "stoker"
    return None


def _timed_rate(batches_iter, close, size=_batch_size):
    """Samples/s of an iterator of batches after its first batch (start-up left out), over
    _BATCHES batches or _SECONDS seconds; None when it has fewer than two batches. `size(b)`
    gives a batch's sample count."""
    try:
        if next(batches_iter, None) is None:
            return None
        n = samples = 0
        t0 = time.perf_counter()
        while n < _BATCHES and time.perf_counter() - t0 < _SECONDS:
            b = next(batches_iter, None)
            if b is None:
                break
            samples += size(b) or 1
            n += 1
            del b
        dt = time.perf_counter() - t0
        return samples / dt if n and dt > 0 else None
    finally:
        close()


class _TimedDataset:
    """A map-style dataset's __getitem__, timed: wall and CPU seconds and calls summed in
    shared memory, so DataLoader worker processes (forked or spawned with the dataset) add to
    the same counters the profiler reads."""

    def __init__(self, dataset, ctx=None):
        self.dataset = dataset
        self.sums = (ctx or multiprocessing).Array("d", 3)  # wall, cpu, calls

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, i):
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return self.dataset[i]
        finally:
            wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
            with self.sums.get_lock():
                self.sums[0] += wall
                self.sums[1] += cpu
                self.sums[2] += 1

    def __getattr__(self, name):
        if name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def per_sample(self):
        """(wall, cpu) seconds per call so far, or (None, None)."""
        with self.sums.get_lock():
            wall, cpu, n = self.sums[0], self.sums[1], self.sums[2]
        return (wall / n, cpu / n) if n else (None, None)


class _Replay:
    """n samples that are all one stored sample: __getitem__ costs nothing, so a DataLoader over
    it measures what moving its batches (collate, /dev/shm, pickling) costs by itself."""

    def __init__(self, sample, n):
        self.sample, self.n = sample, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.sample


def _dataloader_like(dl, workers, dataset=None):
    """A DataLoader reading what `dl` reads, the same way, with `workers` worker processes
    (over `dataset` instead of dl.dataset when given: a timed or replaying stand-in)."""
    from torch.utils.data import DataLoader, IterableDataset
    kw = dict(num_workers=workers, collate_fn=dl.collate_fn, pin_memory=dl.pin_memory,
              worker_init_fn=dl.worker_init_fn, timeout=dl.timeout)
    if workers > 0:
        kw["prefetch_factor"] = dl.prefetch_factor or 2
        kw["multiprocessing_context"] = dl.multiprocessing_context
    if isinstance(dl.dataset, IterableDataset):
        kw.update(batch_size=dl.batch_size, drop_last=dl.drop_last)
    elif dl.batch_sampler is not None:
        kw["batch_sampler"] = dl.batch_sampler
    else:
        kw.update(batch_size=None, sampler=dl.sampler)
    return DataLoader(dl.dataset if dataset is None else dataset, **kw)


def _map_style(dl):
    from torch.utils.data import IterableDataset
    return not isinstance(dl.dataset, IterableDataset) and hasattr(dl.dataset, "__getitem__")


def _rate_torch(dl, workers, dataset=None):
    with warnings.catch_warnings():
        # Worker counts above the cores are tried on purpose (an I/O-bound __getitem__
        # scales past them): PyTorch's "excessive worker creation" warning is expected.
        warnings.simplefilter("ignore", UserWarning)
        it = iter(_dataloader_like(dl, workers, dataset))

    def close():
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
    return _timed_rate(it, close)


def _rate_stoker(loader, workers):
    """Samples/s of `loader` made again alone with `workers` workers: stoker's own data, a
    second C loader over its dataset; a Python dataset (map-style or iterable), a second
    stoker.Loader made with its arguments, with workers of its own (its C loader's executor,
    the worker processes or the training thread's part, belongs to it: a second C loader on
    the same one hung or failed)."""
    if loader.info().get("executor") == "native":
        kw = dict(loader._core_kwargs, n_threads=workers, autotune=False, trace_events=0)
        core = _core.Loader(loader._dataset, **kw)
        core.set_epoch(loader._core.epoch)
        return _timed_rate(iter(core), core.close, size=lambda b: b.n_samples)
    given = loader._made_with[4]  # (its keyword arguments)
    over = {"n_threads" if given.get("n_threads") is not None else "num_workers": workers}
    if workers and given.get("executor", "auto") == "auto":
        over["executor"] = loader.executor  # the executor measured at other counts
    second = loader._second_loader(over)
    return _timed_rate(iter(second), second.close)


def _sweep(prof, kind, counts):
    """Measure the loader alone at each count not yet in prof.sweep; a DataLoader over a
    map-style dataset reads it through _TimedDataset, whose per-sample __getitem__ times go to
    prof.getitem ({workers: (wall s, cpu s)})."""
    global _measuring
    it = prof.iterable
    _measuring += 1
    try:
        for w in counts:
            if w in prof.sweep:
                continue
            try:
                if kind == "torch":
                    timed = _TimedDataset(it.dataset, _mp_context(it)) if _map_style(it) \
                        else None
                    r = _rate_torch(it, w, timed)
                    if timed is not None and timed.per_sample()[0] is not None:
                        prof.getitem[w] = timed.per_sample()
                else:
                    r = _rate_stoker(it, w)
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                return (f"could not re-create the loader alone to measure it "
                        f"({type(e).__name__}: {e})")
            if r is not None:
                prof.sweep[w] = r
    finally:
        _measuring -= 1
    return None


def _mp_context(dl):
    """The multiprocessing context the DataLoader's workers start with (its own, else the
    default), for shared counters they can inherit."""
    ctx = dl.multiprocessing_context
    if isinstance(ctx, str):
        return multiprocessing.get_context(ctx)
    return ctx


def settle(choices, most=_ROUNDS):
    """Whether repeated sweeps agree (pure: `choices` are the decisions of the sweeps so far,
    oldest first, each an (action, workers) pair from stk_diagnose). "stable" when the last two
    agree, "noisy" when `most` sweeps ran without two in a row agreeing, else "again"."""
    if len(choices) >= 2 and choices[-1] == choices[-2]:
        return "stable"
    return "noisy" if len(choices) >= most else "again"


def median_sweep(sweeps):
    """{workers: median samples/s} over sweeps ({workers: samples/s} each)."""
    out = {}
    for w in sorted({w for s in sweeps for w in s}):
        rates = sorted(s[w] for s in sweeps if w in s)
        m = len(rates) // 2
        out[w] = rates[m] if len(rates) % 2 else (rates[m - 1] + rates[m]) / 2
    return out


def _settled_sweep(prof, kind, counts, bsz, word):
    """Sweep `counts` until two sweeps in a row lead to the same decision (settle()); a noisy
    series leaves the median rates in prof.sweep. Returns (error or None, note or None)."""
    sweeps, choices = [], []
    while True:
        prof.sweep = {}
        err = _sweep(prof, kind, counts)
        if err:
            return err, None
        sweeps.append(dict(prof.sweep))
        d = _diagnose(prof, kind, bsz)
        choices.append((d["action"], d["recommended"]))
        verdict = settle(choices)
        prof.sweep_rounds = len(sweeps)
        if verdict == "stable":
            return None, None
        if verdict == "noisy":
            prof.sweep = median_sweep(sweeps)
            picks = ", ".join(f"{a} ({word}={w})" if w is not None and w >= 0 else a
                              for a, w in choices)
            return None, (f"the measurements are noisy (another load on the machine?): "
                          f"{len(sweeps)} sweeps decided {picks}; the advice below uses each "
                          f"worker count's median rate")


def _counts(kind, cur, upto):
    counts = {1, cur if cur is not None else 1}
    if kind == "torch" and cur == 0:
        counts.add(0)
    w = 2
    while w <= upto:
        counts.add(w)
        w *= 2
    counts.add(upto)
    return sorted(c for c in counts if c <= max(upto, cur or 0))


def _stages(prof):
    """The loader's stats, and the workers' time per stage (stoker's own data only: a Python
    dataset's time is __getitem__'s, which the C stages would count as collation)."""
    st = prof.iterable.stats()
    if prof.iterable.info().get("executor") != "native":
        return st
    parts = {k: st.get(k + "_s", 0.0) for k in ("read", "decode", "augment", "collate", "copy")}
    busy = sum(parts.values())
    if busy > 0:
        prof.stages = {k: v / busy for k, v in parts.items() if v > 0}
    return st


def _sample_cost(dataset, budget=1.0, most=20):
    """Mean (wall, CPU) seconds of dataset[i] over a few indices, in this thread (map-style
    datasets), or (None, None)."""
    try:
        n = len(dataset)
    except TypeError:
        return None, None
    if n == 0 or not hasattr(dataset, "__getitem__"):
        return None, None
    t0, c0 = time.perf_counter(), time.thread_time()
    k = 0
    while k < min(n, most) and time.perf_counter() - t0 < budget:
        dataset[k * max(1, n // most) % n]
        k += 1
    if not k:
        return None, None
    return (time.perf_counter() - t0) / k, (time.thread_time() - c0) / k


def _image_folder(dataset):
    """(root, n files, mean bytes) of an ImageFolder-like dataset, else None."""
    samples, root = getattr(dataset, "samples", None), getattr(dataset, "root", None)
    if not isinstance(samples, list) or not samples or not isinstance(root, (str, os.PathLike)):
        return None
    sizes = []
    for s in samples[:200]:
        path = s[0] if isinstance(s, tuple) else s
        try:
            sizes.append(os.path.getsize(path))
        except (OSError, TypeError):
            return None
    return os.fspath(root), len(samples), sum(sizes) / len(sizes)


def switch_advice(dataset, folder):
    """The "switch to stoker" line for an ImageFolder-like dataset, only when stoker can read it
    and express its transform (checked by converting them, as stoker.Loader(dataset) would);
    otherwise why not. The packing command is the CLI's when `stoker` is installed, else the
    Python package's."""
    root, n, mean = folder
    try:
        sds, _ = _torchcompat.folder_dataset(dataset)
        sds.close()
    except _core.StokerInvalidError as e:
        return f"stoker.Loader cannot replace this DataLoader: {e}"
    out = "data.stk"
    if shutil.which("stoker"):
        pack = f"`stoker pack {root} {out}`"
    else:
        pack = f"`python3 -c \"import stoker; stoker.pack_image_folder({root!r}, '{out}')\"`"
    return (f"switch to stoker.Loader: {n} files of {mean / 1024:.0f} KB on average are decoded "
            f"and transformed in Python one by one; stoker can read this dataset and express its "
            f"transform, so replacing DataLoader by stoker.Loader (same arguments) reads {root} "
            f"directly, decoding and transforming on C threads; to also save the per-file "
            f"opens, pack it once with {pack} and load '{out}' with "
            f"transforms=dataset.transform")


def inmemory_advice(dataset):
    """The "switch to stoker" line for a dataset whose samples are rows of arrays in memory
    (TensorDataset, CIFAR10/100, MNIST and its kin, or a Subset of one), when stoker reads it
    natively (checked as stoker.Loader(dataset) checks it, without copying its arrays); why not
    when it cannot; None for any other dataset."""
    inner = _torchcompat.native_subset(dataset) or dataset
    if _inmemory.kind(inner) is None:
        return None
    name = type(inner).__name__
    try:
        _, transform, _ = _inmemory.plan(inner)
    except _core.StokerInvalidError as e:
        return f"stoker.Loader cannot replace this DataLoader: {e}"
    what = "its transform runs in C on each row" if transform is not None else \
        "C threads copy each row into the batch"
    return (f"switch to stoker.Loader: this {name}'s samples are rows of arrays in memory, "
            f"which __getitem__ makes one by one in Python; stoker.Loader (same arguments) reads "
            f"them itself ({what}; bench/RESULTS.md, issue 24: CIFAR10 22-27x, MNIST 18-31x, "
            f"tabular rows 5-7x the DataLoader on 2 cores)")


def _pin_advice(prof, kind):
    torch = sys.modules.get("torch")
    if kind != "torch" or torch is None or not torch.cuda.is_initialized() or \
            prof.iterable.pin_memory:
        return None
    x = torch.empty(max(1, (prof.batch_size or 1)) * 3 * 224 * 224, dtype=torch.uint8)
    times = []
    for src in (x, x.pin_memory()):
        src.to("cuda", non_blocking=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(5):
            src.to("cuda", non_blocking=True)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / 5)
    if times[1] < 0.8 * times[0]:
        return (f"turn on pin_memory=True: a {x.numel() >> 20} MiB batch copies to the GPU in "
                f"{1e3 * times[1]:.2f} ms from pinned memory against {1e3 * times[0]:.2f} ms "
                f"from pageable memory")
    return None


def _diagnose(prof, kind, bsz):
    """stk_diagnose on the profile and the sweep so far. A DataLoader with num_workers=0 loads in
    the training loop itself: however fast, it never overlaps the step, so it never "keeps up"
    and is left out of the probes."""
    w, s, _ = prof._measured()
    probes = {k: r for k, r in prof.sweep.items() if not (kind == "torch" and k == 0)}
    return _core.diagnose(sum(w), sum(s), len(w), bsz, prof.num_workers, probes)


def costs(prof):
    """Fill prof.costs with what is known without measuring anything new: the executor that runs
    the user's Python (stoker: Loader.info()["executor"] and ["executor_reason"] when the loader
    reports them, else "thread" for map= and "native"; a DataLoader: "process" with workers,
    "main" without), stoker's seconds of user Python per sample and GIL-held share
    (Loader.stats()["python_s"] / ["python_samples"], ["gil_share"]; None when absent), and the
    bytes per batch seen by the loop."""
    c = prof.costs
    c["batch_bytes"] = prof.batch_bytes
    kind = _kind(prof.iterable)
    if kind == "torch":
        c["executor"] = "process" if prof.num_workers else "main"
    elif kind == "stoker" and not prof.iterable.closed:
        it = prof.iterable
        info, st = it.info(), it.stats()
        c["executor"] = info.get("executor") or \
            ("thread" if getattr(it, "_map", None) is not None else "native")
        c["executor_reason"] = info.get("executor_reason")
        per = _costs.per_sample(st.get("python_s"), st.get("python_samples"))
        if per is not None:
            c["getitem_ms"] = 1e3 * per
        c["gil_share"] = st.get("gil_share")


def _first_index(dl):
    """The first index the DataLoader reads (its batch sampler's or sampler's), else 0."""
    for src in (dl.batch_sampler, dl.sampler):
        if src is None:
            continue
        try:
            first = next(iter(src))
        except (StopIteration, TypeError):
            continue
        return first[0] if isinstance(first, (list, tuple)) and first else first
    return 0


def _transfer_rate(prof, workers):
    """Samples/s of the DataLoader's batches when __getitem__ costs nothing (a _Replay of its
    first sample, same batch size, collate, pin_memory and workers): the ceiling that moving
    batches between processes sets. None when it cannot be measured."""
    global _measuring
    dl = prof.iterable
    _measuring += 1
    try:
        replay = _Replay(dl.dataset[_first_index(dl)], len(dl.dataset))
        return _rate_torch(dl, workers, replay)
    except Exception:  # noqa: BLE001 - the ceiling is optional; the advice says less
        return None
    finally:
        _measuring -= 1


def _getitem_times(prof, kind):
    """(wall, cpu) seconds per sample of the user's __getitem__: from the DataLoader sweep's
    timed runs (the fewest workers > 0, least disturbed), else measured here in this thread."""
    timed = sorted((w, t) for w, t in prof.getitem.items() if w > 0) or \
        sorted(prof.getitem.items())
    if timed:
        return timed[0][1]
    ds = prof.iterable.dataset if kind in ("torch", "stoker") else None
    if ds is None or isinstance(ds, _core.Dataset):
        return None, None
    return _sample_cost(ds)


def _python_lines(prof, kind, cur_rate_word):
    """The advice about the user's Python, from _costs.limit: what limits the loader at its best
    measured count, and why more workers would or would not help."""
    c = prof.costs
    if not prof.sweep:
        return []
    best_w, best = max(prof.sweep.items(), key=lambda kv: kv[1])
    wall, cpu = _getitem_times(prof, kind)
    if wall is not None:
        c["getitem_ms"] = c["getitem_ms"] if c.get("getitem_ms") is not None else 1e3 * wall
        c["getitem_cpu_share"] = min(1.0, cpu / wall) if wall > 0 else None
    per_s = c["getitem_ms"] / 1e3 if c.get("getitem_ms") else wall
    transfer = None
    if kind == "torch" and best_w > 0 and _map_style(prof.iterable):
        transfer = _transfer_rate(prof, best_w)
        c["transfer_samples_per_s"], c["transfer_workers"] = transfer, best_w
    # (the CPU share from the measurement that gave it, scaled to per_s: stoker's per_s is
    # stats()["python_s"], which counts waits for the GIL, so its own CPU time against it read a
    # __getitem__ on a CPU 83% of its time as one that waits)
    share = c.get("getitem_cpu_share") if wall is not None else None
    cpu_s = share * per_s if share is not None and per_s else None
    name, cap = _costs.limit(kind, best, transfer, per_s, cpu_s,
                             c.get("gil_share"), c.get("executor"), best_w, _cpus())
    c["limit"], c["limit_samples_per_s"] = name, cap
    out = []
    word = cur_rate_word
    if name == "transfer":
        mb = f"{c['batch_bytes'] / 1e6:.1f} MB each, " if c.get("batch_bytes") else ""
        own = f"; __getitem__ itself ({1e3 * per_s:.2f} ms per sample) would allow " \
              f"{best_w / per_s:.0f} samples/s at {word}={best_w}" if per_s else ""
        out.append(f"moving batches between processes limits this DataLoader, not __getitem__: "
                   f"with a __getitem__ that costs nothing the same batches ({mb}"
                   f"{prof.batch_size or '?'} samples) arrive at only {transfer:.0f} samples/s at "
                   f"{word}={best_w}, against {best:.0f} with yours: each batch is copied by the "
                   f"worker's collate into /dev/shm and its handles pickled to the main process"
                   f"{own}. {_transfer_fix(c.get('batch_bytes'), prof.batch_size, transfer)}, "
                   f"or use a loader that writes each sample once into shared batch memory "
                   f"(stoker.Loader(dataset, ...))")
    elif name == "gil":
        out.append(f"__getitem__ holds the GIL {100 * c['gil_share']:.0f}% of its "
                   f"{1e3 * per_s:.2f} ms, so the thread executor runs that part one sample at "
                   f"a time: at most {cap:.0f} samples/s whatever {word} ({best:.0f} measured); "
                   f"executor='process' runs it in parallel")
    elif name == "getitem_cpu" and per_s:
        cores = _cpus()
        out.append(f"one sample costs {1e3 * per_s:.2f} ms in __getitem__, "
                   f"{100 * c['getitem_cpu_share']:.0f}% of it on a CPU: {cores} core"
                   f"{'s' if cores > 1 else ''} allow at most "
                   f"{cores / max(cpu, 1e-9):.0f} samples/s; the per-sample work has to shrink")
    return out


def _extend_sweep(prof, kind, word, usual):
    """Past the usual sweep when __getitem__ mostly waits (_costs.next_count); returns the
    advice line saying so, or None."""
    wall, cpu = _getitem_times(prof, kind)
    waits = _costs.mostly_waits(wall, cpu)
    cores = _cpus()
    tried = []
    while True:
        w = _costs.next_count(prof.sweep, waits, cores, usual)
        if w is None:
            break
        if _sweep(prof, kind, [w]) or w not in prof.sweep:
            break
        tried.append(w)
    if not tried:
        return None
    top = max(tried)
    best_w = max(prof.sweep, key=prof.sweep.get)
    head = (f"__getitem__ mostly waits (on a CPU {100 * cpu / wall:.0f}% of its "
            f"{1e3 * wall:.2f} ms: sleep or I/O), so the sweep went past {usual} {word} "
            f"({'twice the cores' if usual == 2 * cores else 'the cores'}, the limit for "
            f"work that computes) to {top}")
    if best_w in tried:
        return (f"{head}: workers past the cores help, {word}={best_w} delivers "
                f"{prof.sweep[best_w]:.0f} samples/s")
    return (f"{head}: no more than at {best_w} ({prof.sweep[top]:.0f} samples/s at {top} "
            f"against {prof.sweep[best_w]:.0f}), so the waits are not what limits it")


def advise(prof):
    """The advice lines for a finished Profile (fills prof.sweep and prof.stages)."""
    kind = _kind(prof.iterable)
    out = []
    cur = prof.num_workers
    bsz = prof.batch_size or getattr(prof.iterable, "batch_size", None) or 1
    if kind == "stoker" and prof.iterable.closed:
        return ["the stoker.Loader was closed before the profile ended: measure with "
                "steps= (or --steps) so that the advice is taken while it is open"]
    costs(prof)
    st = _stages(prof) if kind == "stoker" else None
    word = "num_workers" if kind is not None else "workers"
    if kind is None:
        if prof.data_bound:
            out.append(f"the loop waits {prof.wait_ms:.2f} ms per batch for a "
                       f"{prof.step_ms:.2f} ms step; this iterable is neither a PyTorch "
                       f"DataLoader nor a stoker.Loader, so its worker counts cannot be tried: "
                       f"wrap a DataLoader or stoker.Loader to get measured advice")
        return out

    if not prof.data_bound:
        # Enough data: can fewer workers do? (leave cores to the trainer)
        if cur is not None and cur > 1:
            err = _sweep(prof, kind, [w for w in _counts(kind, cur, cur) if w < cur])
            d = _diagnose(prof, kind, bsz)
            if err:
                out.append(err)
            elif d["action"] == "fewer":
                w = d["recommended"]
                out.append(f"not data-bound; {word}={w} would still keep up (the loader "
                           f"alone delivers {prof.sweep[w]:.0f} samples/s there against "
                           f"{d['demand']:.0f} samples/s consumed): lower it to leave cores to "
                           f"the training process")
        if st is not None and st["autotune_reason"]:
            out.append(f"autotune: {st['active_threads']} of {st['n_threads']} threads "
                       f"working, depth {st['depth']} ({st['autotune_reason']})")
        return out

    # DataLoader workers are processes whose __getitem__ may wait on I/O: try past the cores
    # (up to twice their number, as docs/python.md says), and further while a __getitem__ that
    # mostly waits keeps gaining (_extend_sweep).
    upto = 2 * _cpus() if kind == "torch" else max(_cpus(), cur or 1)
    err, noisy = _settled_sweep(prof, kind, _counts(kind, cur, upto), bsz, word)
    if err:
        out.append(err)
    if noisy:
        out.append(noisy)
    python = kind == "torch" or prof.costs.get("executor") in ("thread", "process")
    if python and not err:
        line = _extend_sweep(prof, kind, word, upto)
        if line:
            out.append(line)
    d = _diagnose(prof, kind, bsz)
    demand, action = d["demand"], d["action"]
    # No worker count keeps up: what limits the user's Python (measured, _costs.limit)
    py_lines = _python_lines(prof, kind, word) if python and not err and \
        action == "too_slow" else []
    cur_rate = prof.sweep.get(cur)
    cur_txt = f" (at {word}={cur}: {cur_rate:.0f})" if cur_rate is not None else ""
    if action == "more":
        w = d["recommended"]
        what = "set" if cur is None else f"raise {word} from {cur} to"
        out.append(f"{what} {word}={w}" if cur is None else f"{what} {w}")
        out[-1] += (f": alone, the loader delivers {prof.sweep[w]:.0f} samples/s at {word}={w} "
                    f"against the {demand:.0f} samples/s the step consumes{cur_txt}")
    elif action == "contention":
        # Fast enough alone at the current setting, yet the loop waits: bursts or contention.
        w = cur
        pf = getattr(prof.iterable, "prefetch_factor", None) if kind == "torch" else \
            getattr(prof.iterable, "prefetch", None)
        knob = "prefetch_factor" if kind == "torch" else "prefetch"
        out.append(f"alone, the loader keeps up at {word}={w} ({prof.sweep[w]:.0f} samples/s "
                   f"against {demand:.0f} consumed), yet the loop waited "
                   f"{100 * prof.wait_share:.1f}%: either the training process competes with the "
                   f"workers for the cores (try fewer threads in the step, e.g. "
                   f"torch.set_num_threads) or the waits come in bursts (raise {knob}"
                   + (f", now {pf}" if pf is not None else "") + ")")
    elif prof.sweep:
        w, r = max(prof.sweep.items(), key=lambda kv: kv[1])
        why = {"transfer": "moving its batches is the limit (below)",
               "gil": "the GIL is the limit (below)"}.get(
            prof.costs.get("limit"), "the per-sample work itself has to shrink")
        out.append(f"no worker count keeps up: the best measured, {word}={w}, delivers {r:.0f} "
                   f"samples/s, {100 * r / demand:.0f}% of the {demand:.0f} samples/s the step "
                   f"consumes; {why}")
        if kind == "stoker" and prof.stages:
            top = max(prof.stages.items(), key=lambda kv: kv[1])
            hint = {
                "decode": "store smaller images (the crop rarely needs more than ~1.5x the "
                          "output size) or add cores",
                "augment": "ship uint8 and normalise on the GPU (device='cuda'), or use "
                           "cheaper transforms",
                "read": "pack the data into fewer, larger shards on local disk (or keep it in "
                        "the page cache)",
                "collate": "use larger batches or fewer, larger fields",
                "copy": "ship uint8 instead of float32 (4x fewer bytes to copy)",
            }[top[0]]
            out.append(f"{top[0]} takes {100 * top[1]:.0f}% of the workers' time: {hint}")
    out += py_lines
    if kind == "torch":
        dl = prof.iterable
        if action == "too_slow":
            cost = _getitem_times(prof, kind)[0]
            if cost and prof.costs.get("limit") not in ("transfer", "getitem_cpu"):
                out.append(f"one sample costs {1e3 * cost:.2f} ms in the Dataset's __getitem__ "
                           f"({1 / cost:.0f} samples/s per worker process)")
            folder = _image_folder(dl.dataset)
            if folder is not None:
                out.append(switch_advice(dl.dataset, folder))
            arrays = inmemory_advice(dl.dataset)
            if arrays is not None:
                out.append(arrays)
        es = prof.epoch_start_ms
        if cur and not dl.persistent_workers and es is not None and \
                es > max(5 * prof.wait_ms, prof.step_ms):
            out.append(f"turn on persistent_workers=True: each new epoch's first batch waited "
                       f"{es:.0f} ms (worker start-up) against {prof.wait_ms:.1f} ms for the "
                       f"others")
        pin = _pin_advice(prof, kind)
        if pin:
            out.append(pin)
    return out

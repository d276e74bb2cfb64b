"""The advice of stoker.profile: every line comes from a measurement taken here or during the
profiled loop (the loader re-created alone at several worker counts, the stoker loader's stage
times, a sample's cost in __getitem__, file sizes), never from a fixed list. Which advice fits
is decided by _core.diagnose (stk_diagnose, shared with `stoker doctor`); this module measures
and words it.

Imports go one way: _profile imports this module, never the reverse (what both need, the
batch-size probe and the sweep's limits, lives here).
"""
import os
import shutil
import sys
import time
import warnings

from . import _core
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


def _dataloader_like(dl, workers):
    """A DataLoader reading what `dl` reads, the same way, with `workers` worker processes."""
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
    return DataLoader(dl.dataset, **kw)


def _rate_torch(dl, workers):
    with warnings.catch_warnings():
        # Worker counts above the cores are tried on purpose (an I/O-bound __getitem__
        # scales past them): PyTorch's "excessive worker creation" warning is expected.
        warnings.simplefilter("ignore", UserWarning)
        it = iter(_dataloader_like(dl, workers))

    def close():
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
    return _timed_rate(it, close)


def _rate_stoker(loader, workers):
    kw = dict(loader._core_kwargs, n_threads=workers, autotune=False, trace_events=0)
    core = _core.Loader(loader._dataset, **kw)
    core.set_epoch(loader._core.epoch)
    return _timed_rate(iter(core), core.close, size=lambda b: b.n_samples)


def _sweep(prof, kind, counts):
    global _measuring
    it = prof.iterable
    _measuring += 1
    try:
        for w in counts:
            if w in prof.sweep:
                continue
            try:
                r = _rate_torch(it, w) if kind == "torch" else _rate_stoker(it, w)
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                return (f"could not re-create the loader alone to measure it "
                        f"({type(e).__name__}: {e})")
            if r is not None:
                prof.sweep[w] = r
    finally:
        _measuring -= 1
    return None


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
    st = prof.iterable.stats()
    parts = {k: st[k + "_s"] for k in ("read", "decode", "augment", "collate", "copy")}
    busy = sum(parts.values())
    if busy > 0:
        prof.stages = {k: v / busy for k, v in parts.items() if v > 0}
    return st


def _sample_cost(dataset, budget=1.0, most=20):
    """Mean seconds of dataset[i] over a few indices (map-style datasets), or None."""
    try:
        n = len(dataset)
    except TypeError:
        return None
    if n == 0 or not hasattr(dataset, "__getitem__"):
        return None
    t0 = time.perf_counter()
    k = 0
    while k < min(n, most) and time.perf_counter() - t0 < budget:
        dataset[k * max(1, n // most) % n]
        k += 1
    return (time.perf_counter() - t0) / k if k else None


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


def advise(prof):
    """The advice lines for a finished Profile (fills prof.sweep and prof.stages)."""
    kind = _kind(prof.iterable)
    out = []
    cur = prof.num_workers
    bsz = prof.batch_size or getattr(prof.iterable, "batch_size", None) or 1
    if kind == "stoker" and prof.iterable.closed:
        return [f"the stoker.Loader was closed before the profile ended: measure with "
                f"steps= (or --steps) so that the advice is taken while it is open"]
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
    # (up to twice their number, as docs/python.md says).
    upto = 2 * _cpus() if kind == "torch" else max(_cpus(), cur or 1)
    err, noisy = _settled_sweep(prof, kind, _counts(kind, cur, upto), bsz, word)
    if err:
        out.append(err)
    if noisy:
        out.append(noisy)
    d = _diagnose(prof, kind, bsz)
    demand, action = d["demand"], d["action"]
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
        out.append(f"no worker count keeps up: the best measured, {word}={w}, delivers {r:.0f} "
                   f"samples/s, {100 * r / demand:.0f}% of the {demand:.0f} samples/s the step "
                   f"consumes; the per-sample work itself has to shrink")
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
    if kind == "torch":
        dl = prof.iterable
        if action == "too_slow":
            cost = _sample_cost(dl.dataset)
            if cost is not None:
                out.append(f"one sample costs {1e3 * cost:.2f} ms in the Dataset's __getitem__ "
                           f"({1 / cost:.0f} samples/s per worker process)")
            folder = _image_folder(dl.dataset)
            if folder is not None:
                out.append(switch_advice(dl.dataset, folder))
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

"""What a Python dataset's worker runs around each __getitem__, whichever executor runs it
(threads or processes) and whichever kind of dataset (map-style or iterable): the global
random generators seeded per sample (seed_all), torch.utils.data.get_worker_info() answered on
worker threads, and the probe of the first samples (their time, GIL-held share and use of the
global generators). Below the executors (_pydataset.py, _pyiterable.py, _procpool.py), which
all import it.
"""
import math
import random
import sys
import threading
import time

import numpy as np

from . import _core
from ._executor import METERED, PAIR, SOLO, idle_ns  # a probe row's kind (its 6th value), time
from ._seedwatch import seed_np, seed_py, seed_torch  # (SeedWatch seeds with the same three)
from .loader import _torch

PROBE_SAMPLES = 8        # at most this many samples are probed
PROBE_BUDGET_S = 0.05    # and no more than this long on an idle machine (at least 3 samples)
PROBE_WALL_S = 1.0       # nor longer than this on a busy one (at least 2 samples)
PROBE_SWITCH_S = 1.0     # the switch interval while a sample is measured
PAIR_SAMPLES = 4         # samples per phase after the metered ones (unmetered solo, then pair)
PAIR_MIN_S = 0.0005      # more when that is shorter: a thread's hand-off must not be the time
PAIR_BUDGET_S = 0.004    # and those phases no longer than this on an idle machine
PAIR_HELD = 0.9          # nor run when the GIL is held this much (nothing left to find)
SOLO_SHORT_S = 100e-6    # but the solo phase does run then for calls shorter than this: the
# metered call's own costs (the meter's lap, SetterWatch: ~5 us) inflate a 1-10 us __getitem__
# several times, and the executor's choice reads the time (issue 24, fourteenth round)
SOLO_GROUPS = 4          # the solo phase's samples are timed in this many groups
PAIR_SHORT_S = 20e-6     # no pair for calls shorter than this: two threads calling a 1-10 us
# __getitem__ back to back mostly hand the GIL over (torch 1.13 drops it in a tensor's dealloc),
# which _executor.THREAD_GIL_S already counts; a lock of another library (h5py's: ~90 us a row)
# is what the pair looks for
EXECUTORS = ("auto", "thread", "process")


def name(dataset):
    return type(dataset).__name__[:100] or "dataset"


# ---- get_worker_info() on threads ----

TLS = threading.local()
_HOOKED = False


def install_worker_info_hook():
    """torch.utils.data.get_worker_info() answers on stoker's worker threads too (each thread
    its own WorkerInfo, kept thread-locally); elsewhere it answers as before. The function's
    code is replaced in place (not the module attribute), so the references a dataset module
    took with `from torch.utils.data import get_worker_info` see it too."""
    global _HOOKED
    torch = _torch()
    if _HOOKED or torch is None:
        return
    from torch.utils.data._utils import worker as tw
    fn = tw.get_worker_info
    if fn.__code__.co_freevars:
        return  # not the function this was written for: leave it
    tw.__dict__["_stoker_tls"] = TLS
    src = ("def get_worker_info():\n"
           "    info = getattr(_stoker_tls, 'info', None)\n"
           "    return _worker_info if info is None else info\n")
    scope = {}
    exec(compile(src, getattr(tw, "__file__", "<torch worker>"), "exec"), tw.__dict__, scope)
    fn.__code__ = scope["get_worker_info"].__code__
    _HOOKED = True


def worker_info(wid, n, seed, dataset):
    torch = _torch()
    if torch is None:
        return None
    from torch.utils.data._utils.worker import WorkerInfo
    from ._listfetch import users  # (batch_size=None with index lists: the user's dataset)
    return WorkerInfo(id=wid, num_workers=n, seed=seed, dataset=users(dataset))


def seed_all(seed):
    """Seed Python's random, NumPy's global generator and torch's CPU generator from one
    64-bit number (the sample's, or the worker's)."""
    seed &= (1 << 64) - 1
    seed_py(seed)
    seed_np(seed)
    seed_torch(seed)


# ---- probing the first samples ----

def rng_states():
    torch = _torch()
    return (random.getstate(), np.random.get_state(),
            torch.get_rng_state() if torch is not None else None)


def rng_restore(states):
    random.setstate(states[0])
    np.random.set_state(states[1])
    torch = _torch()
    if torch is not None and states[2] is not None:
        torch.set_rng_state(states[2])


def rng_changed(before, after):
    """The generators whose state moved between two rng_states(): a frozenset of "random",
    "numpy", "torch" (empty: none)."""
    moved = set()
    if before[0] != after[0]:
        moved.add("random")
    a, b = before[1], after[1]
    if a[2] != b[2] or not np.array_equal(a[1], b[1]):
        moved.add("numpy")
    if before[2] is not None and after[2] is not None and \
            not np.array_equal(before[2].numpy(), after[2].numpy()):  # (no torch op)
        moved.add("torch")
    return frozenset(moved)


def runq_ns():
    """Nanoseconds this thread has waited on a run queue for a CPU (Linux
    /proc/thread-self/schedstat, its second field; 0 where the kernel does not say): the part
    of a call's wall time that is the machine's load, not the call."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0


# Functions that set a global random generator's state, looked up as module attributes.
_SETTERS = (("random", "seed"), ("random", "setstate"), ("numpy.random", "seed"),
            ("numpy.random", "set_state"), ("torch", "manual_seed"), ("torch", "set_rng_state"),
            ("torch", "seed"), ("torch.random", "manual_seed"),
            ("torch.random", "set_rng_state"), ("torch.random", "seed"))


class SetterWatch:
    """While entered: whether this thread called a function that sets a global random
    generator's state (random.seed, numpy.random.seed or set_state, torch.manual_seed or
    set_rng_state). A __getitem__ that seeds a generator itself and puts it back afterwards
    (torchvision's FakeData) leaves the states as they were, so the before/after comparison
    does not see it use them; threads running it at once interleave one's seeding with
    another's draws. The module attributes are wrapped meanwhile (a call from another thread
    goes through unnoted)."""

    def __init__(self):
        self.hit = False
        self._saved = []

    def __enter__(self):
        me = threading.get_ident()
        for name, attr in _SETTERS:
            mod = sys.modules.get(name)
            f = getattr(mod, attr, None) if mod is not None else None
            if f is None or getattr(f, "_stoker_watched", False):
                continue

            def watched(*args, _f=f, **kw):
                if threading.get_ident() == me:
                    self.hit = True
                return _f(*args, **kw)
            watched._stoker_watched = True
            setattr(mod, attr, watched)
            self._saved.append((mod, attr, f))
        return self

    def __exit__(self, *exc):
        while self._saved:
            mod, attr, f = self._saved.pop()
            setattr(mod, attr, f)
        return False


def probe_samples(dataset, request, started=None, ctl=None):
    """Run __getitem__ on the first indices (request["indices"]: at most PROBE_SAMPLES, and no
    more once PROBE_BUDGET_S passed after the first), in a worker process or in the
    constructing thread; each is seeded as a worker seeds it when request["reseed"] (from
    (request["seed"], epoch 0, index)). Measures each call's wall time, CPU time, that CPU time
    split by the GIL meter into GIL-held and GIL-free (only when request["gil"]: the meter's
    thread is started once for the whole probe, and each call reads its lap), its run-queue
    wait (the wall time the machine's load added), and whether the call drew from the global
    random generators (or set one's state: SetterWatch). While a call is metered the switch
    interval is PROBE_SWITCH_S, so that the meter never makes it hand the GIL over and wait to
    get it back (a wait the load would stretch); other threads of the process wait for the GIL
    meanwhile, as for any call that does not release it. The budget counts idle-machine time,
    so a busy machine does not cut the probe short of 3 samples. started(index), when given, is
    called before each sample (a worker process tells the parent, whose timeout= runs from
    there).

    With the meter on, two more phases follow when they fit PAIR_BUDGET_S (probe_more): the
    meter makes a call that takes and drops the GIL often (h5py) twice as slow as it is, so a
    few samples are timed again without it (SOLO rows), and a lock other than the GIL that
    serializes threads (h5py's global lock) is invisible to the meter, so two threads then run
    samples at once (one PAIR row each: their time per sample, set against one thread's).

    Returns (first sample, rows, drew, kept) (_executor.probe_of reads the rows): drew the
    generators the calls drew from (rng_changed's names; "setter" when one set a generator's
    state, SetterWatch; empty: none), each row
    (wall_ns, cpu_ns, held_cpu_ns, free_cpu_ns, runq_ns, kind), kind METERED, SOLO or PAIR;
    kept is {index: (sample, wall_ns)} of the metered samples when request["keep"] (the thread
    executor hands them out as epoch 0's samples instead of loading them again), else {}.
    request["after_first"](), when given, is called after the first sample returns. With
    request["stop_on_rng"] the probe ends at the first sample that drew from the global
    generators (that settles the executor: _executor.probe_plan). An exception in the first
    sample propagates; a later one ends the probe."""
    meter = _core.GilMeter() if request.get("gil", True) else None
    keep = request.get("keep", False)
    rows, first, drew, kept, idle = [], None, frozenset(), {}, 0.0
    switch = sys.getswitchinterval()
    if ctl is not None:  # for release_probe, from the thread that stops waiting for this one
        ctl["switch"], ctl["meter"] = switch, meter
    start = time.perf_counter()
    if meter is not None:
        meter.start()
    try:
        for k, index in enumerate(request["indices"]):
            if request.get("reseed"):
                seed_all(_core.sample_seed(request["seed"], 0, index))
            before = rng_states()
            if started is not None:
                started(index)
            if meter is not None:
                sys.setswitchinterval(PROBE_SWITCH_S)  # (put back below and at the end)
                meter.lap()
            q0 = runq_ns()
            c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
            try:
                with SetterWatch() as setters:
                    sample = dataset[index]
            except Exception:  # noqa: BLE001
                if k == 0:
                    raise  # the first sample fixes the layout: the caller reports it
                break  # a later one: the workers will report it at its batch
            t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
            q1 = runq_ns()
            held, free = meter.lap() if meter is not None else (0, 0)
            sys.setswitchinterval(switch)
            drew = drew | rng_changed(before, rng_states()) | \
                (frozenset(("setter",)) if setters.hit else frozenset())
            rows.append((t1 - t0, c1 - c0, held, free, max(0, q1 - q0), METERED))
            idle += idle_ns(rows[-1]) / 1e9
            if k == 0:
                first = sample
                if request.get("after_first") is not None:  # (here only: not pickled)
                    request["after_first"]()
            if keep:
                kept[index] = (sample, t1 - t0)
            if k + 1 >= PROBE_SAMPLES or (idle > PROBE_BUDGET_S and k >= 2) or \
                    (time.perf_counter() - start > PROBE_WALL_S and k >= 1) or \
                    (drew and request.get("stop_on_rng")):
                break
    finally:
        sys.setswitchinterval(switch)
        if meter is not None:
            meter.stop()
    if meter is not None and not drew:
        rows += probe_more(dataset, request["indices"][1:len(rows)], rows, started)
    return first, rows, drew, kept


def probe_more(dataset, indices, rows, started=None):
    """The probe's unmetered phases, on `indices` (the metered samples after the first, loaded
    again; none drew random numbers): m samples timed alone (SOLO rows), then m on each of two
    threads started together (one PAIR row per thread: its wall, CPU and run-queue times per
    sample over its m samples). m = PAIR_SAMPLES, or enough to take PAIR_MIN_S when samples are
    shorter (the indices repeat), fewer when 3 m samples of the metered ones' fastest
    idle-machine time exceed PAIR_BUDGET_S (the time to first batch: a 1 ms sample is not run
    again); the solo samples are timed in SOLO_GROUPS groups (a row each: per-sample times).
    None (no rows) under 2, on one CPU, or when a call raised. No pair when the metered calls
    after the first held the GIL PAIR_HELD of their classified CPU time or more (threads run them
    one at a time already, and the meter does not slow a call that keeps the GIL), nor for calls
    shorter than PAIR_SHORT_S; and then no solo phase either, unless the calls are shorter than
    SOLO_SHORT_S (the metered call's own costs are most of their measured time)."""
    held = sum(r[2] for r in rows[1:])
    if not indices or not rows or _core.n_cpus() < 2:
        return []
    fastest = max(1, min(idle_ns(r) for r in rows)) / 1e9
    keeps_gil = held >= PAIR_HELD * max(1, held + sum(r[3] for r in rows[1:]))
    if keeps_gil and fastest >= SOLO_SHORT_S:
        return []
    m = min(max(PAIR_SAMPLES, math.ceil(PAIR_MIN_S / fastest)),
            int(PAIR_BUDGET_S / (3 * fastest)))
    if m < 2:
        return []
    todo = [indices[k % len(indices)] for k in range(m)]
    more = []
    try:
        # timed in SOLO_GROUPS groups, not call by call: the clocks' reads cost about 1 us
        per = math.ceil(m / SOLO_GROUPS)
        for g in range(0, m, per):
            group = todo[g:g + per]
            if started is not None:
                started(group[0])
            q0 = runq_ns()
            c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
            for index in group:
                dataset[index]
            t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
            n = len(group)
            more.append(((t1 - t0) // n, (c1 - c0) // n, 0, 0, max(0, runq_ns() - q0) // n,
                         SOLO))
        if keeps_gil or min(idle_ns(r) for r in more) / 1e9 < PAIR_SHORT_S:
            return more  # no pair: threads run it one at a time already, or its time is the
            # GIL's hand-offs between two threads, which the executor's model counts itself
        if started is not None:
            started(todo[0])
        more += _pair(dataset, todo)
    except Exception:  # noqa: BLE001 - the workers will report it at its batch
        return []
    return more


def _pair(dataset, todo):
    """Two threads, released together, each loading `todo`: their PAIR rows (wall, CPU and
    run-queue times per sample). A thread's wall time runs from the earlier thread's start: a
    thread that waited for the GIL before its first bytecode (behind a call that never drops
    it) waited from there."""
    gate = threading.Barrier(2)
    out, errors, t0 = [None, None], [], []
    info = getattr(TLS, "info", None)  # get_worker_info() answers alike on both threads

    def run(k):
        try:
            if k:
                TLS.info = info
            gate.wait()
            t0.append(time.perf_counter_ns())  # (list.append: atomic)
            q0, c0 = runq_ns(), time.thread_time_ns()
            for index in todo:
                dataset[index]
            t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
            out[k] = (t1, c1 - c0, max(0, runq_ns() - q0))
        except BaseException as e:  # noqa: BLE001 - raised below, in the probing thread
            errors.append(e)
            gate.abort()

    other = threading.Thread(target=run, args=(1,), name="stoker-probe-pair", daemon=True)
    other.start()
    run(0)
    other.join()
    if errors:
        raise errors[0]
    start, m = min(t0), len(todo)
    return [((t1 - start) // m, cpu // m, 0, 0, runq // m, PAIR) for t1, cpu, runq in out]


def release_probe(ctl):
    """What a probe that is left in a __getitem__ (the constructor's timeout, Ctrl-C) must not
    keep while it stays there: the switch interval it raised for its measurement (the whole
    process's threads would hand the GIL over once a second) and its GIL meter's thread (taking
    the GIL every cycle for as long as the sample runs). ctl: what probe_samples(ctl=) noted."""
    if "switch" in ctl:
        sys.setswitchinterval(ctl["switch"])
    if ctl.get("meter") is not None:
        ctl["meter"].stop()

"""What a Python dataset's worker runs around each __getitem__, whichever executor runs it
(threads or processes) and whichever kind of dataset (map-style or iterable): the global
random generators seeded per sample (seed_all), torch.utils.data.get_worker_info() answered on
worker threads, and the probe of the first samples (their time, GIL-held share and use of the
global generators). Below the executors (_pydataset.py, _pyiterable.py, _procpool.py), which
all import it.
"""
import random
import sys
import threading
import time

import numpy as np

from . import _core
from .loader import _torch

PROBE_SAMPLES = 8        # at most this many samples are probed
PROBE_BUDGET_S = 0.05    # and no more than this long on an idle machine (at least 3 samples)
PROBE_WALL_S = 1.0       # nor longer than this on a busy one (at least 2 samples)
PROBE_SWITCH_S = 1.0     # the switch interval while a sample is measured
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
    return WorkerInfo(id=wid, num_workers=n, seed=seed, dataset=dataset)


def seed_all(seed):
    """Seed Python's random, NumPy's global generator and torch's CPU generator from one
    64-bit number (the sample's, or the worker's)."""
    seed &= (1 << 64) - 1
    random.seed(seed)
    np.random.seed([seed & 0xFFFFFFFF, seed >> 32])
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.default_generator.manual_seed(seed)


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
    if before[0] != after[0]:
        return True
    a, b = before[1], after[1]
    if a[2] != b[2] or not np.array_equal(a[1], b[1]):
        return True
    if before[2] is not None and after[2] is not None:  # (numpy's compare: no torch op)
        return not np.array_equal(before[2].numpy(), after[2].numpy())
    return False


def runq_ns():
    """Nanoseconds this thread has waited on a run queue for a CPU (Linux
    /proc/thread-self/schedstat, its second field; 0 where the kernel does not say): the part
    of a call's wall time that is the machine's load, not the call."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def probe_samples(dataset, request, started=None, ctl=None):
    """Run __getitem__ on the first indices (request["indices"]: at most PROBE_SAMPLES, and no
    more once PROBE_BUDGET_S passed after the first), in a worker process or in the
    constructing thread; each is seeded as a worker seeds it when request["reseed"] (from
    (request["seed"], epoch 0, index)). Measures each call's wall time, CPU time, that CPU time
    split by the GIL meter into GIL-held and GIL-free (only when request["gil"]: the meter's
    thread is started once for the whole probe, and each call reads its lap), its run-queue
    wait (the wall time the machine's load added), and whether the call drew from the global
    random generators. While a call is metered the switch interval is PROBE_SWITCH_S, so that
    the meter never makes it hand the GIL over and wait to get it back (a wait the load would
    stretch); other threads of the process wait for the GIL meanwhile, as for any call that does
    not release it. The budget counts idle-machine time, so a busy machine does not cut the
    probe short of 3 samples. started(index), when given, is called before each sample (a
    worker process tells the parent, whose timeout= runs from there). Returns (first sample,
    [(wall_ns, cpu_ns, held_cpu_ns, free_cpu_ns, runq_ns)], drew, kept) (_executor.probe_of
    reads the rows): kept is {index: (sample, wall_ns)}
    of the probed samples when request["keep"] (the thread executor hands them out as epoch 0's
    samples instead of loading them again), else {}. With request["stop_on_rng"] the probe ends
    at the first sample that drew from the global generators (that settles the executor:
    _executor.probe_plan). An exception in the first sample propagates; a later one ends the
    probe."""
    meter = _core.GilMeter() if request.get("gil", True) else None
    keep = request.get("keep", False)
    rows, first, drew, kept, idle = [], None, False, {}, 0.0
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
                sample = dataset[index]
            except Exception:  # noqa: BLE001
                if k == 0:
                    raise  # the first sample fixes the layout: the caller reports it
                break  # a later one: the workers will report it at its batch
            t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
            q1 = runq_ns()
            held, free = meter.lap() if meter is not None else (0, 0)
            sys.setswitchinterval(switch)
            drew = drew or rng_changed(before, rng_states())
            rows.append((t1 - t0, c1 - c0, held, free, max(0, q1 - q0)))
            idle += max(c1 - c0, t1 - t0 - max(0, q1 - q0)) / 1e9
            if k == 0:
                first = sample
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
    return first, rows, drew, kept


def release_probe(ctl):
    """What a probe that is left in a __getitem__ (the constructor's timeout, Ctrl-C) must not
    keep while it stays there: the switch interval it raised for its measurement (the whole
    process's threads would hand the GIL over once a second) and its GIL meter's thread (taking
    the GIL every cycle for as long as the sample runs). ctl: what probe_samples(ctl=) noted."""
    if "switch" in ctl:
        sys.setswitchinterval(ctl["switch"])
    if ctl.get("meter") is not None:
        ctl["meter"].stop()

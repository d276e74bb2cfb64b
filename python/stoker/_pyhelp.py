"""The training thread loads part of the first batch (issue 24): while next() waits for the
loader's first batch, the thread that called it is idle anyway, so it claims tickets of that
batch from the same batch the workers take them from (stk_loader_help: one ticket at a time,
exactly once, its failure the batch's as a worker's) and runs __getitem__ here, with the GIL,
while the worker threads run or the worker processes start (the fork server, the workers' forks
and their first ticket cost 20-40 ms before the first sample of a worker process).

Only where __getitem__ may run in this process at all: not with executor="process" given (then,
as with the DataLoader, it never runs here), not with a worker_init_fn (which may change the
process it runs in), not at num_workers=0 (one sample at a time, in order, as asked), and on
worker processes only when their samples do not depend on which process loads them
(reseed=True seeds each sample from (seed, epoch, index); else a dataset the probe saw not
drawing random numbers). A sample loaded here is the one the executor would
deliver: on processes the global generators are seeded per sample as a worker seeds them and the
training thread's generator states are put back afterwards; get_worker_info() answers as in the
probe (worker 0). Samples the probe loaded (ThreadRunner's `kept`, epoch 0's) are handed out
here too, also when the executor is processes.

It stops after the first batch next() returns (or raises): by then every worker is running, and
the training thread's time is the training step's; the ring keeps the workers ahead from there.
A KeyboardInterrupt in a sample loaded here leaves its ticket claimed: the next call loads it
again first (the loader stays usable; a reset discards it). STOKER_HELP=0 in the environment
turns it off (tests and benchmarks compare).

On the thread executor it helps only where that executor already calls __getitem__ from two
threads or more and the dataset draws no global random numbers: at one worker thread the
training thread would make a dataset that was called serially be called from two threads at
once (allowed()).

At num_workers=0 (and where "auto" finds no worker that could run beside the training thread:
_executor.choose) the same machinery loads every batch, not only the first: the C loader is made
with caller_loads (STK_LOADER_CALLER_LOADS: its worker thread never takes a sample), and each
next() first runs the batch's samples here (Loader._load: one C call a batch, __getitem__ called
from C and its leaves written by the layout's plan, as a worker thread's fast path), as the
DataLoader's main process does: get_worker_info() is None, no worker_init_fn runs, and nothing
loads while the training step runs (Helper(inline=True)).
"""
import os
import time

from . import _core
from . import _errors
from . import _pyworker

ENV = "STOKER_HELP"
_KEY_BASE = 1 << 63  # a row loaded here on processes: its key with the top bit set (negative
# as the ring's int64), so the consumer finds its object leaves here, not in the pool's table


def enabled():
    """Whether the training thread helps (STOKER_HELP unset, or not 0/off/no/false)."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "off", "no", "false")


def allowed(executor_arg, workers, worker_init_fn, chosen, reseed, uses_rng, threads=0):
    """Whether __getitem__ may run in the training thread for the first batch (never at
    num_workers=0, which runs one sample at a time, in order). On the thread executor only
    where it already runs two threads or more (`threads`) and the probe saw no draws from the
    global generators: the training thread is one more caller at the same time, and a dataset
    given one worker may not be safe to call from two threads at once (torchvision's FakeData
    sets torch's global generator in __getitem__: two callers mix their pixels)."""
    if not enabled() or executor_arg == "process" or worker_init_fn is not None or \
            workers == 0:
        return False
    if chosen == "thread":
        return threads >= 2 and not uses_rng
    return reseed or not uses_rng


class HelpRunner:
    """The runner stk_loader_help calls on the training thread, with the GIL held, through a
    ThreadExec: (index, epoch, seed, worker, row) -> (bufs, key, mask), as ThreadRunner. On
    threads it is ThreadRunner.load (its kept samples, object table and error records); on
    processes its own: the sample seeded per (seed, epoch, index) when reseed, object leaves kept
    in `table` under keys with the top bit set, errors in `errors`."""

    def __init__(self, dataset, layout, info, threads=None, reseed=True, kept=None,
                 where="in the training thread (stoker.Loader's first batch)"):
        self.getitem = dataset.__getitem__
        self.where = where
        self.layout = layout
        self.info = info
        self.threads = threads
        self.reseed = reseed
        self.kept = kept or None  # (processes) {index: (sample, ns)}: epoch 0's, once
        self.table = {}
        self.n_keys = 0
        self.errors = {}
        self.samples = 0  # loaded here (the probe's kept ones included)
        self.py_ns = 0
        self.none = [None] * len(layout.fixed)

    def __call__(self, index, epoch, seed, worker, row):
        self.samples += 1
        if self.threads is not None:
            return self.threads.load(index, epoch, self.where)
        kept = self.kept
        if kept is not None:
            got = kept.pop(index, None) if epoch == 0 else None
            if epoch != 0 or not kept:
                self.kept = None
            if got is not None:
                self.py_ns += got[1]
                return self._flatten(got[0])
        if self.reseed:
            _pyworker.seed_all(seed)
        t0 = time.perf_counter_ns()
        try:
            sample = self.getitem(index)
        except Exception:  # a worker process's error, named alike (KeyboardInterrupt: retried);
            # the training thread's own at num_workers=0 is the exception itself
            self.errors[index] = _errors.caught(
                f"{self.where} while loading sample {index} (epoch {epoch})")
            raise
        finally:
            self.py_ns += time.perf_counter_ns() - t0
        return self._flatten(sample)

    def _flatten(self, sample):
        bufs, objects, extras, mask = self.layout.flatten(sample, True)
        key = 0
        if objects or mask:
            self.n_keys += 1
            key = _KEY_BASE | self.n_keys
            self.table[key - (1 << 64)] = (objects, extras)  # as the ring's int64 reads it
        return (bufs if bufs is not None else self.none), key, mask

    def take(self, key):
        """(objects, extras) of a row loaded here (its key < 0), or None."""
        return self.table.pop(key, None)


class Helper:
    """The training thread's part in the first batch: run() loads samples of the batch the
    consumer waits for until none is left to take; `on` until the first batch came. inline: in
    every batch (a loader made with caller_loads), `on` for good, the samples __getitem__ returns
    written from C where the layout's plan fits them (fast: (getitem, plan, flatten, failed), as
    ThreadExec.set_fast takes them)."""

    def __init__(self, runner, fields, processes, inline=False, fast=None):
        self.runner = runner
        self.exec = _core.ThreadExec(runner, fields)
        if fast is not None:
            self.exec.set_fast(*fast, here=True)
        self.processes = processes
        self.inline = inline
        self.on = True

    def run(self, core):
        """Load the samples this thread can take; inline, the count of those it loaded."""
        tls = _pyworker.TLS
        info = getattr(tls, "info", None)
        states = _pyworker.rng_states() if self.processes else None
        tls.info = self.runner.info
        try:
            if self.inline:
                return core._load(self.exec)
            while core._help(self.exec):
                pass
            return None
        finally:
            tls.info = info
            if states is not None:
                _pyworker.rng_restore(states)

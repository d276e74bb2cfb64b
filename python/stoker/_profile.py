"""stoker.profile: is a training loop waiting on data, by how much, and what fixes it.

Works on any iterable of batches: a PyTorch ``DataLoader``, a ``stoker.Loader`` or anything
else. Two forms::

    report = stoker.profile(loader, step=train_step, steps=200)   # runs the loop itself
    print(report)

    prof = stoker.profile(loader)            # wraps an existing loop
    for batch in prof:
        train_step(batch)
    print(prof)                              # or prof.to_dict(), prof.data_bound, ...

Each ``next()`` on the loader is timed as *waiting*; the time from a batch's arrival to the
next ``next()`` call is the *step* (with ``torch.cuda.synchronize()`` before the clock stops
when the loop uses CUDA, so the step includes the GPU's work). The loop is data-bound when
waiting takes more than 5% of the time: the verdict is _core.diagnose (stk_diagnose), the
decision `stoker doctor` takes too, with the same thresholds. When it is, the advice comes from
measurements (_advice.py; imports go from here to there, never back): the
loader is re-created alone at several worker counts to find the fewest that meet the step's
demand, and the loader's own stage times say where the time goes.

Across ranks (torch.distributed, or torchrun's environment with STOKER_DOCTOR_DIR; see
_ranks.py): when the loop ends (the `steps` limit, or the end of the iterable without one),
every rank sends its figures to the others; `ranks` holds the table, `straggler` the rank whose
data wait holds the job back (or None) and `ranks_verdict` says so; the advice is measured on
that rank (on rank 0 when there is none) and every rank's report carries it. `trace=` writes
one Perfetto trace of every rank's loop (rank 0 writes it).
"""
import os
import sys
import time

from . import _core, _ranks
from ._advice import _batch_size, advise as _advise, batch_bytes as _batch_bytes, \
    costs as _costs

__all__ = ["profile", "Profile", "DATA_BOUND_SHARE"]

# waiting share of the loop's time above which it is data-bound (STK_DIAG_DATA_BOUND_SHARE)
DATA_BOUND_SHARE = _core.DIAG_DATA_BOUND_SHARE


def _python_summary(c, workers):
    """One line on the user's Python, from Profile.costs (None when there is nothing to say)."""
    parts = []
    ex = c.get("executor")
    if ex in ("thread", "process"):
        parts.append(f"executor {ex}" + (f" ({c['executor_reason']})"
                                         if c.get("executor_reason") else ""))
    elif ex == "main":
        parts.append("__getitem__ in the main process (num_workers=0)")
    if c.get("getitem_ms") is not None:
        s = f"__getitem__ {c['getitem_ms']:.2f} ms per sample"
        if c.get("getitem_cpu_share") is not None:
            s += f" ({100 * c['getitem_cpu_share']:.0f}% on a CPU)"
        parts.append(s)
    if c.get("gil_share") is not None:
        parts.append(f"GIL held {100 * c['gil_share']:.0f}% of it")
    if ex == "process" and c.get("batch_bytes"):
        parts.append(f"{c['batch_bytes'] / 1e6:.2f} MB per batch between processes")
    if c.get("transfer_samples_per_s"):
        parts.append(f"the same batches with a free __getitem__: "
                     f"{c['transfer_samples_per_s']:.0f} samples/s at num_workers="
                     f"{c['transfer_workers']}")
    return ("python: " + "; ".join(parts)) if parts else None


class _StopProfiling(BaseException):
    """Raised out of next() once `steps` steps were measured (stoker.doctor stops the user's
    script with it; a BaseException so that `except Exception` in the script lets it pass)."""


def _cuda_sync_fn(sync):
    """torch.cuda.synchronize when `sync` (None: when the process has initialised CUDA)."""
    if sync is False:
        return None
    torch = sys.modules.get("torch")
    if torch is None:
        if sync:
            raise RuntimeError("profile(sync=True) needs torch with CUDA")
        return None
    cuda = torch.cuda
    if sync is None:
        # Decided at each step: a loop that initialises CUDA after the profile starts is still
        # synchronised from then on.
        def maybe():
            if cuda.is_initialized():
                cuda.synchronize()
        return maybe
    return cuda.synchronize


class _TimedIter:
    """Iterator wrapper: each __next__ records the step that just ended and the wait for the
    next batch into its Profile. Attributes of the wrapped iterator pass through."""

    def __init__(self, prof, it, started=None):
        self._prof, self._it = prof, it
        self._last = None       # perf_counter when the previous batch was handed over
        self._started = started  # perf_counter before iter(loader): the pass's start-up
        self._first = True
        self._coll0 = 0.0       # _ranks.collective_s then
        if _ranks.context()[1] > 1:
            _ranks.install_collective_timer()

    def __iter__(self):
        return self

    def __len__(self):
        return len(self._it)

    def __getattr__(self, name):
        return getattr(self._it, name)

    def __next__(self):
        prof = self._prof
        t0 = time.perf_counter()
        if self._first and self._started is not None:
            # The loop waited for iter(loader) too (a DataLoader starts its workers there):
            # the first batch's wait counts from it.
            t0, self._started = self._started, None
        if self._last is not None:
            if prof._sync is not None:
                prof._sync()
                t0 = time.perf_counter()
            prof._step(t0 - self._last, _ranks.collective_s - self._coll0, self._last)
            self._last = None
        if prof.steps_limit is not None and prof.steps >= prof.steps_limit + prof.warmup:
            prof._finish()  # measured now, while the loop's loader is certainly still open
            raise _StopProfiling()
        try:
            batch = next(self._it)
        except StopIteration:
            prof._epoch_end()
            if prof.steps_limit is None and _ranks.context()[1] > 1:
                prof._finish()  # the loop is over on every rank: exchange the figures
            raise
        t1 = time.perf_counter()
        prof._wait(t1 - t0, batch, self._first, t0)
        self._first = False
        self._last = time.perf_counter()
        self._coll0 = _ranks.collective_s
        return batch


class Profile:
    """Measurements of one training loop, the verdict and the advice.

    Attributes (all from measured steps, the first `warmup` left out):
    steps, wait_s and step_s (totals), wait_share (waiting / (waiting + step)), data_bound,
    wait_ms and step_ms (means per step; a pass's first wait counts from iter(loader), where a
    DataLoader starts its workers), first_wait_ms (the very first batch: start-up),
    epoch_start_ms (mean wait for each later epoch's first batch), batch_size, samples_per_s,
    loader (the loader's type), num_workers, sweep ({num_workers: samples/s of the loader
    alone; the medians when the sweeps disagreed}), sweep_rounds (sweeps run: repeated until
    two in a row decide the same, at most 3), stages (the stoker loader's stage shares),
    batch_bytes (bytes of the arrays in a batch), advice (list of str), and costs, what the
    user's Python costs (None where not measured): executor ("thread", "process" or "native"
    for a stoker.Loader, as its info() says, with executor_reason; "process" or "main" for a
    DataLoader), getitem_ms (per sample in __getitem__: stoker's counters, or the DataLoader's
    timed in its workers during the sweep), getitem_cpu_share (its CPU time / its time),
    gil_share (stoker's thread executor), batch_bytes, transfer_samples_per_s and
    transfer_workers (a DataLoader's batches when __getitem__ costs nothing), limit
    ("transfer", "gil", "getitem_wait", "getitem_cpu" or None: _costs.limit) and
    limit_samples_per_s.

    Across ranks, once the loop has ended: rank and world, ranks (one dict per rank: rank,
    host, steps, wait_share, data_bound, wait_ms, step_ms, samples_per_s, collective_ms and
    collective_source, "measured" or "estimate"; None for a rank that did not report),
    straggler (a rank or None), ranks_verdict (str) and advice_rank (where the advice was
    measured). A single process has world 1 and ranks None.
    """

    def __init__(self, iterable, steps=None, warmup=2, sync=None, advise=True, trace=None):
        if steps is not None and (not isinstance(steps, int) or steps < 1):
            raise ValueError(f"steps should be a positive integer, got steps={steps!r}")
        if not isinstance(warmup, int) or warmup < 0:
            raise ValueError(f"warmup should be a non-negative integer, got warmup={warmup!r}")
        self.iterable = iterable
        self.steps_limit = steps
        self.warmup = warmup
        self.advise = advise
        self._sync = _cuda_sync_fn(sync)
        self._waits, self._steps, self._first_of_epoch = [], [], []
        self._pending = None      # wait of the batch whose step is running
        self.first_wait_ms = None
        self.batch_size = None
        self._advice = None
        self.sweep = {}
        self.sweep_rounds = 0
        self.batch_bytes = None   # bytes of the arrays in the first batch
        self.getitem = {}         # {workers: (wall s, cpu s) per __getitem__} from the sweep
        # the user's Python (_advice.costs, _costs.limit): see the class doc
        self.costs = dict.fromkeys(
            ("executor", "executor_reason", "getitem_ms", "getitem_cpu_share", "gil_share",
             "batch_bytes", "transfer_samples_per_s", "transfer_workers", "limit",
             "limit_samples_per_s"))
        self.stages = {}
        self.epochs = 0
        self.trace = None if trace is None else os.fspath(trace)
        self._colls = []          # seconds in collectives during each step
        self._events = []         # (name, wall-clock start, seconds) for the trace
        self._clock = time.time() - time.perf_counter()   # perf_counter -> wall clock
        self._span0 = len(_ranks.collective_spans)          # the collectives before are not ours
        self.rank, self.world = 0, 1
        self.ranks = self.straggler = self.ranks_verdict = self.advice_rank = None
        self._finished_at = None  # steps when _finish last ran
        try:  # taken now: the loop may close its loader before the report is read
            n = getattr(iterable, "num_workers", None)
        except Exception:  # noqa: BLE001 - a closed loader: unknown
            n = None
        self._num_workers = n if isinstance(n, int) else None

    # ---- measuring ----

    def __iter__(self):
        started = time.perf_counter()
        return _TimedIter(self, iter(self.iterable), started)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        return exc_type is _StopProfiling  # the steps limit ends a `with` block quietly

    def _event(self, name, start, seconds):
        if len(self._events) < _ranks._MAX_EVENTS:
            self._events.append((name, start + self._clock, seconds))

    def _wait(self, seconds, batch, first, start=None):
        if start is not None:
            self._event("wait for data", start, seconds)
        if self.first_wait_ms is None:
            self.first_wait_ms = seconds * 1e3
        if self.batch_size is None:
            self.batch_size = _batch_size(batch)
            self.batch_bytes = _batch_bytes(batch)
        self._pending = (seconds, first)

    def _step(self, seconds, collective=0.0, start=None):
        if self._pending is None:
            return
        w, first = self._pending
        self._pending = None
        self._waits.append(w)
        self._steps.append(seconds)
        self._colls.append(collective)
        self._first_of_epoch.append(first)
        self._advice = None
        if start is not None:
            self._event("step", start, seconds)

    def _epoch_end(self):
        self.epochs += 1

    def run(self, step):
        """Run `step(batch)` over the iterable until `steps` steps (re-iterating it for more
        epochs when it can be), then return self."""
        limit = self.steps_limit
        passes = 0
        while True:
            it = iter(self)
            got = 0
            try:
                for batch in it:
                    step(batch)
                    got += 1
            except _StopProfiling:
                break
            passes += 1
            if limit is None or got == 0 or hasattr(self.iterable, "__next__"):
                break  # one pass when no limit; an iterator cannot start again
        if self._finished_at != self.steps:
            self._finish()
        return self

    # ---- the end of the loop: advice, and the exchange between ranks ----

    def _record(self):
        """This rank's row of the table (and its loop events, for the merged trace)."""
        k = self.warmup if len(self._waits) > self.warmup else 0
        colls = self._colls[k:]
        return {"rank": self.rank, "host": _ranks.host(), "steps": len(colls),
                "wait_share": self.wait_share, "data_bound": self.data_bound,
                "wait_ms": self.wait_ms, "step_ms": self.step_ms,
                "samples_per_s": self.samples_per_s,
                "collective_ms": 1e3 * sum(colls) / len(colls) if any(colls) else None,
                "collective_source": "measured" if any(colls) else None,
                "events": self._events + [("collective", t + self._clock, d)
                                          for t, d in _ranks.collective_spans[self._span0:]]}

    def _finish(self):
        """The loop has ended (on every rank, at the same step): with one process, take the
        advice now (the loader is still open); across ranks, exchange the figures, judge, take
        the advice on the straggler (or rank 0) and share it. Writes the trace when asked."""
        self._finished_at = self.steps
        rank, world, how = _ranks.context()
        self.rank, self.world = rank, world
        _costs(self)  # the executor and the user's Python time, while the loader is open
        if world <= 1:
            self.advice  # noqa: B018 - measured now
            if self.trace:
                _ranks.write_trace(self.trace, [self._record()])
            return
        table = _ranks.gather(self._record(), how, rank, world)
        _ranks.estimate_collective(table)
        self.straggler, self.ranks_verdict = _ranks.judge(table)
        # the advice is measured on the straggler (rank 0 without one); a rank that cannot
        # reach the others measures its own
        self.advice_rank = rank if how == "none" else \
            self.straggler if self.straggler is not None else 0
        mine = _advise(self) if self.advise and self.steps and rank == self.advice_rank \
            else None
        shared = _ranks.gather(mine, how, rank, world)[self.advice_rank]
        self._advice = list(shared) if shared is not None else []
        if self.trace and rank == 0:
            _ranks.write_trace(self.trace, table)
        self.ranks = [None if r is None else {k: v for k, v in r.items() if k != "events"}
                      for r in table]

    # ---- results ----

    def _measured(self):
        k = self.warmup if len(self._waits) > self.warmup else 0
        return self._waits[k:], self._steps[k:], self._first_of_epoch[k:]

    @property
    def steps(self):
        """Steps measured so far (warm-up included)."""
        return len(self._waits)

    @property
    def wait_s(self):
        return sum(self._measured()[0])

    @property
    def step_s(self):
        return sum(self._measured()[1])

    def _verdict(self):
        w, s, _ = self._measured()
        return _core.diagnose(sum(w), sum(s), len(w), self.batch_size or 0)

    @property
    def wait_share(self):
        return self._verdict()["wait_share"]

    @property
    def data_bound(self):
        return self._verdict()["data_bound"]

    @property
    def wait_ms(self):
        w = self._measured()[0]
        return 1e3 * sum(w) / len(w) if w else 0.0

    @property
    def step_ms(self):
        s = self._measured()[1]
        return 1e3 * sum(s) / len(s) if s else 0.0

    @property
    def epoch_start_ms(self):
        w, _, first = self._measured()
        starts = [x for x, f in zip(w, first) if f]
        return 1e3 * sum(starts) / len(starts) if starts else None

    @property
    def samples_per_s(self):
        w, s, _ = self._measured()
        total = sum(w) + sum(s)
        if not self.batch_size or total <= 0:
            return None
        return self.batch_size * len(w) / total

    @property
    def loader(self):
        t = type(self.iterable)
        name = f"{t.__module__}.{t.__qualname__}"
        for full, short in (("torch.utils.data.dataloader.", "torch.utils.data."),
                            ("stoker.loader.", "stoker.")):
            name = name.replace(full, short)
        return name

    @property
    def num_workers(self):
        return self._num_workers

    @property
    def advice(self):
        if self._advice is None:
            self._advice = _advise(self) if self.advise and self.steps and self.world <= 1 \
                else []
        return self._advice

    def to_dict(self):
        advice = self.advice
        return {"steps": len(self._measured()[0]), "warmup": self.warmup,
                "wait_share": self.wait_share, "data_bound": self.data_bound,
                "step_ms": self.step_ms, "wait_ms": self.wait_ms,
                "first_wait_ms": self.first_wait_ms, "epoch_start_ms": self.epoch_start_ms,
                "batch_size": self.batch_size, "samples_per_s": self.samples_per_s,
                "loader": self.loader, "num_workers": self.num_workers,
                "sweep": {str(k): v for k, v in sorted(self.sweep.items())},
                "sweep_rounds": self.sweep_rounds,
                "stages": self.stages, "costs": dict(self.costs), "advice": advice,
                "rank": self.rank,
                "world": self.world, "ranks": self.ranks, "straggler": self.straggler,
                "ranks_verdict": self.ranks_verdict, "advice_rank": self.advice_rank}

    def __str__(self):
        d = self.to_dict()
        verdict = "DATA-BOUND" if d["data_bound"] else "not data-bound"
        who = f" (rank {self.rank} of {self.world})" if self.world > 1 else ""
        lines = [f"stoker.profile{who}: {verdict}: waiting for data {100 * d['wait_share']:.1f}% of "
                 f"the time ({d['steps']} steps, {d['loader']}"
                 + (f", num_workers={d['num_workers']}" if d["num_workers"] is not None else "")
                 + ")",
                 f"  step {d['step_ms']:.2f} ms, wait {d['wait_ms']:.2f} ms per batch"
                 + (f", {d['samples_per_s']:.0f} samples/s" if d["samples_per_s"] else "")
                 + (f"; first batch {d['first_wait_ms']:.1f} ms" if d["first_wait_ms"] else "")]
        if self.sweep:
            lines.append("  the loader alone: " + ", ".join(
                f"num_workers={k}: {v:.0f} samples/s" for k, v in sorted(self.sweep.items())))
        if self.stages:
            lines.append("  worker time: " + ", ".join(
                f"{k} {100 * v:.0f}%" for k, v in self.stages.items()))
        python = _python_summary(d["costs"], d["num_workers"])
        if python:
            lines.append("  " + python)
        if self.ranks is not None:
            lines.append(f"  across {self.world} ranks (this is rank {self.rank}):")
            lines.append(f"    {'rank':>4} {'host':<16} {'waiting':>8} {'wait ms':>8} "
                         f"{'step ms':>8} {'samples/s':>10} {'in collectives ms':>18}")
            for i, r in enumerate(self.ranks):
                if r is None:
                    lines.append(f"    {i:>4} (no report)")
                    continue
                sps = f"{r['samples_per_s']:.0f}" if r["samples_per_s"] else "?"
                coll = f"{r['collective_ms']:.2f}" + (
                    " (est.)" if r["collective_source"] == "estimate" else "")
                lines.append(f"    {r['rank']:>4} {r['host'][:16]:<16} "
                             f"{100 * r['wait_share']:>7.1f}% {r['wait_ms']:>8.2f} "
                             f"{r['step_ms']:>8.2f} {sps:>10} {coll:>18}")
            lines.append(f"  verdict: {self.ranks_verdict}")
            if d["advice"]:
                lines.append(f"  advice, measured on rank {self.advice_rank}:")
        lines += [f"  - {a}" for a in d["advice"]]
        return "\n".join(lines)

    def __repr__(self):
        return (f"<stoker.Profile {self.steps} steps, wait_share={self.wait_share:.3f}, "
                f"data_bound={self.data_bound}>")


def profile(iterable, step=None, steps=None, warmup=2, sync=None, advise=True, trace=None):
    """Measure whether a training loop waits on `iterable` (a DataLoader, stoker.Loader, ...).

    With `step` (a callable taking a batch): run it for `steps` steps (default: one pass) and
    return the finished Profile. Without: return a Profile to iterate in place of the loader
    (``for batch in prof: ...``, also as a context manager); it stops after `steps` steps when
    given. `warmup` steps are measured but left out of the figures. `sync`: call
    torch.cuda.synchronize() before each step's clock stops (None = when CUDA is initialised).
    `advise`: on a data-bound verdict, re-create the loader alone at several worker counts to
    find what fixes it (a few seconds; False skips it). `trace`: write a Perfetto trace of the
    loop (waits, steps, collectives) here; across ranks one file with a track per rank, written
    by rank 0. Under torch.distributed or torchrun every rank must call it alike: the ranks
    exchange their figures when the loop ends (see the module's doc and `Profile`).
    """
    prof = Profile(iterable, steps=steps, warmup=warmup, sync=sync, advise=advise, trace=trace)
    if step is not None:
        if not callable(step):
            raise TypeError(f"step should be a callable taking a batch, not "
                            f"{type(step).__name__}")
        prof.run(step)
    return prof

"""Which executor runs a Python dataset's __getitem__, and with how many workers: a pure
decision fed the measurements of the first samples (python/tests/test_executor_choice.py feeds
it synthetic ones; nothing here reads a clock).

Threads (stoker's C worker threads calling into Python) cost nothing to start, share the
dataset and copy a sample once into the ring, but run Python bytecode one thread at a time:
they scale with the part of __getitem__ that releases the GIL (sleeps, I/O, numpy/torch/PIL
kernels). Worker processes run bytecode in parallel, at the price of a start-up (a fork), a
per-sample hand-off (a ticket and a reply over a socket) and memory. The estimate compares the
samples per second each would deliver:

  threads:    min(n_t / (t + copy + G + R),  1 / (g*t + G + R),  cores / (c*t + copy + G))
  processes:  min(n_p / (t + copy + P + R),  cores / (c*t + copy + P))
  here:       1 / (t + copy + H)

t is __getitem__'s time, g the share of it that threads run one at a time (the GIL-held
share, or what two threads run at once showed when that is more: a lock other than the GIL,
such as h5py's, serializes threads the GIL meter sees as free), c the share that uses a CPU,
copy the sample's bytes over the copy bandwidth, G the GIL-held bookkeeping per sample on a
thread and P a worker process's per-sample hand-off, R a worker's round trip a sample where a
ring batch holds one (batch_size=None: each call waits for its hand-off to the consumer; 0
otherwise), and H the training thread's own cost of a sample when it loads every batch itself
("here": no worker, as the DataLoader at num_workers=0, which is what num_workers=0 gives).
Processes are chosen when they deliver PROCESS_MARGIN times
more than the better of the other two (their start-up and memory have to pay for themselves);
left to stoker (num_workers not given), the training thread loads when it delivers more than the
threads: a __getitem__ so short and so GIL-bound that a worker thread's hand-off costs more than
running it beside the training thread could gain (it cannot run beside it anyway while it holds
the GIL). Processes are also chosen when
__getitem__ draws from the global random generators and per-sample seeding is on: seeding those
generators is exact only in a process of its own (threads share them with each other and with
the training loop).
"""
import math

THREAD_GIL_S = 3e-6     # GIL-held bookkeeping per sample on a thread, hand-offs included: a
# 20-float TensorDataset subclass (1.4 us of __getitem__) runs at 4.0 us a sample on two threads
# with the worker threads calling __getitem__ from C (issue 24, fourteenth round; 15 us when the
# thread ran stoker's Python runner per sample)
PROCESS_S = 8e-6        # a worker process's cost per sample beside __getitem__ (ticket, seeding,
# the write into the ring, the reply, the loader thread's share): 7.5-8.6 us measured for
# __getitem__ of 1.4-35 us with the worker's ticket loop in C (fourteenth round; 40 us before the
# twelfth, when the loop ran in Python). A CIFAR-sized sample costs up to 8 us more in cache
# lines, where processes win by far anyway.
TRIP_S = 60e-6          # a worker's round trip for a ring batch of one sample, on either
# executor: with batch_size=None each call (each list of the batch-fetch idiom) is a ring batch
# of its own, handed from the worker to the consumer alone (a larger batch's tickets go ahead:
# _procpool.c), so every call waits for the hand-off: a process's reply, a thread's GIL back
# from the consumer. Measured at 2 workers (issue 24, sixteenth round): processes 63-83 us a
# call beside a 2 us __getitem__; threads ~80 us beside a 21.6 us one.
HERE_S = 1.2e-6         # the training thread's cost per sample beside __getitem__ when it loads
# every batch itself: the ticket, the plan's write into the ring, its share of the batch's
# assembly (issue 24, fifteenth round: a 20-float TensorDataset subclass, 1.7 us of __getitem__,
# at 2.9 us a sample)
COPY_BYTES_S = 4e9      # memcpy into the ring, bytes per second per core
PROCESS_MARGIN = 1.2
MAX_SERIAL = 4.0        # pair_serial's cap (4: two threads deliver a quarter of one's rate)
PAIR_NOISE = 1.25       # two threads' time per sample over one's, below which no lock is read
MAX_THREADS = 64        # threads for work that mostly waits
THREAD_HANDOFF_S = 37e-6  # the GIL's hand-offs per sample on a thread, for the thread count:
# its take, its take back after a sleep or read, and after each torch tensor freed (torch 1.13
# lets the GIL go in a tensor's dealloc); beyond what the GIL serves, threads only queue and the
# hand-offs cost more. Fitted with THREAD_GIL_S as 40 us together (issue 24, pysleep: sleep
# scenario, 48-64 threads 10-24k samples/s, 24-32 threads 21-28k), so the sum stays 40 us.


class Probe:
    """What the first samples showed: seconds per __getitem__, GIL-held share (0..1, None when
    not measured), CPU share (thread CPU time / wall time), bytes of the fixed leaves of one
    sample, whether the global random generators were drawn from, samples measured, and the
    share of a sample that two threads run one at a time, as two threads at once showed it
    (pair_serial: 0..MAX_SERIAL, above 1 when they were slower than one; None when not
    measured; the GIL's part and any other lock's, such as h5py's)."""

    def __init__(self, per_sample_s, gil_share, cpu_share, sample_bytes, uses_rng=False,
                 samples=1, pair_serial=None, object_s=0.0):
        self.per_sample_s = float(per_sample_s)
        # seconds to pickle a sample's object leaves and take them back (a worker process
        # pickles them, the training thread unpickles them all: one sample's at a time)
        self.object_s = float(object_s)
        self.gil_share = gil_share
        self.cpu_share = float(cpu_share)
        self.sample_bytes = int(sample_bytes)
        self.uses_rng = bool(uses_rng)
        # the generators it drew from (names, _pyworker.rng_changed; "setter": it set a state)
        self.drew_from = frozenset(uses_rng) if isinstance(uses_rng, (set, frozenset)) else \
            frozenset(("random", "numpy", "torch")) if uses_rng else frozenset()
        self.samples = int(samples)
        self.pair_serial = pair_serial

    def __repr__(self):
        g = "?" if self.gil_share is None else f"{self.gil_share:.2f}"
        s = "?" if self.pair_serial is None else f"{self.pair_serial:.2f}"
        return (f"Probe({self.per_sample_s * 1e3:.3f} ms, gil {g}, cpu {self.cpu_share:.2f}, "
                f"{self.sample_bytes} B, rng {self.uses_rng}, n {self.samples}, pair {s})")


METERED, SOLO, PAIR = 0, 1, 2  # a row's kind (_pyworker.probe_samples; a 5-value row: METERED)


def _kind(r):
    return r[5] if len(r) > 5 else METERED


def idle_ns(r):
    """A probe row's time on an idle machine: its wall time less the run-queue wait the load
    added, never below its CPU time (probe_of's rows)."""
    return max(r[1], r[0] - r[4])


def probe_of(rows, sample_bytes, uses_rng=False):
    """The Probe the measured calls make (a pure function: tests feed it synthetic rows). Each
    row is one __getitem__: (wall_ns, cpu_ns, held_cpu_ns, free_cpu_ns, runq_ns[, kind]): its wall
    time, its thread's CPU time, that CPU time split by the GIL meter into GIL-held and GIL-free
    (_ext/_pyexec.c), and the wall time the machine's load added (its thread's wait on the run
    queue: Linux schedstat; 0 where unknown). kind (_pyworker.probe_samples): METERED (the GIL
    meter ran), SOLO (the same samples again without it) or PAIR (one of two threads that ran
    samples at once: its times per sample over them, its wall time from the earlier thread's
    start).

    Every figure is made load-independent: the time a call takes on an idle machine is its wall
    time less the load's part (never below its CPU time); the CPU share is CPU time over
    that; the GIL-held share is the held part of the classified CPU time, scaled to the CPU
    time, over that. A busy machine stretches wall time (the thread preempted, holding the GIL
    or not) but neither CPU time nor the split, so the verdict does not move with the load.
    The first call, which often pays a warm-up, is left out when there are others, and of the
    rest the faster half (by idle-machine time) is used. The time and CPU share come from the
    SOLO rows when there are any (the meter slows a call that takes and drops the GIL often,
    h5py's twice), the GIL split from the METERED ones. pair_serial, from two PAIR rows: x, the
    idle-machine time per sample until the later thread finished over the solo time t, is 1
    when the threads ran at once and 2 when one at a time (more: contention made them slower
    than one); the share g of a sample that the model's threads run one at a time then gives
    two threads x's rate (min(2 / t, 1 / (g t)) = 2 / (x t): g = x / 2) where x >= 2; below 2, g
    falls linearly to 0 at x = PAIR_NOISE (where the threads ran at once the rate does not say
    g, and the noise of x, a sleep's jitter, must not read as a lock); at most MAX_SERIAL."""
    rows = list(rows)
    metered = [r for r in rows if _kind(r) == METERED]
    solo = [r for r in rows if _kind(r) == SOLO]
    pair = [r for r in rows if _kind(r) == PAIR]

    def faster_half(rs):
        return sorted(rs, key=idle_ns)[:max(1, (len(rs) + 1) // 2)]

    used = faster_half(metered[1:] if len(metered) > 1 else metered)
    timed = faster_half(solo) if solo else used
    t = sum(idle_ns(r) for r in timed)
    cpu = sum(r[1] for r in timed)
    cpu_share = min(1.0, cpu / t) if t > 0 else 1.0
    held, free = sum(r[2] for r in used), sum(r[3] for r in used)
    gil = None
    if held + free > 0:
        gil = min(1.0, held / (held + free) * cpu_share)
    serial = None
    if len(pair) == 2 and t > 0:
        x = max(idle_ns(r) for r in pair) * len(timed) / t  # 1: at once; 2: one at a time
        serial = min(MAX_SERIAL, max(0.0, (x - PAIR_NOISE) / (2 - PAIR_NOISE) if x <= 2
                                     else x / 2))
    return Probe(t / len(timed) / 1e9, gil, cpu_share, sample_bytes, uses_rng, len(used),
                 serial)


class Choice:
    """An executor, its worker count and why. ("thread", 0): no worker, the training thread
    loads each batch when next() asks for it (_pyhelp.Helper(inline=True))."""

    def __init__(self, executor, workers, reason, thread_rate=None, process_rate=None):
        self.executor, self.workers, self.reason = executor, workers, reason
        self.thread_rate, self.process_rate = thread_rate, process_rate

    def __repr__(self):
        return f"Choice({self.executor!r}, {self.workers}, {self.reason!r})"


def _gil(p):
    return 1.0 if p.gil_share is None else min(max(p.gil_share, 0.0), 1.0)


def _serial(p):
    """The share of a sample that threads run one at a time: the GIL-held share, or more when
    two threads at once showed more (a lock other than the GIL: h5py's; above 1 when the two
    delivered less than one)."""
    pair = getattr(p, "pair_serial", None)
    return _gil(p) if pair is None else max(_gil(p), min(max(pair, 0.0), MAX_SERIAL))


def thread_workers(p, num_workers, cores):
    """Threads for the thread executor: num_workers as given (0: one); left to stoker (None),
    one per core, and more when __getitem__ mostly waits (its GIL and CPU shares both under a
    half): enough to keep the cores busy (cores / the larger share), no more than the GIL lets
    run at once (t / (s*t + G + H), s the share run one thread at a time (_serial), H the GIL's
    hand-offs: beyond that threads only queue for the GIL or the lock), at most MAX_THREADS."""
    if num_workers is not None:
        return max(1, num_workers)
    busy = max(_serial(p), min(max(p.cpu_share, 0.0), 1.0))
    n = cores
    if busy < 0.5:
        t = max(p.per_sample_s, 1e-7)
        g_s = THREAD_GIL_S + THREAD_HANDOFF_S
        gil_bound = (t + g_s) / (_serial(p) * t + g_s)
        n = max(n, min(MAX_THREADS, math.ceil(cores / max(busy, 1.0 / MAX_THREADS)),
                       math.ceil(1.5 * gil_bound - 1e-9)))  # (float fuzz of G + H)
    return n


def rates(p, n_threads, n_procs, cores, ring_batch=64):
    """(thread samples/s, process samples/s) the model above estimates; ring_batch, the
    samples of a ring batch (1 with batch_size=None: a worker's round trip a sample)."""
    t = max(p.per_sample_s, 1e-7)
    copy = p.sample_bytes / COPY_BYTES_S
    g, c = _serial(p), min(max(p.cpu_share, 0.0), 1.0)
    trip = TRIP_S if ring_batch <= 1 else 0.0  # (a larger batch's tickets go ahead)
    thread = min(n_threads / (t + copy + THREAD_GIL_S + trip),
                 1.0 / (g * t + THREAD_GIL_S + trip), cores / (c * t + copy + THREAD_GIL_S))
    obj = p.object_s
    proc = min(n_procs / (t + copy + PROCESS_S + trip + obj),
               cores / (c * t + copy + PROCESS_S + obj), 1.0 / obj if obj > 0 else math.inf)
    return thread, proc


def here_rate(p):
    """Samples/s the training thread delivers loading each batch itself (the model above)."""
    return 1.0 / (max(p.per_sample_s, 1e-7) + p.sample_bytes / COPY_BYTES_S + HERE_S)


def probe_plan(requested="auto", num_workers=None, *, reseed=True, unsafe=None, files=None):
    """What of the probe the choice below reads (a pure function of the arguments, mirroring
    choose()): (samples, gil, settled_by_rng).

    samples: "one" when nothing measured can change the choice or the worker count
    (executor="process"; "thread" or a fork-unsafe dataset with num_workers given; "auto"
    without per-sample seeding at num_workers 0 or 1), so the first sample, which fixes the
    layout, is all the constructor loads before the workers start; else "all" (up to
    PROBE_SAMPLES, within the probe's time budget). gil: whether the choice reads the GIL-held
    share and the time (else only whether __getitem__ drew random numbers), so whether the GIL
    meter runs: not at num_workers 0 (one thread) nor 1 (one thread against one process: the
    thread never delivers less, its per-sample cost THREAD_GIL_S being below PROCESS_S).
    settled_by_rng: a sample that drew from the global random generators settles it
    (processes, with reseed on), so the probe stops there instead of measuring more samples
    the worker processes would load again."""
    if requested == "process":
        return "one", False, True
    if requested == "thread" or unsafe:  # threads whatever the samples do; the count may read
        return ("one", False, False) if num_workers is not None else ("all", True, False)
    if files and _shares_files(num_workers):  # processes whatever the samples do
        return "one", False, False
    one_worker = num_workers == 0 or (num_workers == 1 and THREAD_GIL_S <= PROCESS_S)
    if one_worker:
        return ("all", False, True) if reseed else ("one", False, False)
    return "all", True, bool(reseed)


def _shares_files(num_workers):
    """Whether the thread executor at this num_workers runs __getitem__ on more than one thread
    at once (num_workers 0 and 1: one thread, and the training thread does not help it)."""
    return num_workers is None or num_workers >= 2


def choose(p, requested="auto", num_workers=None, cores=1, *, reseed=True, unsafe=None,
           iterable=False, files=None, ring_batch=64, writes=None, timeout=0):
    """The executor ("thread" or "process"), its worker count and one sentence saying why.

    p: a Probe (None for an IterableDataset, which is not probed); requested: "auto", "thread"
    or "process"; num_workers: the DataLoader's (None: stoker picks); unsafe: what the dataset
    holds that cannot cross a fork (an open lmdb.Environment...), or None; files: the open
    read-only file it holds ("dataset.f (/data/train.bin)"), or None; ring_batch: the samples
    of a ring batch (rates()); writes: an attribute __getitem__ assigned ("Dataset.f"), or
    None; timeout: the loader's timeout= (seconds, 0: none)."""
    cores = max(1, int(cores))
    n_procs = max(1, cores if num_workers is None else num_workers)
    if requested == "thread":
        n = 1 if p is None and not num_workers else (
            thread_workers(p, num_workers, cores) if p is not None else num_workers)
        return Choice("thread", n, "executor='thread' was asked for")
    if requested == "process":
        return Choice("process", n_procs, "executor='process' was asked for")
    if iterable:
        return Choice("process", n_procs,
                      "an IterableDataset: each worker process iterates its own replica, as "
                      "with the DataLoader")
    if num_workers == 0 and (unsafe or not (reseed and p.uses_rng)):  # (else one process)
        return Choice("thread", 0, "num_workers=0: the training thread loads each batch when "
                                   "next() asks for it, as the DataLoader does (no worker)")
    if unsafe:
        return Choice("thread", thread_workers(p, num_workers, cores),
                      f"the dataset holds {unsafe}, which cannot be used across fork(); threads "
                      f"share it (open it lazily in __getitem__ to allow worker processes)")
    if files and _shares_files(num_workers):
        return Choice("process", n_procs,
                      f"the dataset holds an open file, {files}: worker threads would share its "
                      f"position (a seek and a read from two threads at once read another "
                      f"sample's bytes); each worker process reads through a position of its own")
    if timeout and num_workers != 0:
        return Choice("process", n_procs,
                      f"timeout={timeout:g} was given: a __getitem__ that never returns is "
                      f"stopped with its worker process, which a thread cannot be")
    if writes and _shares_files(num_workers):
        return Choice("process", n_procs,
                      f"__getitem__ assigns {writes}: worker threads would share that attribute "
                      f"(a value one thread set, read by another thread's sample; a file opened "
                      f"lazily, read at another's position); each worker process has a copy of "
                      f"its own")
    if reseed and p.uses_rng:  # (num_workers=0 too: its samples equal those of any count)
        return Choice("process", n_procs,
                      "__getitem__ draws from the global random generators: per-sample seeding "
                      "is exact only in worker processes (threads share those generators with "
                      "each other and with the training loop)")
    n_threads = thread_workers(p, num_workers, cores)
    thread, proc = rates(p, n_threads, n_procs, cores, ring_batch)
    here = here_rate(p) if num_workers is None else 0.0
    g = "an unmeasured share" if p.gil_share is None else f"{_gil(p):.0%}"
    what = (f"__getitem__ held the GIL {g} of its {p.per_sample_s * 1e3:.3g} ms "
            f"({p.samples} sample{'s' if p.samples != 1 else ''} measured)")
    if _serial(p) > _gil(p):
        what += (f", and two threads at once ran as if {_serial(p):.0%} of it held a lock "
                 f"(one other than the GIL, h5py's say, or contention between them)")
    if proc > PROCESS_MARGIN * max(thread, here):
        return Choice("process", n_procs,
                      f"{what}: {n_procs} worker process{'es' if n_procs != 1 else ''} deliver "
                      f"an estimated {proc:.0f} samples/s, {n_threads} "
                      f"thread{'s' if n_threads != 1 else ''} {thread:.0f}",
                      thread, proc)
    if here > thread:
        return Choice("thread", 0,
                      f"{what}: the training thread loading each batch itself delivers an "
                      f"estimated {here:.0f} samples/s, {n_threads} worker "
                      f"thread{'s' if n_threads != 1 else ''} {thread:.0f}, {n_procs} worker "
                      f"process{'es' if n_procs != 1 else ''} {proc:.0f} (num_workers=1 or more "
                      f"loads beside the training step instead)", thread, proc)
    return Choice("thread", n_threads,
                  f"{what}: {n_threads} thread{'s' if n_threads != 1 else ''} deliver an "
                  f"estimated {thread:.0f} samples/s, {n_procs} worker "
                  f"process{'es' if n_procs != 1 else ''} {proc:.0f}", thread, proc)


def threads_instead(p, num_workers, cores, why):
    """The thread executor where "auto" chose processes that cannot start: the dataset does
    not pickle (`why`) and the fork server, started before it existed, needs it pickled."""
    return Choice("thread", thread_workers(p, num_workers, cores),
                  f"worker processes would suit it better, but {why}")

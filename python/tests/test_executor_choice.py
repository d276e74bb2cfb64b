"""The executor decision for Python datasets (stoker._executor.choose): a pure function fed
synthetic measurements of the first samples; nothing here times anything."""
import pytest

from stoker import _executor as ex
from stoker._executor import Probe, choose


def test_waiting_work_goes_to_many_threads():
    # a __getitem__ that sleeps 1 ms: little GIL, little CPU
    p = Probe(1e-3, gil_share=0.02, cpu_share=0.03, sample_bytes=12 * 1024)
    c = choose(p, "auto", None, cores=2)
    assert c.executor == "thread"
    # past the cores (the threads only wait), up to what the GIL lets run at once
    assert c.workers == 26  # ceil(1.5 * (1 ms + G + H) / (0.02 * 1 ms + G + H)), H the hand-offs
    assert c.thread_rate > 10 * c.process_rate
    assert "held the GIL 2%" in c.reason and "threads deliver" in c.reason
    # num_workers given: exactly that
    assert choose(p, "auto", 4, cores=2).workers == 4
    # a trivial __getitem__ that measures as "waiting" gets no crowd of threads
    tiny = Probe(5e-6, gil_share=0.0, cpu_share=0.1, sample_bytes=8)
    assert choose(tiny, "auto", None, cores=2).workers == 2


def test_pure_python_work_goes_to_processes():
    p = Probe(2e-3, gil_share=1.0, cpu_share=1.0, sample_bytes=4096)
    c = choose(p, "auto", None, cores=2)
    assert c.executor == "process" and c.workers == 2
    assert c.process_rate > ex.PROCESS_MARGIN * c.thread_rate
    assert "held the GIL 100%" in c.reason and "worker processes deliver" in c.reason
    assert choose(p, "auto", 8, cores=16).workers == 8


@pytest.mark.parametrize("t,want,want_default", [
    (1.4e-6, "thread", "here"), (2.5e-6, "thread", "here"),  # a 20-float TensorDataset subclass
    (4.8e-6, "process", "here"),  # pure-Python loops
    (10.5e-6, "process", "process"), (35e-6, "process", "process"),
])
def test_short_pure_python_work(t, want, want_default):
    """Where a GIL-bound __getitem__ is so short that the hand-off decides: measured on 2
    cores (issue 24, fourteenth round), 1.4 us ran at 250k samples/s on 2 threads against 200k
    on 2 worker processes, 4.8 us at 107k against 158k, 10.5 us 60k against 108k, 35 us 24k
    against 47k ("auto" chose processes at 1.4 us when a thread's bookkeeping was taken as 15
    us). With num_workers left to stoker the training thread itself is a candidate (fifteenth
    round, bench/bench_executors.py): 1.7 us at 255-290k, 5.2 us at 157-162k against 126k on
    2 worker processes, 10.6 us at 82k against 86-95k."""
    p = Probe(t, gil_share=1.0, cpu_share=1.0, sample_bytes=84)
    assert choose(p, "auto", 2, cores=2).executor == want
    c = choose(p, "auto", None, cores=2)
    assert (c.executor, c.workers) == (("thread", 0) if want_default == "here" else
                                       (want_default, 2))
    if want_default == "here":
        assert "the training thread loading each batch itself" in c.reason


def test_the_training_thread_only_where_no_worker_gains():
    """Left to stoker, the training thread loads each batch only where neither worker threads
    (a GIL-bound __getitem__ runs one thread at a time) nor worker processes (their hand-off)
    would deliver more; a short sample that lets the GIL go still gets threads."""
    free = Probe(3e-6, gil_share=0.1, cpu_share=1.0, sample_bytes=84)
    assert choose(free, "auto", None, cores=2).workers == 2
    held = Probe(3e-6, gil_share=1.0, cpu_share=1.0, sample_bytes=84)
    assert ex.here_rate(held) > max(ex.rates(held, 2, 2, 2))
    assert choose(held, "auto", None, cores=2).workers == 0
    # never with num_workers given (1 or more: workers load beside the training step)
    for n in (1, 2, 4):
        assert choose(held, "auto", n, cores=2).workers == n


def test_the_batch_fetch_idiom_weighs_the_workers_round_trip():
    """batch_size=None with a sampler of index lists: each call is a ring batch of its own, so a
    worker waits for each hand-off to the consumer (63-83 us a call measured on 2 processes,
    ~80 us on 2 threads, issue 24, sixteenth round). 20-float rows at 64 a call (20-70 us of
    indexing, half or more of it GIL-held, 5.4 KB): the training thread delivered 0.77x the
    DataLoader, 2 worker processes 0.37x, 2 threads 0.41x, and "auto" had picked the workers.
    A call of ~1 ms of Python still goes to processes; a larger ring batch's tickets go ahead,
    with no trip a sample."""
    for t in (50e-6, 70e-6):  # (two threads at once ran as if 133% of it held a lock)
        p = Probe(t, gil_share=0.86, cpu_share=1.0, sample_bytes=64 * 84, pair_serial=1.33)
        assert choose(p, "auto", None, cores=2).executor == "process"  # (as if batched)
        c = choose(p, "auto", None, cores=2, ring_batch=1)
        assert (c.executor, c.workers) == ("thread", 0), c.reason
    half = Probe(21.6e-6, gil_share=0.54, cpu_share=1.0, sample_bytes=64 * 84)
    assert choose(half, "auto", None, cores=2).workers == 2  # (threads, as if batched)
    assert choose(half, "auto", None, cores=2, ring_batch=1).workers == 0
    slow = Probe(1e-3, gil_share=1.0, cpu_share=1.0, sample_bytes=64 * 84)
    assert choose(slow, "auto", None, cores=2, ring_batch=1).executor == "process"
    assert ex.rates(slow, 2, 2, 2, ring_batch=64)[1] > ex.rates(slow, 2, 2, 2, ring_batch=1)[1]


def test_big_copies_from_memory_stay_on_threads():
    # returning a 3x224x224 float32 tensor from memory: all Python, but the time is the copy,
    # which threads make outside the GIL
    p = Probe(10e-6, gil_share=0.95, cpu_share=1.0, sample_bytes=3 * 224 * 224 * 4)
    c = choose(p, "auto", None, cores=2)
    assert c.executor == "thread"


def test_gil_releasing_cpu_work_stays_on_threads_at_the_core_count():
    # numpy kernels: CPU-bound, GIL mostly released
    p = Probe(5e-3, gil_share=0.1, cpu_share=1.0, sample_bytes=1 << 20)
    c = choose(p, "auto", None, cores=4)
    assert c.executor == "thread" and c.workers == 4


def test_margin_decides_near_ties():
    # processes a little faster than threads are not worth their start-up and memory
    p = Probe(1e-3, gil_share=0.55, cpu_share=1.0, sample_bytes=0)
    t, pr = ex.rates(p, 2, 2, 2)
    assert pr > t and pr < ex.PROCESS_MARGIN * t
    assert choose(p, "auto", 2, cores=2).executor == "thread"


def test_random_generators_need_processes_for_exact_seeding():
    p = Probe(1e-3, gil_share=0.02, cpu_share=0.03, sample_bytes=100, uses_rng=True)
    c = choose(p, "auto", None, cores=2)
    assert c.executor == "process" and "random generators" in c.reason
    # without per-sample seeding, the rates decide
    assert choose(p, "auto", None, cores=2, reseed=False).executor == "thread"


def test_an_attribute_assigned_in_getitem_needs_processes():
    # threads would share it; one thread (num_workers 0 or 1) or threads asked for: threads
    p = Probe(1e-3, gil_share=0.02, cpu_share=0.03, sample_bytes=64)
    assert choose(p, "auto", None, cores=2).executor == "thread"
    c = choose(p, "auto", None, cores=2, writes="Ds.cur")
    assert c.executor == "process" and "__getitem__ assigns Ds.cur" in c.reason
    assert choose(p, "auto", 4, cores=2, writes="Ds.cur").executor == "process"
    assert choose(p, "auto", 1, cores=2, writes="Ds.cur").executor == "thread"
    assert choose(p, "thread", 4, cores=2, writes="Ds.cur").executor == "thread"
    assert choose(p, "auto", None, cores=2, writes="Ds.cur", unsafe="an lmdb.Environment"
                  ).executor == "thread"


def test_object_leaves_weigh_on_processes():
    # a worker process pickles a sample's object leaves and the training thread unpickles them
    # all: a dict of 20 small tensors (5 past the ring's 15 fields, ~70 us each) was sent to
    # processes on its GIL share and ran at 0.31x the DataLoader there (0.84x in the training
    # thread)
    p = Probe(74e-6, gil_share=0.6, cpu_share=1.0, sample_bytes=480, pair_serial=1.75)
    assert choose(p, "auto", None, cores=2).executor == "process"
    p.object_s = 5 * 70e-6
    c = choose(p, "auto", None, cores=2)
    assert c.executor == "thread" and c.process_rate <= 1 / p.object_s


def test_a_timeout_needs_processes():
    # a __getitem__ that never returns is stopped with its process; a thread cannot be
    p = Probe(1e-3, gil_share=0.02, cpu_share=0.03, sample_bytes=64)
    c = choose(p, "auto", 2, cores=2, timeout=5)
    assert c.executor == "process" and "timeout=5 was given" in c.reason
    assert choose(p, "auto", 0, cores=2, timeout=5).executor == "thread"  # (no worker)
    assert choose(p, "thread", 2, cores=2, timeout=5).executor == "thread"


def test_fork_unsafe_handles_keep_threads():
    p = Probe(2e-3, gil_share=1.0, cpu_share=1.0, sample_bytes=100)
    c = choose(p, "auto", None, cores=2, unsafe="an open lmdb.Environment (dataset.env)")
    assert c.executor == "thread"
    assert "lmdb.Environment" in c.reason and "lazily" in c.reason


def test_requests_and_num_workers_zero():
    p = Probe(2e-3, gil_share=1.0, cpu_share=1.0, sample_bytes=100)
    assert choose(p, "thread", None, cores=2).executor == "thread"
    assert choose(p, "thread", 0, cores=2).workers == 1
    c = choose(p, "process", 3, cores=2)
    assert (c.executor, c.workers) == ("process", 3)
    c = choose(p, "auto", 0, cores=2)  # the training thread, as the DataLoader's main process
    assert (c.executor, c.workers) == ("thread", 0) and "num_workers=0" in c.reason
    assert "training thread" in c.reason
    # drawing random numbers, num_workers=0 too gets a process: its samples then equal those of
    # any other worker count (per-sample seeding)
    r = Probe(2e-3, gil_share=1.0, cpu_share=1.0, sample_bytes=100, uses_rng=True)
    c = choose(r, "auto", 0, cores=2)
    assert (c.executor, c.workers) == ("process", 1) and "random generators" in c.reason
    assert choose(r, "auto", 0, cores=2, reseed=False).workers == 0
    # a fork-unsafe handle or an open file: the training thread too (no fork, one caller)
    assert choose(p, "auto", 0, cores=2, unsafe="an open lmdb.Environment").workers == 0
    assert choose(p, "auto", 0, cores=2, files="dataset.f (/x.bin)").workers == 0
    assert choose(None, "auto", 2, cores=2, iterable=True).executor == "process"


@pytest.mark.parametrize("t,gil,cpu,n,cores,want", [
    (10e-3, 0.0, 0.01, None, 2, ex.MAX_THREADS),  # waits 10 ms a sample: as many as allowed
    (1e-3, 0.25, 0.1, None, 2, 6),     # busy 25%: cores / 0.25 = 8, the GIL allows ~5.9
    (1.06e-3, 0.02, 0.03, None, 2, 27),  # sleeps 1 ms: the GIL's hand-offs allow ~18 (x1.5)
    (1e-3, 0.9, 1.0, None, 4, 4),      # busy: one per core
    (1e-3, 0.02, 0.03, 6, 4, 6),       # as asked
    (1e-3, 0.02, 0.03, 0, 2, 1),       # num_workers=0: one
])
def test_thread_counts(t, gil, cpu, n, cores, want):
    assert ex.thread_workers(Probe(t, gil, cpu, 0), n, cores) == want


def test_unmeasured_gil_counts_as_held():
    p = Probe(2e-3, gil_share=None, cpu_share=1.0, sample_bytes=0)
    c = choose(p, "auto", None, cores=2)
    assert c.executor == "process" and "an unmeasured share" in c.reason


# ---- the measurement: load-independent figures from the probe's rows (issue 24) ----

MS = 1_000_000


def rows(wall_ms, cpu_ms, held_ms, free_ms, load_ms, n=5):
    """n identical calls: (wall, cpu, GIL-held cpu, GIL-free cpu, load's part), in ns."""
    return [tuple(int(v * MS) for v in (wall_ms, cpu_ms, held_ms, free_ms, load_ms))] * n


# (name, idle rows, rows of the same work on a machine at load ~18 on 2 cores: each call's
# thread waits on the run queue most of its wall time; CPU time and its split do not move)
WORK = [
    ("pure Python", rows(1.0, 1.0, 1.0, 0.0, 0.0), rows(10.0, 1.0, 0.98, 0.02, 9.0)),
    ("sleep 2 ms", rows(2.1, 0.05, 0.01, 0.04, 0.0), rows(4.5, 0.05, 0.01, 0.04, 2.4)),
    ("numpy kernel", rows(5.0, 5.0, 0.3, 4.7, 0.0), rows(40.0, 5.0, 0.3, 4.7, 35.0)),
]


@pytest.mark.parametrize("name,idle,loaded", WORK, ids=[w[0] for w in WORK])
def test_the_load_does_not_move_the_verdict(name, idle, loaded):
    a, b = ex.probe_of(idle, 4096), ex.probe_of(loaded, 4096)
    assert a.per_sample_s == pytest.approx(b.per_sample_s, rel=0.1)
    assert a.cpu_share == pytest.approx(b.cpu_share, abs=0.05)
    assert a.gil_share == pytest.approx(b.gil_share, abs=0.05)
    ca, cb = choose(a, "auto", None, cores=2), choose(b, "auto", None, cores=2)
    assert (ca.executor, ca.workers) == (cb.executor, cb.workers)
    want = {"pure Python": "process", "sleep 2 ms": "thread", "numpy kernel": "thread"}[name]
    assert cb.executor == want
    if name == "sleep 2 ms":
        assert cb.workers > 2  # past the cores: the threads only wait
    else:
        assert cb.workers == 2


def test_the_old_wall_time_reading_chose_threads_under_load():
    """What issue 24 saw: the loaded pure-Python call read through wall time alone (its CPU and
    GIL shares as fractions of 10 ms) looks like waiting work and gets a crowd of threads."""
    wall_read = Probe(10e-3, gil_share=0.1, cpu_share=0.1, sample_bytes=4096)
    c = choose(wall_read, "auto", None, cores=2)
    assert c.executor == "thread" and c.workers > 2
    fixed = ex.probe_of(WORK[0][2], 4096)
    assert choose(fixed, "auto", None, cores=2).executor == "process"


def test_probe_of_edge_cases():
    # the first call (warm-up) is left out, and of the rest the faster half by idle time
    r = rows(50.0, 50.0, 50.0, 0.0, 0.0, 1) + rows(1.0, 1.0, 1.0, 0.0, 0.0, 2) + \
        rows(3.0, 1.0, 1.0, 0.0, 0.0, 2)
    p = ex.probe_of(r, 0)
    assert p.per_sample_s == pytest.approx(1e-3) and p.samples == 2
    # one call only: it is used
    assert ex.probe_of(rows(2.0, 1.0, 1.0, 0.0, 0.0, 1), 0).samples == 1
    # nothing classified (a call too short for one meter cycle): the share is unmeasured
    p = ex.probe_of(rows(0.01, 0.01, 0.0, 0.0, 0.0, 3), 8)
    assert p.gil_share is None and choose(p, "auto", 2, cores=2).reason.count("unmeasured")
    # a load part larger than the wall time (counted past the call) never goes below the CPU
    p = ex.probe_of(rows(2.0, 1.5, 1.5, 0.0, 9.0, 3), 0)
    assert p.per_sample_s == pytest.approx(1.5e-3) and p.cpu_share == 1.0
    # held + free CPU scaled to the CPU time: a partial classification keeps its ratio
    p = ex.probe_of(rows(4.0, 4.0, 1.0, 1.0, 0.0, 3), 0)
    assert p.gil_share == pytest.approx(0.5)


# ---- how much of the probe the choice reads (issue 24, time to first batch) ----

# probes far apart: waiting, pure Python, big copies, GIL-releasing CPU work, unmeasured GIL
_SPREAD = [Probe(1e-3, 0.02, 0.03, 12 * 1024), Probe(2e-3, 1.0, 1.0, 4096),
           Probe(10e-6, 0.95, 1.0, 3 * 224 * 224 * 4), Probe(5e-3, 0.1, 1.0, 600 * 1024),
           Probe(1e-4, None, 0.5, 64)]


@pytest.mark.parametrize("requested", ["auto", "thread", "process"])
@pytest.mark.parametrize("workers", [None, 0, 1, 2, 8])
@pytest.mark.parametrize("reseed", [True, False])
@pytest.mark.parametrize("unsafe", [None, "an open h5py.File (dataset.f)"])
def test_probe_plan_says_what_the_choice_reads(requested, workers, reseed, unsafe):
    # probe_plan(...) = (samples, gil, settled_by_rng). samples "one": the choice and the worker
    # count are the same whatever the probe measured and whether it drew random numbers (one
    # sample, the layout's, is enough); gil False: the same whatever the time and GIL share
    # measured; settled_by_rng: the same whatever else was measured once a sample drew random
    # numbers (the probe stops there)
    samples, gil, by_rng = ex.probe_plan(requested, workers, reseed=reseed, unsafe=unsafe)
    assert samples in ("one", "all")

    def outcomes(uses_rng):
        out = set()
        for p in _SPREAD:
            p = Probe(p.per_sample_s, p.gil_share, p.cpu_share, p.sample_bytes, uses_rng, 3)
            c = choose(p, requested, workers, cores=2, reseed=reseed, unsafe=unsafe)
            out.add((c.executor, c.workers))
        return out

    if samples == "one":
        assert len(outcomes(False) | outcomes(True)) == 1
        assert not gil
    if not gil:
        assert len(outcomes(False)) == 1 and len(outcomes(True)) == 1
    if by_rng:
        assert len(outcomes(True)) == 1
    # and it claims no more than that: what it measures moves the choice
    if gil:
        assert len(outcomes(False)) > 1
    if samples == "all" and not gil:
        assert outcomes(False) != outcomes(True)  # (it reads whether they drew)


def test_probe_plan_cases():
    # processes asked for: the layout's sample only (the measurement changes nothing)
    assert ex.probe_plan("process", None) == ("one", False, True)
    # threads with a count: one sample; without: measured (the count reads it)
    assert ex.probe_plan("thread", 4) == ("one", False, False)
    assert ex.probe_plan("thread", None) == ("all", True, False)
    # auto: measured; a sample drawing random numbers settles it when seeding is on
    assert ex.probe_plan("auto", 2) == ("all", True, True)
    assert ex.probe_plan("auto", 2, reseed=False) == ("all", True, False)
    # one worker: only whether the samples draw random numbers is read
    assert ex.probe_plan("auto", 1) == ("all", False, True)
    assert ex.probe_plan("auto", 0, reseed=False) == ("one", False, False)
    # a fork-unsafe handle: threads whatever the sample does
    assert ex.probe_plan("auto", 2, unsafe="x") == ("one", False, False)
    assert ex.probe_plan("auto", None, unsafe="x") == ("all", True, False)


# ---- a lock other than the GIL: two threads at once (issue 24, h5py's "phil") ----

def kind(rs, k):
    return [r + (k,) for r in rs]


# h5py as the probe saw it (2026-11-28, 2 cores): the metered calls twice as slow as without
# the meter (0.2 ms, half of it GIL-held), 0.1 ms each alone, and two threads at once 0.25 ms a
# sample (h5py's global lock and its hand-offs): threads deliver less than one
H5_METERED = kind(rows(0.2, 0.2, 0.1, 0.1, 0.0, 5), ex.METERED)
H5_SOLO = kind(rows(0.1, 0.1, 0.0, 0.0, 0.0, 4), ex.SOLO)
H5_PAIR = kind(rows(0.12, 0.12, 0.0, 0.0, 0.0, 1) + rows(0.25, 0.12, 0.0, 0.0, 0.0, 1), ex.PAIR)


def test_a_lock_the_gil_meter_does_not_see_sends_h5py_to_processes():
    # without the unmetered phases: the meter's doubled time and half-free GIL: threads
    old = ex.probe_of(H5_METERED, 49168)
    assert old.per_sample_s == pytest.approx(2e-4) and old.pair_serial is None
    assert choose(old, "auto", None, cores=2).executor == "thread"
    # the time from the unmetered samples, the GIL split from the metered ones
    p = ex.probe_of(H5_METERED + H5_SOLO, 49168)
    assert p.per_sample_s == pytest.approx(1e-4) and p.gil_share == pytest.approx(0.5)
    # and the pair: x = 2.5 (slower than one at a time), g = x / 2
    p = ex.probe_of(H5_METERED + H5_SOLO + H5_PAIR, 49168)
    assert p.pair_serial == pytest.approx(1.25)
    c = choose(p, "auto", None, cores=2)
    assert c.executor == "process" and c.workers == 2
    assert "two threads at once" in c.reason and "lock" in c.reason
    assert c.process_rate > ex.PROCESS_MARGIN * c.thread_rate


def test_the_pair_reads_the_same_under_load():
    # each thread preempted for most of its wall time: the run-queue wait is taken out
    loaded = kind(rows(1.0, 0.12, 0.0, 0.0, 0.88, 1) + rows(1.5, 0.12, 0.0, 0.0, 1.25, 1),
                  ex.PAIR)
    solo = kind(rows(0.6, 0.1, 0.0, 0.0, 0.5, 4), ex.SOLO)
    a = ex.probe_of(H5_METERED + H5_SOLO + H5_PAIR, 49168)
    b = ex.probe_of(H5_METERED + solo + loaded, 49168)
    assert a.pair_serial == pytest.approx(b.pair_serial) and a.per_sample_s == b.per_sample_s
    assert choose(b, "auto", None, cores=2).executor == "process"


@pytest.mark.parametrize("x,want", [(1.0, 0.0), (1.1, 0.0), (ex.PAIR_NOISE, 0.0), (1.625, 0.5),
                                    (2.0, 1.0), (3.0, 1.5), (20.0, ex.MAX_SERIAL)])
def test_pair_serial_from_the_two_threads_time(x, want):
    # 1: the threads ran at once (a sleep's jitter above it reads as no lock); 2: one at a time
    solo = kind(rows(1.0, 1.0, 0.0, 0.0, 0.0, 3), ex.SOLO)
    pair = kind(rows(1.0, 1.0, 0.0, 0.0, 0.0, 1) + rows(x, 1.0, 0.0, 0.0, 0.0, 1), ex.PAIR)
    assert ex.probe_of(solo + pair, 0).pair_serial == pytest.approx(want)


def test_a_pair_that_ran_at_once_changes_nothing():
    # waiting work (a sleep) that two threads ran at once: the same many threads as without
    metered = kind(rows(2.1, 0.05, 0.01, 0.04, 0.0), ex.METERED)
    solo = kind(rows(2.1, 0.05, 0.0, 0.0, 0.0, 3), ex.SOLO)
    pair = kind(rows(2.2, 0.05, 0.0, 0.0, 0.0, 1) + rows(2.3, 0.05, 0.0, 0.0, 0.0, 1), ex.PAIR)
    a, b = ex.probe_of(metered + solo, 4096), ex.probe_of(metered + solo + pair, 4096)
    assert b.pair_serial == 0.0
    ca, cb = choose(a, "auto", None, cores=2), choose(b, "auto", None, cores=2)
    assert (ca.executor, ca.workers, ca.reason) == (cb.executor, cb.workers, cb.reason)
    assert cb.executor == "thread" and cb.workers > 2
    # one pair row (the other thread's lost) measures nothing
    assert ex.probe_of(metered + solo + pair[:1], 4096).pair_serial is None

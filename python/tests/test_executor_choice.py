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
    assert c.workers == 44  # ceil(1.5 * (1 ms + G) / (0.02 * 1 ms + G))
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
    c = choose(p, "auto", 0, cores=2)
    assert (c.executor, c.workers) == ("thread", 1) and "num_workers=0" in c.reason
    # drawing random numbers, num_workers=0 too gets a process: its samples then equal those of
    # any other worker count (per-sample seeding)
    r = Probe(2e-3, gil_share=1.0, cpu_share=1.0, sample_bytes=100, uses_rng=True)
    c = choose(r, "auto", 0, cores=2)
    assert (c.executor, c.workers) == ("process", 1) and "random generators" in c.reason
    assert choose(r, "auto", 0, cores=2, reseed=False).executor == "thread"
    assert choose(None, "auto", 2, cores=2, iterable=True).executor == "process"


@pytest.mark.parametrize("t,gil,cpu,n,cores,want", [
    (10e-3, 0.0, 0.01, None, 2, ex.MAX_THREADS),  # waits 10 ms a sample: as many as allowed
    (1e-3, 0.25, 0.1, None, 2, 6),     # busy 25%: cores / 0.25 = 8, the GIL allows ~5.9
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

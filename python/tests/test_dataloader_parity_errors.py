"""DataLoader parity, errors and lifecycle (issue 24): what a training script observes when
something goes wrong or when it drives the iterators itself, through torch.utils.data.DataLoader
and stoker.Loader side by side: exceptions from __getitem__ (IndexError, KeyError,
StopIteration, KeyboardInterrupt), collate_fn and worker_init_fn, the argument errors, a pass
abandoned mid-epoch, two live iterators, persistent workers and worker_init_fn calls, an
IterableDataset longer than its __len__, pin_memory and timeout without workers.

Where stoker deliberately differs (docs/python.md, "DataLoader parity: what is covered") the
test asserts both behaviours. Nothing here waits on the clock: the moment of each error is the
dataset's own (a given index)."""
import os
import select
import signal
import time
import warnings

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, Dataset, IterableDataset  # noqa: E402

import stoker  # noqa: E402
from test_dataloader_parity import Counting, _close_made, mk  # noqa: E402,F401
from conftest import run_python  # noqa: E402
from test_pydataset import _epoch_through_timeouts, _gone  # noqa: E402

EXECUTORS = ["thread", "process"]


class Raising(Dataset):
    """0..n-1, raising `exc` at index `at`."""

    def __init__(self, exc, at, n=10):
        self.exc, self.at, self.n = exc, at, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.at:
            raise self.exc
        return i


class Longer(IterableDataset):
    """Yields n items but says it has `claims`."""

    def __init__(self, n, claims):
        self.n, self.claims = n, claims

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self):
        return self.claims


def failing_init(worker_id):
    raise ValueError(f"no setup for worker {worker_id}")


def failing_collate(samples):
    if 4 in samples:
        raise ZeroDivisionError("collate failed on the batch with 4")
    return torch.tensor(samples)


class InitLog:
    """A worker_init_fn that appends "pid worker" lines to a file (workers are processes)."""

    def __init__(self, path):
        self.path = path

    def __call__(self, worker_id):
        with open(self.path, "a") as f:
            f.write(f"{os.getpid()} {worker_id}\n")

    def calls(self):
        if not os.path.exists(self.path):
            return []
        with open(self.path) as f:
            return [tuple(map(int, line.split())) for line in f]


def drive(loader):
    """Every next() of one pass: a batch as a list, or (exception type, the original message
    is in it) for a raised one; the pass goes on after an exception, as a script may."""
    out, it = [], iter(loader)
    while len(out) < 50:
        try:
            out.append(next(it).tolist())
        except StopIteration:
            return out
        except BaseException as e:  # noqa: BLE001 - KeyboardInterrupt too
            out.append(type(e).__name__)
    raise AssertionError(f"the pass did not end: {out}")


def stoker_loader(ds, executor, **kw):
    return mk(ds, executor, **kw)  # closed after the test


# ---- exceptions ----

@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("exc", [IndexError("gone"), KeyError("k"), ValueError("bad")])
def test_getitem_exception_fails_its_batch_and_the_pass_goes_on(executor, workers, exc):
    """An exception in __getitem__: next() raises its type (stoker's message adds the worker
    and the index to the original, as the DataLoader's workers do), and the next next() goes
    on with the following batch. (An IndexError is not taken for the end of the dataset.)"""
    ds = Raising(exc, 4)
    want = drive(DataLoader(ds, batch_size=3, num_workers=workers))
    got = drive(stoker_loader(ds, executor, batch_size=3, num_workers=workers))
    assert got == want == [[0, 1, 2], type(exc).__name__, [6, 7, 8], [9]]
    with pytest.raises(type(exc)) as e:
        list(stoker_loader(ds, executor, batch_size=3, num_workers=workers))
    assert str(exc.args[0]) in str(e.value) and "sample 4" in str(e.value)


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("workers", [0, 2])
def test_stop_iteration_in_getitem_ends_a_for_loop(executor, workers):
    """StopIteration raised by __getitem__ leaves next() as StopIteration with the DataLoader
    (num_workers=0: it escapes; with workers: it is re-raised as itself): a for loop just
    ends there. stoker gives the same."""
    ds = Raising(StopIteration, 3, n=8)
    want = [b.tolist() for b in DataLoader(ds, batch_size=2, num_workers=workers)]
    got = [b.tolist() for b in stoker_loader(ds, executor, batch_size=2, num_workers=workers)]
    assert got == want == [[0, 1]]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_keyboard_interrupt_in_getitem(executor):
    """KeyboardInterrupt raised inside __getitem__ (num_workers=0): next() raises
    KeyboardInterrupt, that batch is lost, and a loop that catches it goes on with the next
    batch, as with the DataLoader. (stoker reads the first samples when it is created to fix
    the batch layout: an interrupt there comes from the constructor; index 30 is past them.)"""
    ds = Raising(KeyboardInterrupt, 30, n=36)
    want = drive(DataLoader(ds, batch_size=2))
    got = drive(stoker_loader(ds, executor, batch_size=2, num_workers=0))
    assert got == want
    assert want[14:] == [[28, 29], "KeyboardInterrupt", [32, 33], [34, 35]]


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("workers", [0, 2])
def test_collate_fn_exception(executor, workers):
    """An exception in collate_fn: next() raises its type, that batch is dropped, the pass goes
    on."""
    want = drive(DataLoader(Counting(8), batch_size=2, num_workers=workers,
                            collate_fn=failing_collate))
    got = drive(stoker_loader(Counting(8), executor, batch_size=2, num_workers=workers,
                              collate_fn=failing_collate))
    assert got == want == [[0, 1], [2, 3], "ZeroDivisionError", [6, 7]]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_worker_init_fn_exception(executor):
    """An exception in worker_init_fn: its type, its message in the error. (The DataLoader
    raises it at the first next(); stoker, which runs worker 0's first samples when it is
    created, from the constructor or the first next().)"""
    with pytest.raises(ValueError, match="no setup for worker"):
        list(DataLoader(Counting(4), batch_size=2, num_workers=2, worker_init_fn=failing_init))
    with pytest.raises(ValueError, match="no setup for worker"):
        list(stoker_loader(Counting(4), executor, batch_size=2, num_workers=2,
                           worker_init_fn=failing_init))


class KillsItself(Dataset):
    """0..n-1; the worker process loading `at` SIGKILLs itself there, the first time (a marker
    file: the DataLoader's pass ends at the error, stoker's goes on with a restarted worker)."""

    def __init__(self, marker, at=5, n=12):
        self.marker, self.at, self.n = marker, at, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.at and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return i


def test_killed_worker_is_a_runtime_error(tmp_path):
    """A worker process killed by a signal: the DataLoader raises RuntimeError ("worker (pid(s)
    ...) exited unexpectedly"); stoker raises StokerWorkerError, a RuntimeError (so the same
    `except RuntimeError` catches it) and a StokerIOError (what stoker raised before), naming
    the sample and the signal, and its pass goes on (the worker restarted)."""
    # the DataLoader in a child process: its SIGCHLD handler, once installed, raises wherever
    # the process happens to be when a child exits, pytest's own code included
    r = run_python(f"""
import sys
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
from torch.utils.data import DataLoader
from test_dataloader_parity_errors import KillsItself
try:
    list(DataLoader(KillsItself({str(tmp_path / "dl")!r}), batch_size=2, num_workers=2))
except RuntimeError as e:
    print("RuntimeError", "exited unexpectedly" in str(e) or "killed by signal" in str(e))
""", timeout=120)
    assert r.stdout.strip() == "RuntimeError True", (r.stdout, r.stderr)
    got = drive(stoker_loader(KillsItself(str(tmp_path / "stoker")), "process", batch_size=2,
                              num_workers=2))
    assert got.count("StokerWorkerError") == 1
    assert [v for b in got if isinstance(b, list) for v in b] == [0, 1, 2, 3] + list(range(6, 12))
    assert issubclass(stoker.StokerWorkerError, RuntimeError)
    assert issubclass(stoker.StokerWorkerError, stoker.StokerIOError)
    s = stoker_loader(KillsItself(str(tmp_path / "again")), "process", batch_size=2,
                      num_workers=2)
    with pytest.raises(RuntimeError, match=r"worker process \d \(pid \d+\) was killed by "
                                           r"signal 9 .*while loading sample 5 \(epoch 0\)"):
        list(s)


class ShardKillsItself(IterableDataset):
    """0..n-1, each worker its share (get_worker_info()); the worker reaching `at` SIGKILLs
    itself there, the first time (a marker file)."""

    def __init__(self, marker, at=5, n=12):
        self.marker, self.at, self.n = marker, at, n

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        for i in range(info.id, self.n, info.num_workers):
            if i == self.at and not os.path.exists(self.marker):
                open(self.marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
            yield i


def test_killed_iterable_worker_then_the_next_pass(tmp_path):
    """An IterableDataset's worker process killed by a signal: the DataLoader's pass raises
    RuntimeError ("exited unexpectedly", or "is killed by signal" from its SIGCHLD handler) and
    its next pass has new workers, every item once; so has stoker's (the error names the signal;
    before, every later pass raised BrokenPipeError). The DataLoader is not run here: its
    SIGCHLD handler, installed in this process, raises wherever this process happens to be when
    a child exits (seen once in CI, inside pytest's own reporting)."""
    s = stoker.Loader(ShardKillsItself(str(tmp_path / "stoker")), batch_size=2, num_workers=2)
    try:
        got, errors = _epoch_through_timeouts(s, kinds=(stoker.StokerWorkerError,))
        assert len(errors) == 1 and "exited unexpectedly" in errors[0], errors
        assert "killed by signal 9" in errors[0] and "restarted for the next" in errors[0]
        assert 5 not in got and len(got) == len(set(got)) and set(got) < set(range(12))
        for _ in range(2):
            assert sorted(int(v) for b in s for v in b) == list(range(12))
        assert s.stats()["worker_restarts"] == 1
    finally:
        s.close()


class Endless(IterableDataset):
    def __iter__(self):
        i = 0
        while True:
            yield i
            i += 1


def _wait_exited(pid, limit_s=30.0):
    """Until process `pid` has exited (a zombie its parent has not reaped, or gone)."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if _gone(pid):
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not exit within {limit_s} s")


def test_a_request_to_an_iterable_worker_that_died_names_the_death():
    """An IterableDataset's worker process killed, and gone, before the training loop asks it
    for its next batch: the ask finds its socket closed, and next() raises the worker's death
    by name (StokerWorkerError: killed by signal 9), not the socket's BrokenPipeError (seen
    once in CI: test_killed_iterable_worker_then_the_next_pass)."""
    s = stoker.Loader(Endless(), batch_size=1, num_workers=2, executor="process")
    try:
        it = iter(s)
        next(it)
        pid = s.worker_pids()[0]
        os.kill(pid, signal.SIGKILL)
        _wait_exited(pid)
        with pytest.raises(stoker.StokerWorkerError, match="killed by signal 9"):
            for _ in range(1000):  # (the batches it delivered before its death come first)
                next(it)
    finally:
        s.close()


class EmptyStream(IterableDataset):
    def __iter__(self):
        return iter([])


@pytest.mark.parametrize("workers", [0, 2])
def test_empty_dataset(workers):
    """A map-style dataset of length 0: the DataLoader's passes are empty (len 0); stoker's
    constructor refuses it by name (a StokerInvalidError, a ValueError: an epoch of no samples
    is almost always a wrong path or split, and stoker's epochs advance by themselves). An
    IterableDataset that yields nothing: empty passes in both."""
    empty = torch.utils.data.TensorDataset(torch.zeros(0, 3))
    dl = DataLoader(empty, batch_size=2, num_workers=workers)
    assert list(dl) == [] and len(dl) == 0
    with pytest.raises(ValueError, match=r"TensorDataset is empty \(len\(\) = 0\)"):
        stoker.Loader(empty, batch_size=2, num_workers=workers)
    assert list(DataLoader(EmptyStream(), batch_size=2, num_workers=workers)) == []
    s = stoker.Loader(EmptyStream(), batch_size=2, num_workers=workers)
    try:
        assert list(s) == [] and list(s) == []
    finally:
        s.close()


# ---- arguments ----

def test_attributes_set_once():
    """The DataLoader refuses assigning batch_size, batch_sampler, sampler, drop_last, dataset
    and persistent_workers after construction (the batches are planned from them): so does
    stoker, map-style and iterable, with the same ValueError; other attributes stay free."""
    for ds in (Counting(6), Longer(6, 6)):
        for loader in (DataLoader(ds, batch_size=2), mk(ds, batch_size=2)):
            for attr in ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset",
                         "persistent_workers"):
                with pytest.raises(ValueError, match=f"{attr} attribute should not be set after"):
                    setattr(loader, attr, 3)
            loader.note = "mine"
            assert loader.note == "mine" and loader.batch_size == 2
            assert [b.tolist() for b in loader][0] == [0, 1]


def _described(loader):
    """The DataLoader's attributes a script reads, as comparable values."""
    def sampler(s):
        if s is None:
            return None
        out = [type(s).__name__]
        for attr in ("batch_size", "drop_last", "generator", "num_replicas", "rank"):
            if hasattr(s, attr):
                out.append((attr, getattr(s, attr)))
        try:
            out.append(("len", len(s)))
        except TypeError:  # an IterableDataset's sampler has none
            out.append(("len", None))
        if hasattr(s, "sampler"):
            out.append(("sampler", sampler(s.sampler)))
        return out
    return {"sampler": sampler(loader.sampler), "batch_sampler": sampler(loader.batch_sampler),
            "collate_fn": loader.collate_fn, "prefetch_factor": loader.prefetch_factor,
            "batch_size": loader.batch_size, "drop_last": loader.drop_last,
            "generator": loader.generator, "worker_init_fn": loader.worker_init_fn,
            "persistent_workers": loader.persistent_workers,
            "pin_memory_device": loader.pin_memory_device, "pin_memory": loader.pin_memory,
            "multiprocessing_context": None if loader.multiprocessing_context is None
            else loader.multiprocessing_context.get_start_method()}


def test_dataloader_attributes_a_script_reads():
    """sampler, batch_sampler, collate_fn, prefetch_factor, worker_init_fn,
    persistent_workers, pin_memory_device and multiprocessing_context (a start method's name
    as its context; these four were missing on a TensorDataset and partly on an
    IterableDataset) and pin_memory (the argument, True without CUDA too; was False there)
    read as the DataLoader's: its
    default samplers (SequentialSampler, RandomSampler with the generator, an IterableDataset's
    infinite one), the BatchSampler over them, default_collate (default_convert without
    batching), so len(loader.sampler), loader.sampler.set_epoch(e) and collate_fn=
    loader.collate_fn in a second loader work (were: None, so len() raised TypeError); for a
    Python dataset, a TensorDataset stoker reads itself and an IterableDataset."""
    from torch.utils.data import DistributedSampler, BatchSampler, SequentialSampler
    g = torch.Generator()
    def mine(batch):
        return batch
    for ds in (Counting(10), torch.utils.data.TensorDataset(torch.arange(10))):
        cases = [dict(), dict(batch_size=4, shuffle=True, generator=g, num_workers=2),
                 dict(batch_size=3, drop_last=True, collate_fn=mine, num_workers=1,
                      prefetch_factor=4),
                 dict(batch_size=4, sampler=DistributedSampler(ds, num_replicas=2, rank=1)),
                 dict(batch_sampler=BatchSampler(SequentialSampler(ds), 3, False)),
                 dict(batch_size=None),
                 dict(batch_size=2, num_workers=2, worker_init_fn=mine, persistent_workers=True,
                      multiprocessing_context="fork", pin_memory_device="cuda",
                      pin_memory=True)]
        for kw in cases:
            want = _described(DataLoader(ds, **kw))
            got = _described(mk(ds, **kw))
            assert got == want, (type(ds).__name__, kw)
    loader = mk(Counting(10), batch_size=4)
    again = mk(Counting(10), batch_size=4, collate_fn=loader.collate_fn)
    assert len(loader.sampler) == 10 and [b.tolist() for b in again][0] == [0, 1, 2, 3]
    for kw in (dict(), dict(batch_size=3, drop_last=True, num_workers=2), dict(batch_size=None),
               dict(num_workers=1, worker_init_fn=mine, persistent_workers=True,
                    multiprocessing_context="fork", pin_memory_device="cuda")):
        assert _described(mk(Longer(6, 6), **kw)) == _described(DataLoader(Longer(6, 6), **kw))


def test_argument_errors_without_workers():
    """prefetch_factor with num_workers=0: ValueError (as the installed torch rules: 1.13
    refuses any value but its default 2, torch 2 any value); multiprocessing_context with
    num_workers=0 (stoker: unless executor="process") or an unknown one, negative timeout and
    num_workers: ValueError; for an IterableDataset too."""
    stoker.Loader(Counting(3), multiprocessing_context="spawn", num_workers=0,
                  executor="process").close()  # stoker's one worker process: its start method
    default = 2 if torch.__version__.startswith("1.") else None
    bad = [dict(prefetch_factor=4, num_workers=0), dict(timeout=-1), dict(num_workers=-1),
           dict(multiprocessing_context="spawn", num_workers=0),
           dict(multiprocessing_context="nonsense", num_workers=1)]
    for ds in (Counting(3), Longer(3, 3)):
        for kw in bad:
            with pytest.raises(ValueError):
                DataLoader(ds, **kw)
            with pytest.raises(ValueError):
                mk(ds, **kw)
        if default is not None:  # the default itself is accepted, by both
            DataLoader(ds, prefetch_factor=default, num_workers=0)
            stoker.Loader(ds, prefetch_factor=default, num_workers=0, executor="thread").close()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the behaviour without CUDA")
@pytest.mark.parametrize("executor", EXECUTORS)
def test_pin_memory_without_cuda(executor):
    """pin_memory=True without CUDA: both go on with the same batches (stoker says so with a
    UserWarning; torch 1.13's DataLoader is silent, torch 2's warns too)."""
    want = [b.tolist() for b in DataLoader(Counting(5), batch_size=2, pin_memory=True)]
    with pytest.warns(UserWarning, match="no CUDA"):
        s = stoker_loader(Counting(5), executor, batch_size=2, pin_memory=True)
    assert [b.tolist() for b in s] == want


def test_timeout_without_workers():
    """timeout with num_workers=0: torch 1.13's DataLoader fails an assertion at iter(); stoker
    applies the timeout to its one worker (documented difference) and gives the batches."""
    got = [b.tolist() for b in mk(Counting(5), batch_size=2, num_workers=0,
                                             timeout=60, executor="thread")]
    assert got == [b.tolist() for b in DataLoader(Counting(5), batch_size=2)]


# ---- lifecycle ----

@pytest.mark.parametrize("executor", EXECUTORS)
def test_break_mid_epoch_then_a_new_pass(executor):
    """break after the first batch, then a new for loop: without shuffle both give the whole
    epoch from its start (stoker: the abandoned pass's epoch ends, the new pass is the next
    epoch, in order). After close() each worker process ends."""
    def run(loader):
        out = []
        for b in loader:
            out.append(b.tolist())
            break
        out.append([b.tolist() for b in loader])
        return out
    want = run(DataLoader(Counting(7), batch_size=2, num_workers=2))
    s = stoker_loader(Counting(7), executor, batch_size=2, num_workers=2)
    assert run(s) == want == [[0, 1], [[0, 1], [2, 3], [4, 5], [6]]]
    pids = s.worker_pids() if executor == "process" else []
    assert len(pids) == (2 if executor == "process" else 0)
    s.close()
    for pid in pids:  # each worker process ends (waited for as an event: its pidfd)
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue  # gone already
        try:
            assert select.select([fd], [], [], 120)[0] == [fd], f"worker {pid} still runs"
        finally:
            os.close(fd)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_two_live_iterators(executor):
    """Two iterators of one loader at once: the DataLoader (without persistent_workers) runs
    two independent passes; so does stoker, the older pass going on from a second loader
    resumed where the newer iter() ended it on the loader (was: a StopIteration there, so
    zip(loader, loader) was an empty loop, silently). For an IterableDataset, the old
    iterator's next() raises StokerStateError saying so (documented difference); an iterator
    at its end stays at StopIteration. With a sampler or batch_sampler of the user's the older
    pass goes on with its own index list (was: StokerStateError)."""
    from torch.utils.data import DistributedSampler
    d = DataLoader(Counting(6), batch_size=2, num_workers=2)
    a, b = iter(d), iter(d)
    want = [next(a).tolist(), next(b).tolist(), next(a).tolist()]
    assert want == [[0, 1], [0, 1], [2, 3]]
    pairs = [(x.tolist(), y.tolist()) for x, y in zip(d, d)]
    s = stoker_loader(Counting(6), executor, batch_size=2, num_workers=2)
    a, b = iter(s), iter(s)
    assert [next(a).tolist(), next(b).tolist(), next(a).tolist()] == want
    assert [x.tolist() for x in a] == [[4, 5]] and [x.tolist() for x in b] == [[2, 3], [4, 5]]
    assert [(x.tolist(), y.tolist()) for x, y in zip(s, s)] == pairs
    # shuffled: two orders, as the DataLoader's two iterators draw two (a mixup of the loader
    # with itself must not pair each sample with itself), every sample once on each side
    s = stoker_loader(Counting(40), executor, batch_size=4, num_workers=2, shuffle=True)
    left, right = zip(*[(x.tolist(), y.tolist()) for x, y in zip(s, s)])
    assert sorted(sum(left, [])) == sorted(sum(right, [])) == list(range(40))
    assert left != right
    # samplers of the user's (was: StokerStateError): the older pass goes on with its own
    # index list (the user's sampler is not iterated again for it), a DistributedSampler's
    # with its epoch's order, whatever set_epoch() the loop called since
    ds = Counting(12)
    for kw in (dict(sampler=DistributedSampler(ds, num_replicas=2, rank=1, shuffle=False)),
               dict(sampler=DistributedSampler(ds, num_replicas=2, rank=0, seed=3)),
               dict(sampler=[5, 3, 11, 0, 2, 4, 7]),
               dict(batch_sampler=[[5, 3, 11], [0], [2, 4], [7, 1, 6, 8]])):
        d = DataLoader(ds, num_workers=2, **({"batch_size": 2} if "sampler" in kw else {}), **kw)
        s = stoker_loader(ds, executor, num_workers=2,
                          **({"batch_size": 2} if "sampler" in kw else {}), **kw)
        want = [(x.tolist(), y.tolist()) for x, y in zip(d, d)]
        assert [(x.tolist(), y.tolist()) for x, y in zip(s, s)] == want, kw
        a = iter(s)
        head = next(a).tolist()
        if hasattr(kw["sampler"] if "sampler" in kw else None, "set_epoch"):
            kw["sampler"].set_epoch(5)  # the loop moved on: the older pass keeps its order
        b = iter(s)
        rest = [x.tolist() for x in a]
        assert [head] + rest == [x for x, _ in want], kw
        assert len([x.tolist() for x in b]) == len(want)
    it = stoker_loader(Longer(6, 6), executor, batch_size=2, num_workers=1)
    a = iter(it)
    assert next(a).tolist() == [0, 1]
    b = iter(it)
    with pytest.raises(stoker.StokerStateError, match="one pass at a time"):
        next(a)
    assert [x.tolist() for x in b] == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(StopIteration):  # a pass at its end stays there
        next(b)
    it.set_epoch(0)
    with pytest.raises(StopIteration):
        next(b)


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("persistent", [False, True])
def test_worker_init_fn_calls_across_epochs(executor, persistent, tmp_path):
    """worker_init_fn over three epochs with 2 workers: the DataLoader calls it 2 times with
    persistent_workers, 6 without (fresh workers each epoch); stoker's workers live as long as
    the loader (persistent_workers is always true): worker processes call it once each, 2;
    worker threads once each, before the thread's first sample (a thread that got none has not
    called it), plus once for worker 0 on the constructing thread, which reads the first
    samples (1 to 3, never per epoch; documented)."""
    def calls(make, started=0):
        log = InitLog(str(tmp_path / f"{make.__name__}.log"))
        loader = make(log)
        epochs = [[b.tolist() for b in loader] for _ in range(3)]
        assert epochs == [[[0, 1], [2, 3], [4, 5]]] * 3
        # A worker process calls worker_init_fn as it starts, samples or not; on a loaded
        # machine worker 0 can take all 18 samples before worker 1 has run, and close() would
        # stop it first. So wait for the calls to be made (an event; pytest-timeout bounds
        # the wait, no clock decides the verdict) before closing.
        while len(log.calls()) < started:
            time.sleep(0.05)
        if hasattr(loader, "close"):
            loader.close()
        return sorted(w for _, w in log.calls())

    def dataloader(log):
        return DataLoader(Counting(6), batch_size=2, num_workers=2,
                          persistent_workers=persistent, worker_init_fn=log)

    def stoker_(log):
        return stoker_loader(Counting(6), executor, batch_size=2, num_workers=2,
                             persistent_workers=persistent, worker_init_fn=log)
    assert calls(dataloader) == ([0, 1] if persistent else [0, 0, 0, 1, 1, 1])
    got = calls(stoker_, started=2 if executor == "process" else 0)
    if executor == "process":
        assert got == [0, 1]
    else:  # worker 0's on the constructing thread, then each thread's before its first
        # sample (which threads get samples is the scheduler's choice): never per epoch
        assert got in ([0], [0, 0], [0, 1], [0, 0, 1])


@pytest.mark.parametrize("executor", EXECUTORS)
def test_iterable_longer_than_its_len(executor):
    """An IterableDataset that yields more than its __len__: every item is delivered, and once
    len(loader) was asked, both warn that the length was wrong."""
    want_w, got_w = [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        d = DataLoader(Longer(7, 3), batch_size=2)
        assert len(d) == 2
        want = [b.tolist() for b in d]
        want_w = [str(w.message) for w in caught if "Length of IterableDataset" in str(w.message)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = stoker_loader(Longer(7, 3), executor, batch_size=2)
        assert len(s) == 2
        got = [b.tolist() for b in s]
        got_w = [str(w.message) for w in caught if "Length of IterableDataset" in str(w.message)]
    assert got == want == [[0, 1], [2, 3], [4, 5], [6]]
    assert len(want_w) >= 1 and len(got_w) >= 1


class Missing(Exception):
    """An exception class of the user's taking two arguments, kept as attributes."""

    def __init__(self, path, index):
        super().__init__(path, index)
        self.path, self.index = path, index


class MissingFifth(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 5:
            raise Missing(f"/data/img{i}.jpg", i)
        return i


def test_num_workers_0_raises_the_exception_of_getitem_itself():
    # The DataLoader's main process raises __getitem__'s exception unchanged; stoker rebuilt it
    # from its message (a RuntimeError for this two-argument class, so `except Missing` missed
    # it). It is now the exception itself, with a note naming the sample.
    def caught(loader):
        try:
            for _ in loader:
                pass
        except Missing as e:
            return type(e), e.args, e.path, e.index, getattr(e, "__notes__", [])
        return None
    want = caught(DataLoader(MissingFifth(), batch_size=2))
    got = caught(mk(MissingFifth(), "auto", batch_size=2, num_workers=0))
    assert got[:4] == want[:4] == (Missing, ("/data/img5.jpg", 5), "/data/img5.jpg", 5)
    assert got[4] == ["(stoker: in the training thread (no worker) while loading sample 5 "
                      "(epoch 0))"]

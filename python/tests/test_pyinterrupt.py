"""Ctrl-C never costs a batch of a Python dataset (issue 24 with issue 30's rule, docs/python.md
"Errors"): a KeyboardInterrupt caught by the training loop, and iteration resumed, gives every
batch exactly once, in order, when the signal lands while the consumer runs Python on the batch
(a custom collate_fn, default_collate of rebuilt samples, unpickling an iterable's batch) or
while it waits for the batch.

The moment is made by the test, never by timing: a collate_fn that raises KeyboardInterrupt
itself on one call, or raises SIGINT on the consumer thread inside the call
(signal.raise_signal: the handler runs at that thread's next check, inside the call), or SIGINT
raised on the consumer thread as next() starts to wait for a worker's answer."""
import signal

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import Dataset, IterableDataset, get_worker_info  # noqa: E402
from torch.utils.data._utils.collate import default_collate  # noqa: E402

import stoker  # noqa: E402

N = 40


class Numbers(Dataset):
    """Sample i: (float32 [2] full of i, i, and with strings=True the object leaf "s<i>")."""

    def __init__(self, strings=False):
        self.strings = strings

    def __len__(self):
        return N

    def __getitem__(self, i):
        x = torch.full((2,), float(i))
        return (x, i, f"s{i}") if self.strings else (x, i)


class Stream(IterableDataset):
    """0..N-1, sharded over the workers by get_worker_info() as the articles shard."""

    def __iter__(self):
        info = get_worker_info()
        k, n = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(k, N, n):
            yield torch.full((2,), float(i)), i


class Interrupting:
    """A collate_fn (default_collate's result) that interrupts its call number `at`, once:
    how="raise" raises KeyboardInterrupt in the call; how="signal" raises SIGINT on the calling
    thread (the consumer's, for a map-style dataset), whose handler raises in the call."""

    def __init__(self, at, how):
        self.at, self.how = at, how
        self.calls = 0

    def __call__(self, samples):
        self.calls += 1
        if self.calls == self.at:
            if self.how == "raise":
                raise KeyboardInterrupt
            signal.raise_signal(signal.SIGINT)
        return default_collate(samples)


@pytest.fixture
def sigint_raises():
    """SIGINT raises KeyboardInterrupt in this process for the test (as in a plain script)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def resume_through(it, most=5):
    """Iterate to the end, catching KeyboardInterrupt as a training loop that checkpoints on
    Ctrl-C would: (labels of the batches in order, interrupts caught)."""
    got, caught = [], 0
    while True:
        try:
            b = next(it)
        except StopIteration:
            return got, caught
        except KeyboardInterrupt:
            caught += 1
            assert caught <= most
            continue
        got.append([int(v) for v in b[1]])


def flat(batches):
    return [i for b in batches for i in b]


@pytest.mark.parametrize("how", ["raise", "signal"])
@pytest.mark.parametrize("executor", ["thread", "process"])
def test_map_collate_fn_interrupted(executor, how, sigint_raises):
    """Map-style: the 3rd batch's collate_fn (in the consumer) is interrupted; the state does
    not count that batch; the next call delivers it; the epoch is whole and in order."""
    loader = stoker.Loader(Numbers(), batch_size=4, num_workers=2, executor=executor,
                           collate_fn=Interrupting(3, how), rank=0, world_size=1)
    it = iter(loader)
    head = [[int(v) for v in next(it)[1]] for _ in range(2)]
    with pytest.raises(KeyboardInterrupt):
        next(it)
    assert loader.state_dict()["consumed"] == 8
    got, caught = resume_through(it)
    assert caught == 0
    assert head + got == [list(range(k, k + 4)) for k in range(0, N, 4)]
    assert loader.state_dict()["epoch"] == 1
    assert flat(b[1].tolist() for b in loader) == list(range(N))  # the next epoch as usual
    loader.close()


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_map_object_leaves_survive_the_interrupt(executor, sigint_raises):
    """Samples with object leaves (strings, kept beside the ring rows until the consumer takes
    them): the batch interrupted after its objects were taken still has them next time."""
    loader = stoker.Loader(Numbers(strings=True), batch_size=5, num_workers=2,
                           executor=executor, collate_fn=Interrupting(2, "raise"))
    got, names, caught = [], [], 0
    it = iter(loader)
    while True:
        try:
            x, i, s = next(it)
        except StopIteration:
            break
        except KeyboardInterrupt:
            caught += 1
            continue
        got += i.tolist()
        names += list(s)
    assert caught == 1
    assert got == list(range(N)) and names == [f"s{i}" for i in range(N)]
    loader.close()


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_map_default_collate_interrupted(executor, sigint_raises, monkeypatch):
    """No collate_fn: a KeyboardInterrupt while the batch is assembled (default_collate's
    rules over the rebuilt samples) loses nothing."""
    from stoker import _collate
    loader = stoker.Loader(Numbers(strings=True), batch_size=4, num_workers=2,
                           executor=executor)
    real, calls = _collate.collate_rows, [0]

    def once(*a, **kw):
        calls[0] += 1
        if calls[0] == 4:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(_collate, "collate_rows", once)
    got, caught = resume_through(iter(loader))
    assert caught == 1 and flat(got) == list(range(N))
    loader.close()


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_map_collate_fn_exception_drops_only_its_batch(executor):
    """An exception (not a KeyboardInterrupt) in collate_fn is raised at its batch, which is
    dropped as the DataLoader drops it: the loop goes on with the next batch, never retrying
    the failing one forever."""
    def fails_once(samples, calls=[]):
        calls.append(1)
        if len(calls) == 2:
            raise ValueError("bad batch")
        return default_collate(samples)

    loader = stoker.Loader(Numbers(), batch_size=4, num_workers=2, executor=executor,
                           collate_fn=fails_once)
    it, got, errors = iter(loader), [], 0
    while True:
        try:
            got.append(next(it)[1].tolist())
        except StopIteration:
            break
        except ValueError:
            errors += 1
    assert errors == 1
    assert flat(got) == [i for i in range(N) if not 4 <= i < 8]
    loader.close()


class Groups:
    """Batches of sizes 3, 5, 3, 5 ... over 0..N-1 in order."""

    def __iter__(self):
        k, n = 0, 0
        while k < N:
            size = 3 if n % 2 == 0 else 5
            yield list(range(k, min(N, k + size)))
            k, n = k + size, n + 1

    def __len__(self):
        return sum(1 for _ in self)


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_batch_sampler_of_varying_sizes_interrupted(executor, sigint_raises):
    """A batch_sampler whose batches differ in size (gathered one ring row at a time): an
    interrupted collate keeps the batch's samples for the next call."""
    loader = stoker.Loader(Numbers(), batch_sampler=Groups(), num_workers=2,
                           executor=executor, collate_fn=Interrupting(2, "raise"))
    got, caught = resume_through(iter(loader))
    assert caught == 1
    assert got == list(Groups())
    loader.close()


@pytest.mark.parametrize("how", ["raise", "wait"])
@pytest.mark.parametrize("workers,executor", [(0, "thread"), (2, "thread"), (2, "process")])
def test_iterable_interrupted(workers, executor, how, sigint_raises, monkeypatch):
    """IterableDataset: its collate_fn runs in the worker. "raise": collate_fn raises
    KeyboardInterrupt in the worker (a thread, or a process whose copy of it counts its own
    calls); it is the training loop's, and the batch whose collate it interrupted comes with
    the next call. "wait": SIGINT on the consumer thread as its 3rd wait for an answer starts.
    Either way every batch comes once, in the DataLoader's round-robin order."""
    from stoker import _pyiterable
    want = [[int(v) for v in b[1]] for b in torch.utils.data.DataLoader(
        Stream(), batch_size=4, num_workers=workers)]
    fn = Interrupting(2, "raise") if how == "raise" else None
    if how == "wait":
        real, calls = _pyiterable._Channel.peek, [0]

        def peek(ch):
            calls[0] += 1
            if calls[0] == 3:
                signal.raise_signal(signal.SIGINT)
            return real(ch)

        monkeypatch.setattr(_pyiterable._Channel, "peek", peek)
    loader = stoker.Loader(Stream(), batch_size=4, num_workers=workers, executor=executor,
                           collate_fn=fn)
    got, caught = resume_through(iter(loader))
    assert caught == (2 if how == "raise" and executor == "process" else 1)
    assert got == want
    assert flat(b[1].tolist() for b in loader) == flat(want)  # the next epoch as usual
    loader.close()


def test_iterable_interrupted_while_unpickling(sigint_raises, monkeypatch):
    """A KeyboardInterrupt while the consumer unpickles a worker process's batch: the batch is
    kept and the next call delivers it."""
    from stoker import _pyiterable
    loader = stoker.Loader(Stream(), batch_size=4, num_workers=2, executor="process")
    real, calls = _pyiterable._unpickle, [0]

    def once(payload):
        calls[0] += 1
        if calls[0] == 3:
            raise KeyboardInterrupt
        return real(payload)

    monkeypatch.setattr(_pyiterable, "_unpickle", once)
    got, caught = resume_through(iter(loader))
    want = [[int(v) for v in b[1]] for b in torch.utils.data.DataLoader(
        Stream(), batch_size=4, num_workers=2)]
    assert caught == 1 and got == want
    loader.close()


class InterruptingBatch:
    """A collate_fn that raises KeyboardInterrupt once, on the batch whose first label is
    `first`: the same batch whichever worker thread collates first (a call count shared by two
    worker threads picks a batch by their timing)."""

    def __init__(self, first):
        self.first, self.done = first, False

    def __call__(self, samples):
        if not self.done and samples[0][1] == self.first:
            self.done = True
            raise KeyboardInterrupt
        return default_collate(samples)


def test_iterable_state_dict_after_interrupt(sigint_raises):
    """The resume state after a KeyboardInterrupt counts only the batches delivered. The
    interrupted batch is the second in the DataLoader's order (worker 1's first: labels 1, 3,
    5, 7), so the first next() is never the interrupted one."""
    loader = stoker.Loader(Stream(), batch_size=4, num_workers=2, executor="thread",
                           collate_fn=InterruptingBatch(1))
    it = iter(loader)
    got = [next(it)[1].tolist()]
    n_before = loader.stats()["batches"]
    with pytest.raises(KeyboardInterrupt):
        while True:
            got.append(next(it)[1].tolist())
    assert loader.stats()["batches"] == n_before + len(got) - 1
    rest, _ = resume_through(it)
    assert sorted(flat(got + rest)) == list(range(N))
    loader.close()

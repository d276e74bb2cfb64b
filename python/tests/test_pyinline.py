"""The training thread loads each batch itself (issue 24, fifteenth round): at num_workers=0, as
the DataLoader's main process does, and where "auto" finds that no worker could gain
(_executor.choose; its decision is tested in test_executor_choice.py). python/stoker/_pyhelp.py
(Helper(inline=True)) and the C loader's STK_LOADER_CALLER_LOADS.

What is checked: __getitem__ runs only on the training thread, with get_worker_info() None, no
worker_init_fn and no worker thread started; the batches are those a worker thread delivers
(every sample once per epoch, in the same order, object leaves and samples the fast path does
not fit included); an exception names its sample and the loop goes on; a KeyboardInterrupt
reaches next() and the sample runs again (nothing lost or repeated); a saved state resumes
with the same batches; the training thread's loading counts as its wait for data. Nothing here
reads the clock."""
import os
import threading

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import Dataset, get_worker_info  # noqa: E402

import stoker  # noqa: E402

N = 70
BATCH = 8


class Calls(Dataset):
    """Sample i: (float32 [2] of i, i, "s<i>", and every fifth sample a tensor of another
    length, which the fast path's plan does not fit). Once armed (after the constructor's
    probe), records where each call ran, and `fail(i)` may raise (from the start with
    fail_unarmed: a worker thread may load samples before the test arms it)."""

    def __init__(self, fail=None, fail_unarmed=False):
        self.fail = fail
        self.fail_unarmed = fail_unarmed  # fail in the constructor's probe too
        self.armed = False
        self.calls = []  # (index, thread ident, pid, get_worker_info())

    def __len__(self):
        return N

    def __getitem__(self, i):
        if self.armed:
            self.calls.append((i, threading.get_ident(), os.getpid(), get_worker_info()))
        if self.fail is not None and (self.armed or self.fail_unarmed):
            self.fail(i)
        extra = torch.zeros(3 if i % 5 == 0 else 2)
        return torch.full((2,), float(i)), i, f"s{i}", extra


def workers_running():
    """Threads of this process named stk-worker (the C loader names its workers so)."""
    n = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                n += f.read().strip() == "stk-worker"
        except OSError:  # (a thread that ended meanwhile)
            pass
    return n


def epochs_of(loader, ds, epochs=2, on_interrupt=None):
    """Per epoch, the batches as (indices, strings, extra lengths), checked against x."""
    out = []
    for _ in range(epochs):
        it, batches = iter(loader), []
        while True:
            try:
                x, idx, s, extra = next(it)
            except StopIteration:
                break
            except KeyboardInterrupt:
                if on_interrupt is None:
                    raise
                on_interrupt.append(True)
                continue
            idx = [int(v) for v in idx]
            assert x.tolist() == [[float(i)] * 2 for i in idx]
            batches.append((idx, list(s), [len(e) for e in extra]))
        out.append(batches)
    return out


def made(ds, **kw):
    loader = stoker.Loader(ds, batch_size=BATCH, seed=11, collate_fn=_unchanged, **kw)
    ds.armed = True
    return loader


def plain(batches):
    return [b for epoch in batches for b in epoch]


def _unchanged(b):
    # extra tensors of two lengths: the DataLoader's default_collate would refuse the batch;
    # a collate_fn that keeps the list, as detection scripts do
    x, idx, s, extra = zip(*b)
    return torch.stack(x), torch.tensor(idx), list(s), list(extra)


@pytest.mark.parametrize("shuffle", [False, True])
def test_num_workers_zero_loads_on_the_training_thread(shuffle):
    ds = Calls()
    loader = made(ds, num_workers=0, shuffle=shuffle, worker_init_fn=_never)
    try:
        assert loader.num_workers == 0 and loader.info()["n_threads"] == 0
        assert "training thread" in loader.info()["executor_reason"]
        got = epochs_of(loader, ds)
        assert workers_running() == 0  # no worker thread was started
        st = loader.stats()
    finally:
        loader.close()
    here = (threading.get_ident(), os.getpid())
    assert ds.calls and all((t, p) == here for _, t, p, _ in ds.calls)
    assert all(info is None for *_, info in ds.calls)  # as in the DataLoader's main process
    for batches in got:  # every sample once per epoch, with its own string and extra leaf
        idx = [i for b in batches for i in b[0]]
        assert sorted(idx) == list(range(N))
        for b in batches:
            assert b[1] == [f"s{i}" for i in b[0]]
            assert b[2] == [3 if i % 5 == 0 else 2 for i in b[0]]
    assert (got[0] != got[1]) == shuffle  # a new order each epoch when shuffled
    assert st["help_samples"] >= 2 * N and st["consumer_wait_s"] > 0
    assert st["n_threads"] == 0
    # the same batches as one worker thread delivers with the same seed
    ds1 = Calls()
    one = made(ds1, num_workers=1, executor="thread", shuffle=shuffle)
    try:
        assert one.num_workers == 1
        assert epochs_of(one, ds1) == got
    finally:
        one.close()


def _never(worker_id):
    raise AssertionError("worker_init_fn ran: the DataLoader runs none at num_workers=0")


class _RaiseOnce:
    """fail(i) for Calls: raises `exc` the first time sample `at` is loaded."""

    def __init__(self, at, exc):
        self.at, self.exc, self.done = at, exc, False

    def __call__(self, i):
        if i == self.at and not self.done:
            self.done = True
            raise self.exc


def test_an_exception_names_its_sample_and_the_loop_goes_on():
    ds = Calls(fail=_RaiseOnce(13, ValueError("bad sample 13")))
    loader = made(ds, num_workers=0)
    try:
        it = iter(loader)
        seen, raised = [], []
        while True:
            try:
                seen += [int(v) for v in next(it)[1]]
            except StopIteration:
                break
            except ValueError as e:  # (__getitem__'s own, as the DataLoader raises it there)
                raised.append((str(e), e.__notes__))
        assert len(raised) == 1
        assert raised[0] == ("bad sample 13", ["(stoker: in the training thread (no worker) "
                                               "while loading sample 13 (epoch 0))"])
        bad = set(range(13 // BATCH * BATCH, (13 // BATCH + 1) * BATCH))
        assert sorted(seen) == sorted(set(range(N)) - bad)  # the rest, once each
        # the loader stays usable: the next epoch is whole
        assert sorted(int(v) for b in loader for v in b[1]) == list(range(N))
    finally:
        loader.close()


@pytest.mark.parametrize("at", [21, 20])
def test_keyboard_interrupt_runs_the_sample_again(at):
    """Ctrl-C inside __getitem__ (of a sample the layout's plan fits, or of one whose extra leaf
    it does not: index 20) reaches next(); the loop goes on with the same batches, every sample
    once."""
    ds = Calls(fail=_RaiseOnce(at, KeyboardInterrupt()))
    loader = made(ds, num_workers=0, shuffle=True)
    caught = []
    try:
        got = epochs_of(loader, ds, epochs=1, on_interrupt=caught)
    finally:
        loader.close()
    ref_ds = Calls()
    ref = made(ref_ds, num_workers=0, shuffle=True)
    try:
        want = epochs_of(ref, ref_ds, epochs=1)
    finally:
        ref.close()
    assert caught == [True]
    assert got == want


def test_resume_gives_the_same_batches():
    ds = Calls()
    loader = made(ds, num_workers=0, shuffle=True)
    try:
        whole = plain(epochs_of(loader, ds, epochs=2))
    finally:
        loader.close()
    ds2 = Calls()
    first = made(ds2, num_workers=0, shuffle=True)
    it = iter(first)
    for _ in range(3):
        next(it)
    state = first.state_dict()
    first.close()
    ds3 = Calls()
    resumed = made(ds3, num_workers=0, shuffle=True)
    try:
        resumed.load_state_dict(state)
        rest = plain(epochs_of(resumed, ds3, epochs=2))
    finally:
        resumed.close()
    n0 = -(-N // BATCH)
    assert rest[:n0 - 3] == whole[3:n0]  # the rest of epoch 0, then epoch 1
    assert rest[n0 - 3:] == whole[n0:]


def test_on_error_skip_gives_the_worker_threads_batches():
    """on_error="skip": a sample that raises is replaced by the next good one of the order, as
    on a worker thread (the same batches, the substitute counted)."""
    def run(**kw):
        ds = Calls(fail=_fail_every_seventh, fail_unarmed=True)
        loader = made(ds, shuffle=True, on_error="skip", **kw)
        try:
            return epochs_of(loader, ds, epochs=1), loader.stats()["skipped"]
        finally:
            loader.close()
    here, skipped = run(num_workers=0)
    workers, skipped_w = run(num_workers=1, executor="thread")
    assert here == workers
    assert skipped == skipped_w == len([i for i in range(N) if i % 7 == 3])


def _fail_every_seventh(i):
    if i % 7 == 3:
        raise ValueError(f"bad sample {i}")

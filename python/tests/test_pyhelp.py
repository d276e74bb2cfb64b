"""The training thread loads part of the first batch (issue 24, python/stoker/_pyhelp.py): the
samples it loads are those the executor would deliver (the same batches as with STOKER_HELP=0,
random augmentation on worker processes included, object leaves included), every sample comes
exactly once and in order, an exception in a sample it ran names that sample, on_error="skip"
and a KeyboardInterrupt in such a sample leave the batches as they are, it really runs
samples (stats()["help_samples"]), the first batch does not wait for the worker processes'
forks, and close() during such a sample (from another thread or from inside it) ends in a
closed loader, not a hang.

Nothing here depends on the clock: the datasets make the workers wait until the training
thread has run a sample of its own (an Event for worker threads, a file for worker processes),
so the training thread always finds tickets to take; the waits are bounded only as a safety
net (a broken helper fails the help_samples checks, never hangs)."""
import os
import random
import signal
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import Dataset, get_worker_info  # noqa: E402

import stoker  # noqa: E402

N = 80
BATCH = 16
SAFETY_S = 20  # the longest a worker waits for the training thread's first sample


class Gated(Dataset):
    """Sample i: (float32 [3] full of i (plus draws from the three global generators when
    `random`), i, "s<i>"). Once armed, a call outside the training thread first waits until the
    training thread ran a sample (an Event in this process; a file across processes), so that
    the training thread takes part in the first batch whatever the machine's load.
    `fail(i, here)` may raise for sample i (here: on the training thread)."""

    def __init__(self, path, random_draws=False, fail=None, gate=True):
        self.path, self.random_draws, self.fail, self.gate = path, random_draws, fail, gate
        self.parent = os.getpid()
        self.main = threading.get_ident()
        # armed after the constructor: in a dict, not an assigned attribute, which a pass would
        # take for a changed dataset and read again (waiting for the gated worker threads)
        self.ctl = {"armed": False}
        self.event = threading.Event()
        self.here = []  # indices __getitem__ ran on the training thread once armed

    def __len__(self):
        return N

    def __getstate__(self):  # (spawned workers: no Event)
        d = dict(self.__dict__)
        d["event"] = None
        return d

    def _on_training_thread(self):
        return os.getpid() == self.parent and threading.get_ident() == self.main

    def __getitem__(self, i):
        here = self._on_training_thread()
        if here:
            if self.ctl["armed"]:  # (not the constructor's probe)
                self.here.append(i)
                self.event.set()
                with open(self.path, "w"):
                    pass
        elif not self.gate or threading.current_thread().name.startswith("stoker-probe"):
            pass
        elif os.getpid() == self.parent:  # a worker thread
            if not self.event.wait(SAFETY_S):
                self.event.set()  # (no helper: the test fails, once, not at every sample)
        else:  # a worker process: the file
            for _ in range(SAFETY_S * 100):
                if os.path.exists(self.path):
                    break
                threading.Event().wait(0.01)
            else:
                self.gate = False
        if self.fail is not None:
            self.fail(i, here and self.ctl["armed"])
        x = torch.full((3,), float(i))
        if self.random_draws:
            x = x + random.random() + float(np.random.rand()) + torch.rand(3)
        return x, i, f"s{i}"


def run(tmp_path, monkeypatch, help_on, epochs=1, interrupt=None, **kw):
    """Every batch of `epochs` epochs as plain values, the dataset, and the loader's stats."""
    monkeypatch.setenv("STOKER_HELP", "1" if help_on else "0")
    fail = kw.pop("fail", None)
    ds = Gated(str(tmp_path / f"gate{int(help_on)}"), kw.pop("random_draws", False), fail,
               gate=help_on)
    kw.setdefault("num_workers", 2)
    loader = stoker.Loader(ds, batch_size=BATCH, seed=7, **kw)
    ds.ctl["armed"] = True  # the probe ran here before: the gate opens with the helper's first
    # sample
    batches = []
    try:
        for _ in range(epochs):
            it = iter(loader)
            while True:
                try:
                    b = next(it)
                except StopIteration:
                    break
                except KeyboardInterrupt:
                    if interrupt is None:
                        raise
                    interrupt.append(True)
                    continue
                batches.append((b[0].clone(), [int(v) for v in b[1]], list(b[2])))
        st = loader.stats()
        info = loader.info()
    finally:
        loader.close()
    return batches, ds, st, info


def same(a, b):
    assert len(a) == len(b)
    for (xa, ia, sa), (xb, ib, sb) in zip(a, b):
        assert ia == ib and sa == sb
        assert torch.equal(xa, xb)


def exactly_once(batches, epochs=1):
    seen = [i for _, idx, _ in batches for i in idx]
    assert sorted(seen) == sorted(list(range(N)) * epochs)


@pytest.mark.parametrize("shuffle", [False, True])
def test_threads_same_batches(tmp_path, monkeypatch, shuffle):
    on, ds, st, info = run(tmp_path, monkeypatch, True, epochs=2, shuffle=shuffle,
                           executor="thread")
    off, _, st_off, _ = run(tmp_path, monkeypatch, False, epochs=2, shuffle=shuffle,
                            executor="thread")
    assert info["executor"] == "thread"
    same(on, off)
    exactly_once(on, 2)
    assert st["help_samples"] >= 1 and ds.here  # the training thread ran samples
    assert st_off["help_samples"] == 0
    first = set(on[0][1])
    assert set(ds.here) <= first  # ... of the first batch only
    for s, i in zip(on[0][2], on[0][1]):
        assert s == f"s{i}"  # object leaves of rows loaded here reach the batch


def test_processes_random_augmentation(tmp_path, monkeypatch):
    """executor="auto" picks worker processes for a dataset drawing from the global generators;
    the samples the training thread loads are seeded as a worker seeds them, and the training
    thread's generators are put back."""
    random.seed(123)
    np.random.seed(123)
    state = (random.getstate(), np.random.get_state()[1].copy())
    on, ds, st, info = run(tmp_path, monkeypatch, True, shuffle=True, random_draws=True)
    assert random.getstate() == state[0]
    assert np.array_equal(np.random.get_state()[1], state[1])
    off, _, _, info_off = run(tmp_path, monkeypatch, False, shuffle=True, random_draws=True)
    assert info["executor"] == info_off["executor"] == "process"
    same(on, off)
    exactly_once(on)
    assert st["help_samples"] >= 1 and ds.here
    for s, i in zip(on[0][2], on[0][1]):
        assert s == f"s{i}"


def _fail_here(i, here):
    if here:
        raise ValueError(f"bad sample {i}")


def test_error_names_the_index(tmp_path, monkeypatch):
    """A sample the training thread ran raises: the batch raises it, wrapped as a worker's,
    naming its index."""
    monkeypatch.setenv("STOKER_HELP", "1")
    ds = Gated(str(tmp_path / "gate"), fail=_fail_here)
    loader = stoker.Loader(ds, batch_size=BATCH, seed=7, num_workers=2, executor="thread")
    ds.ctl["armed"] = True
    try:
        with pytest.raises(ValueError) as e:
            next(iter(loader))
        assert ds.here
        msg = str(e.value)
        assert "training thread" in msg
        assert f"sample {ds.here[0]}" in msg and f"bad sample {ds.here[0]}" in msg
    finally:
        loader.close()


def _fail_some(i, here):
    if i % 7 == 3:
        raise ValueError(f"bad sample {i}")


@pytest.mark.parametrize("executor", ["thread", "auto"])
def test_skip_same(tmp_path, monkeypatch, executor):
    """on_error="skip": the same substitutes whoever loaded the failing samples."""
    kw = dict(shuffle=True, on_error="skip", fail=_fail_some, executor=executor)
    if executor == "auto":
        kw["random_draws"] = True  # (worker processes)
    on, ds, st, _ = run(tmp_path, monkeypatch, True, **kw)
    off, _, _, _ = run(tmp_path, monkeypatch, False, **kw)
    same(on, off)
    assert st["help_samples"] >= 1


class _InterruptOnce:
    def __init__(self):
        self.done = False

    def __call__(self, i, here):
        if here and not self.done:
            self.done = True
            raise KeyboardInterrupt


@pytest.mark.parametrize("executor", ["thread", "auto"])
def test_keyboard_interrupt_keeps_batches(tmp_path, monkeypatch, executor):
    """A KeyboardInterrupt in a sample the training thread runs reaches next(); the loop goes
    on, and every batch comes exactly once, in order, as without help."""
    kw = dict(shuffle=True, executor=executor, random_draws=executor == "auto")
    caught = []
    on, ds, st, info = run(tmp_path, monkeypatch, True, interrupt=caught,
                           fail=_InterruptOnce(), **kw)
    off, _, _, _ = run(tmp_path, monkeypatch, False, **kw)
    assert caught == [True]
    same(on, off)
    exactly_once(on)
    assert len(ds.here) >= 2  # the interrupted sample ran again here


def test_resume_same(tmp_path, monkeypatch):
    """A loader resumed from the state after its first batch (that batch helped) gives the rest
    of the epoch as one that was never stopped, with the training thread helping the resumed
    loader's first batch too (whether it finds a ticket there is left to the machine)."""
    monkeypatch.setenv("STOKER_HELP", "1")
    full, _, _, _ = run(tmp_path, monkeypatch, False, shuffle=True, executor="thread")
    monkeypatch.setenv("STOKER_HELP", "1")
    ds = Gated(str(tmp_path / "gate_a"))
    a = stoker.Loader(ds, batch_size=BATCH, seed=7, num_workers=2, shuffle=True,
                      executor="thread")
    ds.ctl["armed"] = True
    it = iter(a)
    first = next(it)
    state = a.state_dict()
    a.close()
    assert [int(v) for v in first[1]] == full[0][1]
    ds2 = Gated(str(tmp_path / "gate_b"), gate=False)  # (its reset waits for the workers)
    b = stoker.Loader(ds2, batch_size=BATCH, seed=7, num_workers=2, shuffle=True,
                      executor="thread")
    b.load_state_dict(state)
    ds2.ctl["armed"] = True
    try:
        rest = [[int(v) for v in x[1]] for x in b]
    finally:
        b.close()
    assert rest == [x[1] for x in full[1:]]


def _init(worker):
    pass


class Where(Dataset):
    """Sample i: i; notes the indices __getitem__ ran on the training thread with
    get_worker_info() answering (a worker's sample there)."""

    def __init__(self):
        self.here = threading.get_ident(), os.getpid()
        self.seen = []

    def __len__(self):
        return 20

    def __getitem__(self, i):
        if (threading.get_ident(), os.getpid()) == self.here and get_worker_info() is not None:
            self.seen.append(i)
        return i


@pytest.mark.parametrize("kw", [dict(executor="process"), dict(worker_init_fn=_init),
                                dict(num_workers=1, executor="thread")])
def test_never_where_getitem_must_not_run_here(monkeypatch, kw):
    """executor="process" given, a worker_init_fn, or one worker thread (the training thread
    would be a second caller at once): __getitem__ never runs in the training thread for a
    batch. (num_workers=0 runs every sample there, as the DataLoader: test_pyinline.py.)"""
    monkeypatch.setenv("STOKER_HELP", "1")
    ds = Where()
    loader = stoker.Loader(ds, batch_size=4, **{"num_workers": 2, **kw})
    probed = list(ds.seen)  # (the constructor's probe, as without help)
    try:
        assert sorted(int(v) for b in loader for v in b) == list(range(20))
        assert loader.stats()["help_samples"] == 0
    finally:
        loader.close()
    assert ds.seen == probed


def test_allowed_rule(monkeypatch):
    """_pyhelp.allowed, the whole rule: on threads only beside two or more worker threads and
    without global draws (FakeData sets torch's generator in __getitem__: a second caller at
    once mixes pixels); on processes when samples do not depend on where they load."""
    from stoker import _pyhelp
    monkeypatch.setenv("STOKER_HELP", "1")
    allowed = _pyhelp.allowed
    assert allowed("auto", 2, None, "thread", True, False, threads=2)
    assert not allowed("auto", 1, None, "thread", True, False, threads=1)
    assert not allowed("auto", None, None, "thread", True, True, threads=8)
    assert allowed("auto", 1, None, "process", True, True, threads=1)
    assert allowed("auto", 2, None, "process", False, False, threads=2)
    assert not allowed("auto", 2, None, "process", False, True, threads=2)
    assert not allowed("process", 2, None, "process", True, False, threads=2)
    assert not allowed("auto", 2, _init, "thread", True, False, threads=2)
    assert not allowed("auto", 0, None, "thread", True, False, threads=1)
    monkeypatch.setenv("STOKER_HELP", "0")
    assert not allowed("auto", 2, None, "thread", True, False, threads=2)


class Draws(Dataset):
    """Sample i: float32 [3] of i plus torch.rand(3) (a global draw: executor="auto" picks worker
    processes, and each sample is seeded per (seed, epoch, index) wherever it loads), and i."""

    def __len__(self):
        return N

    def __getitem__(self, i):
        return torch.full((3,), float(i)) + torch.rand(3), i


def _all(loader):
    return [(b[0].clone(), [int(v) for v in b[1]]) for b in loader]


def test_first_batch_does_not_wait_for_the_worker_forks(monkeypatch):
    """The pool asks the fork server for its worker processes without waiting for the forks:
    with the fork server stopped (SIGSTOP) right after it took the loader, no worker exists, yet
    the constructor returns and the training thread loads the whole first batch; once the
    server runs again (SIGCONT) the workers load the rest: the same batches as a loader that
    was never stopped. (A build that waits for the forks in the constructor hangs there: the
    watchdog resumes the server after SAFETY_S and the test fails, instead of hanging the run;
    a working build never waits on it.)"""
    from stoker import _procpool
    monkeypatch.setenv("STOKER_HELP", "1")
    ref_loader = stoker.Loader(Draws(), batch_size=BATCH, seed=7, num_workers=2, shuffle=True)
    try:
        ref = _all(ref_loader)
    finally:
        ref_loader.close()
    stopped, fired = [], threading.Event()
    orig = _procpool.Pending.start

    def start(self, probed_here=False):
        server = orig(self, probed_here)
        os.kill(self.fs.pid, signal.SIGSTOP)
        stopped.append(self.fs.pid)
        return server

    def resume():
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)

    def watchdog():
        if not done.wait(SAFETY_S):
            fired.set()
            resume()

    done = threading.Event()
    monkeypatch.setattr(_procpool.Pending, "start", start)
    dog = threading.Thread(target=watchdog, daemon=True)
    dog.start()
    loader = None
    try:
        loader = stoker.Loader(Draws(), batch_size=BATCH, seed=7, num_workers=2, shuffle=True)
        it = iter(loader)
        first = next(it)
        helped = loader.stats()["help_samples"]
        done.set()
        resume()
        got = _all([first])
        del first  # (its ring slot)
        got += _all(it)
        executor = loader.info()["executor"]
    finally:
        done.set()
        resume()
        if loader is not None:
            loader.close()
    assert stopped and not fired.is_set()
    assert executor == "process"
    assert helped == BATCH  # every sample of the first batch loaded in this process
    assert len(got) == len(ref)
    for (xa, ia), (xb, ib) in zip(got, ref):
        assert ia == ib and torch.equal(xa, xb)


def test_fork_server_gone_before_the_forks_is_named(monkeypatch):
    """The fork server dies after taking the loader and before forking its workers (their
    answers still owed): the epoch raises an error naming it, and nothing hangs."""
    from stoker import _procpool
    monkeypatch.setenv("STOKER_HELP", "1")
    orig = _procpool.Pending.start

    def start(self, probed_here=False):
        server = orig(self, probed_here)
        os.kill(self.fs.pid, signal.SIGKILL)
        return server

    monkeypatch.setattr(_procpool.Pending, "start", start)
    loader = stoker.Loader(Draws(), batch_size=BATCH, seed=7, num_workers=2, shuffle=True)
    try:
        assert loader.info()["executor"] == "process"
        with pytest.raises(Exception) as e:
            for _ in loader:
                pass
        assert "worker server (which forks the workers) has exited" in str(e.value)
    finally:
        loader.close()


class ClosesWhileHelping(Dataset):
    """Sample i: (float32 [2] of i, i). Once armed, the training thread's first sample (a
    helped one) has the loader closed while it runs: by another thread (`how` "thread", which
    waits for it to start; the sample waits until close() returned) or by the sample itself
    ("inside", as a signal handler would). Worker threads wait until then, from the start, and
    a batch holds more samples than the probe keeps, so the training thread always runs one."""

    def __init__(self, how):
        self.how = how
        self.main, self.pid = threading.get_ident(), os.getpid()
        # armed and the loader, set after the constructor: in a dict, not assigned attributes,
        # which a pass would take for a changed dataset and read again (waiting for the worker
        # threads' samples, which wait for the close)
        self.ctl = {"armed": False, "loader": None}
        self.inside, self.closed = threading.Event(), threading.Event()

    def __len__(self):
        return 64

    def __getitem__(self, i):
        here = threading.get_ident() == self.main and os.getpid() == self.pid
        if self.ctl["armed"] and here and not self.inside.is_set():
            self.inside.set()
            if self.how == "inside":
                self.ctl["loader"].close()
                self.closed.set()
            self.closed.wait(SAFETY_S)
        elif not here:  # (from the start: the worker threads run before the test arms it)
            self.closed.wait(SAFETY_S)
        return torch.full((2,), float(i)), i


@pytest.mark.parametrize("workers", [2, 0])
@pytest.mark.parametrize("how", ["thread", "inside"])
def test_close_during_a_helped_sample(monkeypatch, how, workers):
    """close() while the training thread runs a sample of the first batch (from another thread,
    or from inside the sample): close() returns, the sample finishes, next() raises that the
    loader is closed, and the loader stays closed; nothing hangs. At num_workers=0 the training
    thread loads every batch (test_pyinline.py): the same."""
    monkeypatch.setenv("STOKER_HELP", "1")
    ds = ClosesWhileHelping(how)
    loader = stoker.Loader(ds, batch_size=16, num_workers=workers,
                           executor="thread" if workers else "auto")
    assert loader.num_workers == workers
    ds.ctl.update(loader=loader, armed=True)
    closer = None
    if how == "thread":
        def close():
            ds.inside.wait(SAFETY_S)
            loader.close()
            ds.closed.set()
        closer = threading.Thread(target=close)
        closer.start()
    try:
        with pytest.raises(stoker.StokerStateError, match="closed"):
            next(iter(loader))
    finally:
        ds.closed.set()
        if closer is not None:
            closer.join(SAFETY_S)
    assert ds.inside.is_set()  # the close came during a helped sample
    assert loader.closed
    with pytest.raises(stoker.StokerStateError, match="closed"):
        next(iter(loader))

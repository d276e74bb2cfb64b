"""Several tickets in flight per worker process (the process executor, python/stoker/_ext/
_procpool.c: a loader thread sends its next samples at once, its worker process runs them back
to back, the replies are taken in order). What the one-ticket path guarantees still holds with
tickets queued behind the one running: a worker killed (or timed out) while running one fails
that sample only, the queued ones run once on the restarted worker; an exception fails its
sample only; every sample is delivered once per epoch. STOKER_PROC_AHEAD=4 fixes four tickets a
run from the pool's start. No verdict depends on time: a sample that must find tickets queued
behind it waits until they wait for its worker (_procpool.waiting_bytes), an event, not a
sleep."""
import os
import random
import signal

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import Dataset  # noqa: E402

import stoker  # noqa: E402
from stoker import _procpool, _pyworker  # noqa: E402

from test_pydataset import _epoch_through_timeouts  # noqa: E402

N = 64
BATCH = 16
AHEAD = 4
# Batches are taken in runs of AHEAD tickets from row 0 (STOKER_PROC_AHEAD: a thread's first run
# too; the training thread loads part of the first batch, which may cut its runs): row 4 of
# batch 3 starts a run of four.
TARGET = 3 * BATCH + AHEAD
assert _pyworker.PROBE_SAMPLES < TARGET  # the constructor's probe runs none of the run
TICKET_BYTES = 48  # a ticket for a sample of one fixed leaf: its 40-byte header and one offset


@pytest.fixture(autouse=True)
def four_ahead(monkeypatch):
    monkeypatch.setenv("STOKER_PROC_AHEAD", str(AHEAD))


def _queued_behind(n):
    """Wait until n more tickets wait for this worker process (the thread sends a run's tickets
    at once; bounded by pytest-timeout)."""
    while _procpool.waiting_bytes() < n * TICKET_BYTES:
        pass
        os.sched_yield()


def _log(path, i):
    """One line a call: the worker's pid, the index and the first draw of the sample's seeded
    generator (the same for every call of one sample in one epoch, another in the next)."""
    with open(path, "a") as f:
        f.write(f"{os.getpid()} {i} {random.random()!r}\n")


def _calls(path):
    """{(index, draw): [pids]}: each call of a sample in an epoch."""
    out = {}
    with open(path) as f:
        for line in f:
            pid, i, draw = line.split()
            out.setdefault((int(i), draw), []).append(int(pid))
    return out


class Logged(Dataset):
    """Sample i is i; every call logged (_log). At `at` (TARGET, the first of a run), the first
    time with the rest of its run queued behind it (`behind` tickets; its process named in
    `marker`): `how` ("kill": SIGKILL its own process; "hang": never return; "raise":
    ValueError, then every time)."""

    def __init__(self, log, marker, how, at=TARGET, behind=AHEAD - 1):
        self.log, self.marker, self.how = log, marker, how
        self.at, self.behind = at, behind

    def __len__(self):
        return N

    def __getitem__(self, i):
        _log(self.log, i)
        first = i == self.at and not os.path.exists(self.marker)
        if first:  # (the marker names epoch 0's process, whatever later epochs prefetch)
            _queued_behind(self.behind)
            with open(self.marker + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.replace(self.marker + ".tmp", self.marker)
        if first or (i == self.at and self.how == "raise"):
            if self.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if self.how == "hang":
                r, _ = os.pipe()
                os.read(r, 1)  # nobody writes: never returns
            raise ValueError(f"bad sample {i}")
        return i


class LoggedPair(Logged):
    """Logged's samples as (i, tensor([i, i])): a tuple of a number and a tensor, which the worker
    process's C loop writes into the ring itself (_ext/_ticketloop.c; Logged's bare int goes
    through Python's _procpool._answer)."""

    def __getitem__(self, i):
        i = super().__getitem__(i)
        return i, torch.full((2,), i)


class _Firsts:
    """A loader's batches, each as its first field (a LoggedPair batch's indices) and checked
    against its second."""

    def __init__(self, loader):
        self.it = iter(loader)

    def __iter__(self):
        return self

    def __next__(self):
        b = next(self.it)
        if isinstance(b, list):
            assert torch.equal(b[1], b[0][:, None].expand(-1, 2)), b
            return b[0]
        return b


def _epoch(loader):
    """One pass going on after each failed batch: (samples delivered, error texts)."""
    return _epoch_through_timeouts(_Firsts(loader), (stoker.StokerIOError, ValueError))


@pytest.mark.parametrize("how", ["kill", "hang"])
def test_worker_lost_with_tickets_queued_loses_and_repeats_nothing(tmp_path, how):
    log, marker = str(tmp_path / "log"), str(tmp_path / "marker")
    loader = stoker.Loader(Logged(log, marker, how), batch_size=BATCH, num_workers=2,
                           executor="process", timeout=20 if how == "hang" else 0)
    try:
        got, errors = _epoch(loader)
        dead = int(open(marker).read())
        assert len(errors) == 1, errors
        assert f"__getitem__({TARGET})" in errors[0] if how == "hang" else \
            f"sample {TARGET}" in errors[0] and "signal 9" in errors[0]
        bad = range(3 * BATCH, 4 * BATCH)  # the failed sample's batch
        assert got == [i for i in range(N) if i not in bad]
        assert loader.stats()["worker_deaths"] == 1
        # the three queued behind it ran once, on the restarted worker, and nothing twice
        calls = _calls(log)
        epoch0 = {}
        for (i, draw), pids in calls.items():
            epoch0.setdefault(i, []).append(pids)
        for i in range(_pyworker.PROBE_SAMPLES, N):  # (the constructor's probe ran the first)
            assert len(epoch0[i][0]) == 1, (i, epoch0[i])  # no sample called twice in an epoch
        for j in range(TARGET + 1, TARGET + AHEAD):
            assert epoch0[j][0] != [dead], (j, epoch0[j])
        assert sorted(int(v) for b in loader for v in b) == list(range(N))  # next epoch whole
    finally:
        loader.close()


@pytest.mark.parametrize("cls", [Logged, LoggedPair])
def test_worker_killed_with_replies_held_back_fails_only_its_sample(tmp_path, cls):
    """Without timeout=, a worker holds its replies back while more tickets of its run wait
    (_ext/_ticketloop.c hold: one write for the run, not a wake-up of the loader's thread a
    sample). Killed at the third ticket of a run of four, it has run the two before it
    and held their replies: those samples wrote their seed into their rows, so they count as
    done (never run again) and the death names the sample it was running; the fourth runs once,
    on the restarted worker. Without the seeds, the first held ticket would be blamed and the one
    after it run twice."""
    log, marker = str(tmp_path / "log"), str(tmp_path / "marker")
    last = TARGET + AHEAD - 2
    loader = stoker.Loader(cls(log, marker, "kill", at=last, behind=1), batch_size=BATCH,
                           num_workers=2, executor="process")
    try:
        got, errors = _epoch(loader)
        dead = int(open(marker).read())
        assert len(errors) == 1 and f"sample {last} (epoch 0)" in errors[0] and \
            "signal 9" in errors[0], errors
        assert got == [i for i in range(N) if not 3 * BATCH <= i < 4 * BATCH]
        assert loader.stats()["worker_deaths"] == 1
        calls = _calls(log)
        for j in range(TARGET, last):  # run once, by the worker that died, and not again
            (pids,) = [p for (i, _), p in calls.items() if i == j][:1]  # epoch 0's
            assert pids == [dead], (j, pids)
        (pids,) = [p for (i, _), p in calls.items() if i == last + 1][:1]
        assert len(pids) == 1 and pids != [dead], pids  # the one behind it: once, elsewhere
        assert sorted(int(v) for b in _Firsts(loader) for v in b) == list(range(N))  # whole
    finally:
        loader.close()


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_exception_in_the_middle_of_a_run(tmp_path, on_error):
    log, marker = str(tmp_path / "log"), str(tmp_path / "marker")
    loader = stoker.Loader(Logged(log, marker, "raise"), batch_size=BATCH, num_workers=2,
                           executor="process", on_error=on_error)
    try:
        got, errors = _epoch(loader)
        if on_error == "raise":
            assert len(errors) == 1
            assert f"bad sample {TARGET}" in errors[0]
            assert got == [i for i in range(N) if not 3 * BATCH <= i < 4 * BATCH]
        else:  # its substitute, the next record, is a ticket sent after the queued ones
            assert errors == []
            assert sorted(got) == sorted([i for i in range(N) if i != TARGET] + [TARGET + 1])
            assert loader.stats()["skipped"] == 1
        assert loader.stats()["worker_deaths"] == 0
        # the samples queued behind it ran in the same process, once
        pid = int(open(marker).read())
        calls = _calls(log)
        for j in range(TARGET + 1, TARGET + AHEAD):
            (pids,) = [p for (i, _), p in calls.items() if i == j][:1]  # epoch 0's
            assert pids[0] == pid and pids.count(pid) == (2 if j == TARGET + 1 and
                                                          on_error == "skip" else 1)
    finally:
        loader.close()


class Tagged(Dataset):
    """(i, "s<i>"): a fixed leaf and an object leaf (its pickle crosses the socket)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i, f"s{i}"


def test_exactly_once_over_epochs_with_tickets_ahead():
    n = 203
    loader = stoker.Loader(Tagged(n), batch_size=BATCH, num_workers=2, executor="process",
                           shuffle=True, seed=5)
    try:
        for _ in range(3):
            seen = []
            for idx, names in loader:
                assert list(names) == [f"s{int(i)}" for i in idx]
                seen += idx.tolist()
            assert sorted(seen) == list(range(n))
        assert loader.stats()["worker_deaths"] == 0
    finally:
        loader.close()


class Rows(Dataset):
    """(a [64] float32 row full of i, i): a row that a stale write (a ticket of a run cut short
    by a reset, landing after the ring reused its row) would leave disagreeing with its label."""

    def __len__(self):
        return 150

    def __getitem__(self, i):
        return torch.full((64,), float(i)), i


def test_resets_with_tickets_in_flight_leave_no_stale_rows():
    """Resumes (load_state_dict) on a running loader cut the threads' runs short, tickets sent:
    those are waited for before the ring's rows are reused, the rest are dropped."""
    loader = stoker.Loader(Rows(), batch_size=BATCH, num_workers=2, executor="process",
                           shuffle=True, seed=7)
    try:
        it = iter(loader)
        next(it)
        state = loader.state_dict()
        expected = []
        for x, y in it:
            expected += y.tolist()
        for _ in range(5):
            it = iter(loader)
            next(it)
            next(it)  # the workers are filling the next batches now
            loader.load_state_dict(state)
            got = []
            for x, y in loader:
                assert torch.equal(x, y.to(torch.float32)[:, None].expand(-1, 64))
                got += y.tolist()
            assert got == expected
        assert loader.stats()["worker_deaths"] == 0
    finally:
        loader.close()

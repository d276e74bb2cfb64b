"""Nothing lost to a signal or to a second thread (issue 30, items 1 and 8).

A KeyboardInterrupt caught by the training loop, and iteration resumed: the batch next() was
waiting for when the signal came is delivered by the next call, whatever the moment the signal
lands (while waiting, at the moment the batch completes, while the batch is being converted).
The moment is made by test hooks, never by timing: `_set_debug_signal(n)` raises SIGINT on the
consumer thread when its wait returns batch number n (the signal arrived in the same poll step
in which the batch completed), and a converter that raises once stands for a signal during the
conversion to tensors.

state_dict() from another thread while the training thread iterates answers at once, never
raises in either thread, and always gives a batch boundary the training thread has reached."""
import signal
import threading

import pytest

import stoker
from conftest import SMALL_N, indices


def make(data, batch_size, **kw):
    kw.setdefault("rank", 0)
    kw.setdefault("world_size", 1)
    return stoker.Loader(data, batch_size, **kw)


@pytest.fixture
def sigint_raises():
    """SIGINT raises KeyboardInterrupt in this process for the test (as in a plain script)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def _resume_through(it, log):
    """Iterate to the end of the pass, catching KeyboardInterrupt as a training loop that
    checkpoints on Ctrl-C would; `log` gets ("batch", indices) and ("interrupt", state)."""
    loader = it._loader
    while True:
        try:
            b = next(it)
        except StopIteration:
            return
        except KeyboardInterrupt:
            log.append(("interrupt", loader.state_dict()["consumed"]))
            continue
        log.append(("batch", indices(b)))


@pytest.mark.parametrize("delay", [0, 1], ids=["direct", "helper"])
def test_signal_as_the_batch_completes_costs_nothing(ds_small, sigint_raises, delay):
    """SIGINT pending at the moment next()'s wait returns batch 3: KeyboardInterrupt, with the
    state still at 3 batches; the next call delivers batch 3; the epoch is whole."""
    loader = make(ds_small, 10, num_workers=2)
    if delay:
        loader._set_debug_delay(delay)  # next() runs on the helper thread (the other path)
    loader._core._set_debug_signal(3)
    log = []
    _resume_through(iter(loader), log)
    got = [i for kind, v in log if kind == "batch" for i in v]
    assert [e for e in log if e[0] == "interrupt"] == [("interrupt", 30)]
    assert log[3] == ("interrupt", 30) and log[4] == ("batch", list(range(30, 40)))
    assert got == list(range(SMALL_N))
    loader.close()


def test_signal_during_conversion_costs_nothing(ds_small, sigint_raises):
    """A KeyboardInterrupt raised while the batch becomes tensors (after the C loader handed it
    over): the batch goes back, the state does not count it, the next call delivers it."""
    loader = make(ds_small, 10, num_workers=2)
    convert, log, fired = loader._convert, [], []

    def interrupted_once(t):
        if len(log) == 1 and not fired:  # inside the 2nd batch's conversion
            fired.append(1)
            raise KeyboardInterrupt
        return convert(t)

    loader._convert = interrupted_once
    _resume_through(iter(loader), log)
    got = [i for kind, v in log if kind == "batch" for i in v]
    assert [e for e in log if e[0] == "interrupt"] == [("interrupt", 10)]
    assert got == list(range(SMALL_N))
    loader.close()


def test_signal_then_set_epoch_drops_the_held_batch(ds_small, sigint_raises):
    """A batch held back by a signal is dropped by a jump (set_epoch): the jump's epoch starts
    at its first batch, and the ring slot the held batch had is free again."""
    loader = make(ds_small, 10, num_workers=1, prefetch=1)
    loader._core._set_debug_signal(1)
    it = iter(loader)
    assert indices(next(it)) == list(range(10))
    with pytest.raises(KeyboardInterrupt):
        next(it)
    assert loader.state_dict()["consumed"] == 10
    loader.set_epoch(4)
    first = [indices(b) for b in loader]
    assert first[0] == list(range(10)) and len(first) == 10
    assert loader.state_dict()["epoch"] == 5
    loader.close()


@pytest.mark.parametrize("delay", [0, 1], ids=["ready", "waiting"])
def test_state_dict_from_a_checkpoint_thread(ds_small, delay):
    """A thread taking state_dict() in a tight loop while the training thread iterates: no
    exception in either, and every state a batch boundary the training thread reached: its
    global position (epoch * N + consumed) lies between the samples the training thread had
    before the call and one batch more than it had after it (the batch on its way into its
    hands), and never goes backwards. "ready": batches are ready when asked for; "waiting":
    each next() waits (1 ms per batch on the helper path), so the checkpoint thread runs while
    the training thread is inside next(), where a state_dict() that entered the loader as a
    consumer call raised in one thread or the other (issue 30, item 8). The training thread
    runs epochs until the checkpoint thread has taken 200 states, 20 of them while a next()
    was pending when waiting: events, not a number of epochs that a loaded machine might end
    before the other thread ever runs."""
    loader = make(ds_small, 4, num_workers=2)
    if delay:
        loader._set_debug_delay(delay)
    delivered = [0]  # samples the training thread has got, over all epochs
    stop = threading.Event()
    errors, seen, during = [], [], [0]

    def checkpoint():
        while not stop.is_set():
            before, pending = delivered[0], loader._core.pending
            try:
                st = loader.state_dict()
            except Exception as e:  # noqa: BLE001 (any exception fails the test)
                errors.append(e)
                return
            during[0] += pending and loader._core.pending
            seen.append((st["epoch"] * SMALL_N + st["consumed"], before, delivered[0]))

    def enough():
        return len(seen) >= 200 and (not delay or during[0] >= 20)

    t = threading.Thread(target=checkpoint)
    t.start()
    got, epochs = [], 0
    try:
        while not enough() and not errors and epochs < 2000:
            for b in loader:
                got.extend(indices(b))
                delivered[0] += len(b["index"])
            epochs += 1
    except Exception as e:  # noqa: BLE001
        errors.append(e)
    finally:
        stop.set()
        t.join()
    loader.close()
    assert not errors, errors[:3]
    assert enough(), (len(seen), during[0], epochs)
    assert sorted(got) == sorted(list(range(SMALL_N)) * epochs)
    last = 0
    for pos, before, after in seen:
        assert pos % 4 == 0 and before <= pos <= after + 4, (pos, before, after)
        assert pos >= last, (pos, last)
        last = pos


def test_state_dict_while_another_thread_waits_in_next(ds_small):
    """state_dict() answers while the consumer thread is blocked inside next() (a batch held
    by the test hook until the checks are done), with the position before that batch; the
    consumer calls stay one thread at a time."""
    loader = make(ds_small, 10, num_workers=1)
    it = iter(loader)
    assert indices(next(it)) == list(range(10))
    loader._set_debug_delay(10 ** 9)  # held until _set_debug_delay(0) below
    got = []
    t = threading.Thread(target=lambda: got.append(indices(next(it))))
    t.start()
    try:
        while not loader._core.pending:  # the other thread is inside next()
            t.join(0.005)
        assert loader.state_dict()["consumed"] == 10
        with pytest.raises(RuntimeError, match="another thread"):
            loader._core.set_epoch(3)  # a call that moves the position is still refused
        assert t.is_alive() and not got  # still waiting: the checks ran during its next()
    finally:
        loader._set_debug_delay(0)  # the batch goes on (also when a check above failed)
        t.join()
    assert got == [list(range(10, 20))]
    assert loader.state_dict()["consumed"] == 20
    loader.close()

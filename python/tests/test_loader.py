"""stoker.Loader against the semantics of DESIGN.md and the PyTorch/torchdata checklist
(reference/semantics.md A, C, D, F, G, I): values against the records written, exactly-once
epochs, determinism, epoch advance, resume, ring pressure, errors and bad arguments."""
import gc
import json
import math
import os
import re
import threading
import warnings

import numpy as np
import pytest
import torch

import stoker
from conftest import (MAIN_N, SMALL_N, bf16_bits, flat, indices, payload, record, run_epoch,
                      write_dataset)


def make(data, batch_size, **kw):
    kw.setdefault("rank", 0)
    kw.setdefault("world_size", 1)
    return stoker.Loader(data, batch_size, **kw)


# ---- values, shapes, dtypes ----

def check_batch(b):
    """Every field of a batch against the record it claims to be (its index)."""
    idx = b["index"].tolist()
    n = len(idx)
    assert b["index"].dtype == torch.int64
    assert b["data"].dtype == torch.uint8 and b["data"].shape[0] == n
    assert b["data_lengths"].dtype == torch.int64
    assert b["label"].dtype == torch.int64 and b["label"].shape == (n,)
    assert b["score"].dtype == torch.float32 and b["score"].shape == (n,)
    assert b["vec"].dtype == torch.float32 and b["vec"].shape == (n, 2, 3)
    assert b["half"].dtype == torch.float16 and b["half"].shape == (n, 4)
    assert b["bf"].dtype == torch.bfloat16 and b["bf"].shape == (n, 2)
    for j, i in enumerate(idx):
        want = record(i)
        length = int(b["data_lengths"][j])
        assert bytes(b["data"][j, :length].numpy()) == want["data"]
        assert int(b["label"][j]) == want["label"]
        assert float(b["score"][j]) == want["score"]
        np.testing.assert_array_equal(b["vec"][j].numpy(), want["vec"])
        np.testing.assert_array_equal(b["half"][j].numpy(), want["half"])
        assert b["bf"][j].float().tolist() == [float(i % 64), -float(i % 32)]
    assert b.bytes("data") == [payload(i) for i in idx]


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_values_and_order_without_shuffle(ds_main, workers):
    loader = make(ds_main, 64, num_workers=workers, prefetch=16)  # room to hold every batch
    assert len(loader) == math.ceil(MAIN_N / 64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batches = list(loader)
    assert len(batches) == len(loader)
    assert [len(b["index"]) for b in batches] == [64] * 15 + [40]
    assert flat([indices(b) for b in batches]) == list(range(MAIN_N))
    for k, b in enumerate(batches):
        assert (b.epoch, b.number) == (0, k)
        check_batch(b)
    loader.close()


def test_keys_and_batch_object(ds_small):
    with make(ds_small, 10) as loader:
        b = next(iter(loader))
        assert isinstance(b, stoker.Batch) and isinstance(b, dict)
        assert list(b) == ["data", "data_lengths", "label", "score", "vec", "half", "bf", "index"]
        assert "epoch=0" in repr(b)


@pytest.mark.parametrize("n,bs,drop_last,sizes", [
    (SMALL_N, 7, False, [7] * 14 + [2]),
    (SMALL_N, 7, True, [7] * 14),
    (SMALL_N, 100, False, [100]),
    (SMALL_N, 1000, False, [100]),
    (SMALL_N, 1000, True, []),
])
def test_batch_counts(ds_small, n, bs, drop_last, sizes):
    loader = make(ds_small, bs, drop_last=drop_last)
    assert len(loader) == len(sizes)
    for _ in range(2):  # also the next epoch (an empty epoch must not hang)
        assert [len(b) for b in run_epoch(loader)] == sizes


# ---- shuffle, seeds, epochs ----

@pytest.mark.parametrize("workers", [1, 2, 4])
def test_shuffle_exactly_once_per_epoch(ds_main, workers):
    loader = make(ds_main, 48, shuffle=True, seed=11, num_workers=workers)
    epochs = [flat(run_epoch(loader)) for _ in range(3)]
    for e, order in enumerate(epochs):
        assert sorted(order) == list(range(MAIN_N)), f"epoch {e} is not a permutation"
        assert order == stoker.epoch_order(MAIN_N, True, 11, e)
    assert epochs[0] != epochs[1] != epochs[2]
    assert epochs[0] != list(range(MAIN_N))


def test_same_seed_same_order_any_thread_count(ds_main):
    a = make(ds_main, 32, shuffle=True, seed=5, num_workers=1)
    b = make(ds_main, 32, shuffle=True, seed=5, num_workers=4)
    c = make(ds_main, 32, shuffle=True, seed=6, num_workers=2)
    for _ in range(2):
        ea, eb, ec = run_epoch(a), run_epoch(b), run_epoch(c)
        assert ea == eb
        assert ea != ec


def test_epochs_advance_by_themselves_and_set_epoch(ds_small):
    loader = make(ds_small, 16, shuffle=True, seed=2)
    assert loader.epoch == 0
    e0 = flat(run_epoch(loader))
    assert loader.epoch == 1
    e1 = flat(run_epoch(loader))
    assert e0 != e1
    other = make(ds_small, 16, shuffle=True, seed=2)
    other.set_epoch(1)
    assert flat(run_epoch(other)) == e1
    other.set_epoch(0)
    assert flat(run_epoch(other)) == e0
    # set_epoch(e) before each epoch, as with DistributedSampler, changes nothing
    third = make(ds_small, 16, shuffle=True, seed=2)
    got = []
    for epoch in range(2):
        third.set_epoch(epoch)
        got.append(flat(run_epoch(third)))
    assert got == [e0, e1]


def test_abandoned_pass_goes_to_next_epoch(ds_small):
    loader = make(ds_small, 10, shuffle=True, seed=9)
    for k, b in enumerate(loader):
        if k == 3:
            break
    del b
    rest = flat(run_epoch(loader))
    assert rest == stoker.epoch_order(SMALL_N, True, 9, 1)
    assert loader.epoch == 2
    # a pass broken after its last batch (before StopIteration) also moves on
    for k, b in enumerate(loader):
        if k == len(loader) - 1:
            break
    del b
    assert flat(run_epoch(loader)) == stoker.epoch_order(SMALL_N, True, 9, 3)


def test_new_iterator_supersedes_old(ds_small):
    """A new iter() starts the next pass on the loader; the old iterator's pass goes on from a
    second loader resumed where it was ended (the DataLoader's two live iterators are two
    passes), its batches those the loader would have given, and the loader's own position does
    not move. set_epoch() ends a pass for good: the old iterator's next() says so
    (StokerStateError naming the call), never a silent StopIteration that would end a loop as
    if the epoch were over; an iterator that reached its end stays at StopIteration."""
    loader = make(ds_small, 10, shuffle=True, seed=7)
    whole = [indices(b) for b in make(ds_small, 10, shuffle=True, seed=7)]
    it1 = iter(loader)
    first = indices(next(it1))
    it2 = iter(loader)  # epoch 1 (epoch 0 was left mid-way)
    assert indices(next(it2)) == stoker.epoch_order(SMALL_N, True, 7, 1)[:10]
    rest = [indices(b) for b in it1]  # epoch 0's rest, from a second loader
    assert [first] + rest == whole
    assert it1._rest is None  # the second loader closed at the pass's end
    state = loader.state_dict()
    assert (state["epoch"], state["consumed"]) == (1, 10)
    loader.set_epoch(3)
    with pytest.raises(stoker.StokerStateError, match=r"ended by a later set_epoch\(\)"):
        next(it2)
    done = iter(loader)
    assert sum(1 for _ in done) == len(loader)
    assert sum(1 for _ in loader) == len(loader)  # a later pass
    with pytest.raises(StopIteration):
        next(done)


# ---- resume ----

def _take(loader, k):
    it = iter(loader)
    return [indices(next(it)) for _ in range(k)]


@pytest.mark.parametrize("k", [0, 1, 6, 12, 13])
def test_state_dict_resumes_exactly(ds_small, k):
    full_loader = make(ds_small, 8, shuffle=True, seed=77, num_workers=2)
    full = run_epoch(full_loader)
    next_epoch = run_epoch(full_loader)
    assert len(full) == 13

    loader = make(ds_small, 8, shuffle=True, seed=77, num_workers=3)
    head = _take(loader, k)
    state = loader.state_dict()
    snapshot = json.dumps(state)
    _take(loader, 1) if k < 13 else None  # moving on does not change the snapshot
    assert json.dumps(state) == snapshot
    state = json.loads(json.dumps(state))  # JSON round trip
    loader.close()

    resumed = make(ds_small, 8, shuffle=True, seed=123, num_workers=1)  # seed from the state
    resumed.load_state_dict(state)
    assert resumed.state_dict() == state
    tail = run_epoch(resumed)
    assert head + tail == full
    assert run_epoch(resumed) == next_epoch


def test_state_after_epoch_resumes_to_next_epoch(ds_small):
    loader = make(ds_small, 8, shuffle=True, seed=4)
    run_epoch(loader)
    state = loader.state_dict()
    e1 = run_epoch(loader)
    resumed = make(ds_small, 8, shuffle=True, seed=4)
    resumed.load_state_dict(json.dumps(state))  # the JSON text works too
    assert run_epoch(resumed) == e1


def test_initial_state_replays_everything(ds_small):
    a = make(ds_small, 8, shuffle=True, seed=1)
    state = a.state_dict()
    e0, e1 = run_epoch(a), run_epoch(a)
    b = make(ds_small, 8, shuffle=True, seed=1)
    b.load_state_dict(state)
    assert run_epoch(b) == e0 and run_epoch(b) == e1


def test_resume_onto_another_world_size(ds_small):
    """Two ranks take 3 steps, then three ranks finish the epoch: every record is seen, the
    only repeats are the padding of the last split."""
    counts = np.zeros(SMALL_N, np.int64)
    states = []
    for r in range(2):
        loader = make(ds_small, 8, shuffle=True, seed=77, rank=r, world_size=2)
        for i in flat(_take(loader, 3)):
            counts[i] += 1
        states.append(loader.state_dict())
    assert states[0] == states[1] and states[0]["consumed"] == 48
    per_rank = []
    for r in range(3):
        loader = make(ds_small, 8, shuffle=True, seed=0, rank=r, world_size=3)
        loader.load_state_dict(states[0])
        got = flat(run_epoch(loader))
        per_rank.append(len(got))
        for i in got:
            counts[i] += 1
    assert per_rank == [18, 18, 18]  # ceil(52 / 3)
    assert counts.min() == 1
    assert counts.sum() - SMALL_N == 2  # padding


def test_state_from_another_dataset_is_refused(ds_small, ds_main):
    a = make(ds_main, 8)
    b = make(ds_small, 8)
    with pytest.raises(stoker.StokerInvalidError, match="another dataset") as e:
        b.load_state_dict(a.state_dict())
    assert isinstance(e.value, ValueError)
    with pytest.raises(stoker.StokerInvalidError, match="shuffle"):
        make(ds_small, 8, shuffle=True).load_state_dict(b.state_dict())
    with pytest.raises(stoker.StokerInvalidError):
        b.load_state_dict({"hello": 1})
    with pytest.raises(stoker.StokerInvalidError):
        b.load_state_dict([1, 2])
    assert len(run_epoch(b)) == 13  # still usable


def test_a_corrupt_or_edited_state_is_refused_naming_its_key(ds_small):
    # Each of these was accepted or called "missing" before: a position past the epoch's end
    # (an empty epoch, silently), a fraction cut to its whole part, a string or a negative.
    b = make(ds_small, 8, rank=0, world_size=3)
    state = b.state_dict()
    assert state["world"] == 3
    for key, value, says in [("consumed", 10**9, "past the epoch's end"),
                             ("consumed", 103, "past the epoch's end (102 samples with the"),
                             ("consumed", "5", "\"consumed\" is \"5\", not a whole number"),
                             ("consumed", -1, "\"consumed\" is -1"),
                             ("seed", 1.5, "\"seed\" is 1.5"),
                             ("epoch", None, "\"epoch\" is null"),
                             ("world", 0, "not a world size")]:
        with pytest.raises(stoker.StokerInvalidError, match=re.escape(says)):
            b.load_state_dict(dict(state, **{key: value}))
    with pytest.raises(stoker.StokerInvalidError, match="no \"consumed\""):
        b.load_state_dict({k: v for k, v in state.items() if k != "consumed"})
    # the ranks' padding is inside the epoch; a state from before "world" was saved still loads
    b.load_state_dict(dict(state, consumed=102))
    old = {k: v for k, v in state.items() if k != "world"}
    b.load_state_dict(dict(old, consumed=96))
    # rank 0's share of positions 96-101 (the last two are padding): one batch of 2
    assert [len(x) for x in run_epoch(b)] == [2]
    with pytest.raises(stoker.StokerInvalidError, match="past the epoch's end"):
        make(ds_small, 8).load_state_dict(dict(state, consumed=102, world=1))


# ---- distributed split ----

@pytest.mark.parametrize("world", [2, 3, 4, 7])
def test_ranks_cover_dataset_once(ds_small, world):
    counts = np.zeros(SMALL_N, np.int64)
    lengths = set()
    for r in range(world):
        loader = make(ds_small, 5, shuffle=True, seed=3, rank=r, world_size=world)
        got = flat(run_epoch(loader))
        lengths.add((len(got), len(loader)))
        for i in got:
            counts[i] += 1
    per = math.ceil(SMALL_N / world)
    assert lengths == {(per, math.ceil(per / 5))}
    assert counts.min() == 1
    assert counts.sum() == per * world


def test_rank_from_environment(ds_small, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    loader = stoker.Loader(ds_small, 5)
    assert (loader.rank, loader.world_size) == (1, 4)
    assert flat(run_epoch(loader))[:5] == [5, 6, 7, 8, 9]


# ---- lifetime of batches ----

def test_tensors_stay_valid_after_advance_and_close(ds_small):
    loader = make(ds_small, 10, prefetch=3)
    it = iter(loader)
    first = next(it)
    image = first["data"]
    label = first["label"]
    for _ in range(3):
        next(it)
    loader.close()
    del first
    gc.collect()
    assert label.tolist() == [i * 7 for i in range(10)]
    assert bytes(image[3, :int(1 + 3 * 37 % 300)].numpy()) == payload(3)
    with pytest.raises(stoker.StokerStateError):
        iter(loader)
    with pytest.raises(stoker.StokerStateError, match="closed"):
        next(it)  # the epoch did not end: the pass does not end as if it had (issue 16)


def test_holding_batches_does_not_deadlock(ds_small):
    loader = make(ds_small, 4, prefetch=2, num_workers=2)
    with pytest.warns(RuntimeWarning, match="prefetch=2") as rec:
        batches = list(loader)  # holds all 25 batches
        batches2 = list(loader)
    assert len(rec) == 1  # warned once
    assert flat([indices(b) for b in batches]) == list(range(SMALL_N))
    assert flat([indices(b) for b in batches2]) == list(range(SMALL_N))
    for b in batches[:3] + batches[-3:]:
        check_batch(b)
    assert sum(not b.attached for b in batches) >= 20  # copied out of the ring
    assert loader.stats()["batches"] == 50


def test_holding_tensors_does_not_deadlock(ds_small):
    """Tensors kept outside their Batch pin the slot: the loader starts a fresh ring."""
    loader = make(ds_small, 4, prefetch=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        labels = [b["label"] for b in loader]
        idx = [b["index"] for b in loader]
    assert torch.cat(labels).tolist() == [i * 7 for i in range(SMALL_N)]
    assert torch.cat(idx).tolist() == list(range(SMALL_N))
    st = loader.stats()
    assert (st["batches"], st["samples"]) == (50, 2 * SMALL_N)


def test_default_loop_needs_no_copy(ds_small):
    loader = make(ds_small, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for epoch in range(3):
            for b in loader:  # the loop variable holds one batch while the next is asked for
                x = b["vec"].sum()  # noqa: F841
    assert b.attached


def test_detach(ds_small):
    loader = make(ds_small, 10)
    b = next(iter(loader))
    before = b["vec"].clone()
    ptr = b["vec"].data_ptr()
    assert b.detach() is b
    assert b["vec"].data_ptr() != ptr and torch.equal(b["vec"], before)
    assert not b.attached


# ---- errors ----

def corrupt(path, marker):
    """Flip a byte in the payload that starts with `marker`."""
    with open(path, "r+b") as f:
        data = f.read()
        pos = data.index(marker)
        f.seek(pos + 2)
        f.write(bytes([data[pos + 2] ^ 0x5A]))


def _corrupt_dataset(tmp_path):
    def make_record(i):
        return {"data": b"REC%05d" % i + bytes(40), "label": i}
    d = write_dataset(tmp_path / "bad", 100, shards=2, fields={"data": "bytes", "label": "int64"},
                      make=make_record)
    corrupt(os.path.join(d, "shard-00000.stk"), b"REC00042")
    return d


def test_corrupt_record_raises_naming_shard_and_record(tmp_path):
    d = _corrupt_dataset(tmp_path)
    loader = make(d, 10, num_workers=3)
    for epoch in range(2):
        it = iter(loader)
        got, errors = [], []
        while True:
            try:
                b = next(it)
            except StopIteration:
                break
            except stoker.StokerFormatError as e:
                errors.append(str(e))
                continue
            got.extend(indices(b))
        assert len(errors) == 1
        assert "shard-00000.stk" in errors[0] and "record 42" in errors[0]
        assert "checksum" in errors[0]
        assert got == list(range(40)) + list(range(50, 100))
    assert loader.stats()["errors"] == 2


def test_corrupt_record_in_a_for_loop_then_resume(tmp_path):
    d = _corrupt_dataset(tmp_path)
    loader = make(d, 10)
    seen = []
    with pytest.raises(stoker.Error, match="record 42"):
        for b in loader:
            seen.extend(indices(b))
    del b
    assert seen == list(range(40))
    # a new pass is the next epoch (the record is still corrupt): the loader is still usable
    it, good = iter(loader), []
    for _ in range(len(loader)):
        try:
            good.extend(indices(next(it)))
        except stoker.StokerFormatError:
            pass
    assert good == list(range(40)) + list(range(50, 100))
    assert loader.epoch == 1


def test_on_error_skip_counts(tmp_path):
    d = _corrupt_dataset(tmp_path)
    loader = make(d, 10, on_error="skip")
    got = flat(run_epoch(loader))
    assert len(got) == 100 and 42 not in got and got.count(43) == 2
    assert loader.stats()["skipped"] == 1
    assert loader.stats()["errors"] == 0


# ---- bad arguments ----

def test_bad_arguments(ds_small, tmp_path):
    with pytest.raises(ValueError, match="batch_size"):
        make(ds_small, 0)
    with pytest.raises(ValueError, match="batch_size"):
        make(ds_small, True)
    with pytest.raises(ValueError, match=r"batch_size=1099511627776 is too large \(at most "):
        make(ds_small, 2**40)
    # the core says so too (no "must be >= 1" for a size that is too large)
    with pytest.raises(ValueError, match="batch size 1099511627776 is too large"):
        stoker._core.Loader(stoker.Dataset(ds_small), batch_size=2**40, rank=0, world=1)
    with pytest.raises(ValueError, match="num_workers"):
        make(ds_small, 4, num_workers=-1)
    with pytest.raises(stoker.StokerLimitError, match="memory budget of 1000 bytes exceeded"):
        make(ds_small, 4, num_workers=2, memory_budget=1000)
    with make(ds_small, 4, num_workers=2, memory_budget=2**30) as loader:
        assert len(next(iter(loader))["label"]) == 4
    with pytest.raises(ValueError, match="prefetch"):
        make(ds_small, 4, prefetch=0)
    with pytest.raises(ValueError, match="on_error"):
        make(ds_small, 4, on_error="ignore")
    with pytest.raises(ValueError, match="rank"):
        stoker.Loader(ds_small, 4, rank=4, world_size=4)
    with pytest.raises(ValueError, match="rank"):
        stoker.Loader(ds_small, 4, rank=-1, world_size=4)
    with pytest.raises(ValueError, match="seed"):
        make(ds_small, 4, seed=-1)
    with pytest.raises(stoker.StokerIOError) as e:
        make(str(tmp_path / "missing.stk"), 4)
    assert isinstance(e.value, OSError) and "missing.stk" in str(e.value)
    with pytest.raises(stoker.StokerInvalidError):
        make([], 4)
    with pytest.raises(TypeError):
        make(42, 4)
    with pytest.raises(ValueError, match="recipe"):
        make(ds_small, 4, transforms="imagenet-test")
    for err in (stoker.StokerInvalidError, stoker.StokerIOError):
        assert issubclass(err, stoker.Error)


def test_device_and_pin_memory_without_cuda(ds_small):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(stoker.StokerNotSupportedError, match="CUDA"):
        make(ds_small, 4, device="cuda")
    with pytest.warns(UserWarning, match="pin_memory"):
        loader = make(ds_small, 4, pin_memory=True)
    assert not loader.info()["pinned"]
    assert len(run_epoch(loader)) == 25
    assert make(ds_small, 4, device="cpu").info()["device"] is None


def test_num_workers_mapping(ds_small):
    assert make(ds_small, 4, num_workers=0).num_workers == 1
    assert make(ds_small, 4, num_workers=3).num_workers == 3
    assert make(ds_small, 4).num_workers == os.cpu_count()
    info = make(ds_small, 4, prefetch=5).info()
    assert (info["prefetch"], info["n_slots"]) == (5, 6)


# ---- lifetime of the loader ----

def test_close_is_idempotent_and_del_is_safe(ds_small):
    loader = make(ds_small, 4)
    it = iter(loader)
    next(it)
    loader.close()
    loader.close()
    assert loader.closed and "closed" in repr(loader)
    with pytest.raises(stoker.StokerStateError):
        len(loader)
    loader = make(ds_small, 4)
    next(iter(loader))
    del loader, it
    gc.collect()


def test_close_from_another_thread_while_iterating(ds_main):
    loader = make(ds_main, 8, num_workers=1, prefetch=1)
    loader._set_debug_delay(50)  # slow batches, so close() lands while next() waits
    seen, errors = [], []

    def consume():
        try:
            for b in loader:
                seen.append(indices(b))
        except stoker.Error as e:
            errors.append(e)

    t = threading.Thread(target=consume)
    t.start()
    while not seen:
        t.join(0.01)
    loader.close()
    t.join(10)
    assert not t.is_alive()
    assert all(isinstance(e, stoker.StokerStateError) for e in errors)


def test_one_consumer_at_a_time(ds_main):
    loader = make(ds_main, 8, num_workers=1)
    loader._set_debug_delay(600000)  # held until released below (a 300 ms batch could come
    it = iter(loader)                # before set_epoch on a loaded machine: issue 30)
    t = threading.Thread(target=lambda: next(it))
    t.start()
    try:
        while not loader._core.pending:  # the other thread is inside next()
            t.join(0.005)
        with pytest.raises(RuntimeError, match="another thread"):
            loader._core.set_epoch(3)  # (state_dict() answers from any thread: test_interrupt.py)
    finally:
        loader._set_debug_delay(0)
        t.join()
    loader.close()


def test_dataset_object_can_be_shared(ds_small):
    ds = stoker.Dataset(ds_small)
    a, b = make(ds, 10), make(ds, 25, shuffle=True)
    assert flat(run_epoch(a)) == list(range(SMALL_N))
    assert sorted(flat(run_epoch(b))) == list(range(SMALL_N))
    with pytest.raises(stoker.StokerStateError, match="loader"):
        ds.close()  # refused while a loader reads it
    a.close()
    b.close()
    assert not ds.closed  # not the loaders' to close
    assert len(ds) == SMALL_N
    ds.close()


def test_loader_refuses_use_after_fork(ds_small):
    loader = make(ds_small, 10)
    it = iter(loader)
    first = next(it)
    pid = os.fork()
    if pid == 0:  # child: the parent's worker threads do not exist here
        code = 1
        try:
            next(it)
        except stoker.StokerStateError as e:
            code = 0 if "fork" in str(e) else 2
        except BaseException:
            code = 3
        del first
        loader.close()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert indices(next(it)) == list(range(10, 20))  # the parent goes on
    assert indices(first) == list(range(10))


def test_numpy_output(ds_small):
    loader = make(ds_small, 10, output="numpy")
    b = next(iter(loader))
    assert isinstance(b["label"], np.ndarray) and b["label"].dtype == np.int64
    assert b["bf"].dtype == np.uint16  # numpy has no bfloat16: the raw bits
    np.testing.assert_array_equal(b["bf"][3], bf16_bits([3, -3]))
    assert b["half"].dtype == np.float16
    assert b.bytes("data")[2] == payload(2)

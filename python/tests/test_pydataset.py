"""stoker.Loader over Python datasets (issue 24): a map-style dataset's __getitem__ on worker
threads or worker processes, the batch structure, the semantics stoker keeps (exactly once, in
order, epochs, ranks, resume), per-sample seeding, and the bad cases (an exception, a killed
worker, a __getitem__ that never returns, Ctrl-C, handles that cannot cross fork(), a parent
that runs threads). The same scenarios against torch's DataLoader are in
test_dataloader_parity.py. No verdict here depends on how fast anything runs."""
import collections
import contextlib
import gc
import os
import pickle
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
import weakref

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import Dataset, IterableDataset, get_worker_info  # noqa: E402

import stoker  # noqa: E402
from stoker import _core, _procpool, _pyworker  # noqa: E402

from conftest import PYTHONPATH, run_python  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))

EXECUTORS = ["thread", "process"]
def test_the_probe_weighs_later_samples_that_travel_as_objects():
    # Variable-length sequences: the first sample fixes a ring field of its length, and later
    # ones of other lengths travel pickled from worker processes. Only the first was timed (no
    # object leaf: 0 s), so "auto" sent a 7 us tokenizer to processes, estimated at 116,000
    # samples/s and delivering 13,000 (0.11x the DataLoader); the mean over the probed samples
    # counts them.
    from stoker import _pydataset
    samples = [(torch.arange(n), n) for n in (5, 9, 3, 12)]
    rows = [(10_000, 10_000, 10_000, 0, 0)] * 4  # 10 us each, the GIL held
    kept = {i: (s, 10_000) for i, s in enumerate(samples)}
    _, first_only = _pydataset.measure(samples[0], rows, False)
    _, p = _pydataset.measure(samples[0], rows, False, kept)
    assert first_only.object_s == 0 and p.object_s > 0
    _, same = _pydataset.measure(samples[0], rows, False,
                                 {i: (samples[0], 10_000) for i in range(4)})
    assert same.object_s == 0


Pair = collections.namedtuple("Pair", "a b")


class Plain(Dataset):
    """Sample i: a float32 [3, 4] tensor full of i, and the label i."""

    def __init__(self, n=37):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.full((3, 4), float(i)), i


class Nested(Dataset):
    """Every kind of leaf and container default_collate knows."""

    def __len__(self):
        return 21

    def __getitem__(self, i):
        return {"x": np.arange(5, dtype=np.int16) * i, "name": f"s{i}", "raw": bytes([i]) * 3,
                "p": Pair(i, float(i) / 2), "flag": i % 2 == 0, "np": np.float32(i),
                "t": (torch.tensor([i, -i], dtype=torch.int32), [torch.tensor(i * 1.5)]),
                "none_free": [i, i + 1]}


class Failing(Dataset):
    def __len__(self):
        return 20

    def __getitem__(self, i):
        if i == 9:
            raise KeyError(f"no sample {i}")  # the line the traceback must show
        return i


class Draws(Dataset):
    """Draws from the three global generators."""

    def __len__(self):
        return 24

    def __getitem__(self, i):
        return i, random.random(), float(np.random.rand()), float(torch.rand(()))


class KillsOnce(Dataset):
    """SIGKILLs its worker process the first time it reaches sample 13 (a marker file)."""

    def __init__(self, marker):
        self.marker = marker

    def __len__(self):
        return 40

    def __getitem__(self, i):
        if i == 13 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return i


class StuckOnce(Dataset):
    """Never returns the first time it reaches sample `at` (sleeps `forever` seconds). The tests
    put `at` past the samples the constructor probes (_pyworker.PROBE_SAMPLES, at most 8), which
    run before timeout= applies and, on an idle machine, all within the probe's time budget."""

    def __init__(self, marker, at=5, forever=600.0, n=24):
        self.marker, self.at, self.forever, self.n = marker, at, forever, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.at and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            time.sleep(self.forever)
        return i


class Info(Dataset):
    """(index, worker id, num_workers, what worker_init_fn left in this worker)."""

    def __len__(self):
        return 30

    def __getitem__(self, i):
        info = get_worker_info()
        return i, info.id, info.num_workers, _INIT.get(info.id, -1)


_INIT = {}
_INIT_CALLS = []


def init_worker(wid):
    _INIT[wid] = wid * 10
    _INIT_CALLS.append(wid)


class Var(Dataset):
    """Samples whose length varies."""

    def __len__(self):
        return 10

    def __getitem__(self, i):
        return torch.arange(i + 1)


def labels(batches):
    return [int(v) for _, y in batches for v in y]


def epoch(loader):
    return [(x.clone(), y.clone()) for x, y in loader]


# ---- structure ----

@pytest.mark.parametrize("executor", EXECUTORS)
def test_structure_is_default_collates(executor):
    from torch.utils.data import default_collate
    ds = Nested()
    loader = stoker.Loader(ds, batch_size=4, num_workers=2, executor=executor)
    assert loader.info()["executor"] == executor
    assert len(loader) == 6
    got = list(loader)  # (holding every batch is allowed: the ring is replaced, with a warning)
    assert len(got) == 6
    for b, batch in enumerate(got):
        want = default_collate([ds[i] for i in range(4 * b, min(21, 4 * b + 4))])
        assert_same(batch, want)


def assert_same(a, b):
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(b, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), (a, b)
    elif isinstance(b, dict):
        assert list(a) == list(b)
        for k in b:
            assert_same(a[k], b[k])
    elif isinstance(b, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert a == b


def test_thread_flatten_hands_tensors_by_address():
    # The thread executor's form of a sample: a torch tensor leaf as (tensor, data_ptr) for the
    # C copy (tensor.numpy() lets the GIL go in torch 1.13), a non-contiguous one made
    # contiguous first, a bfloat16 one as it is; the process executor's form keeps buffers.
    from stoker import _collate
    base = torch.arange(24.).view(4, 6)
    sample = (base[1], base[:, 2], torch.ones(3, dtype=torch.bfloat16), 7)
    layout = _collate.Layout(sample)
    bufs, objects, extras, mask = layout.flatten(sample, pointers=True)
    assert mask == 0 and not extras
    t0, p0 = bufs[0]
    assert t0 is sample[0] and p0 == base.data_ptr() + 6 * 4
    t1, p1 = bufs[1]  # the column, copied contiguous: the pair keeps the copy alive
    assert t1.is_contiguous() and p1 == t1.data_ptr() and torch.equal(t1, base[:, 2])
    t2, p2 = bufs[2]
    assert t2 is sample[2] and p2 == sample[2].data_ptr()
    assert bufs[3] == (7).to_bytes(8, "little", signed=True)
    plain, _, _, _ = layout.flatten(sample)
    assert all(not isinstance(b, tuple) for b in plain)
    assert bytes(memoryview(plain[1]).cast("B")) == t1.numpy().tobytes()
    # a leaf that does not fit the layout still travels as an object, in both forms
    other = (base[1].double(), base[:, 2], torch.ones(3, dtype=torch.bfloat16), 7)
    bufs, _, extras, mask = layout.flatten(other, pointers=True)
    assert bufs[0] is None and mask == 1 and extras[0] is other[0]


def _as_dict(v):
    return {f"k{i}": x for i, x in enumerate(v)}


Pair = collections.namedtuple("Pair", "a b")


def _same_flattening(a, b, sample):
    """Two Layout.flatten results are equal (buffers by their bytes, objects by identity)."""
    assert a[3] == b[3]
    if a[3] == _collate_mod().WHOLE:  # another container: the sample as it is
        assert a[2] is sample and b[2] is sample
        return
    assert len(a[1]) == len(b[1]) and all(x is y for x, y in zip(a[1], b[1]))
    assert a[2].keys() == b[2].keys() and all(a[2][k] is b[2][k] for k in a[2])
    assert (a[0] is None) == (b[0] is None)
    for x, y in zip(a[0] or (), b[0] or ()):
        if x is None or y is None:
            assert x is None and y is None
        elif isinstance(x, tuple):
            assert torch.equal(x[0], y[0]) and x[1] == x[0].data_ptr()
        else:
            assert bytes(memoryview(x).cast("B")) == bytes(memoryview(y).cast("B"))


def _collate_mod():
    from stoker import _collate
    return _collate


def test_compiled_walk_matches_the_walk():
    # Layout.flatten's compiled walk (one straight-line function per layout, issue 24) gives
    # what the recursive walk gives, for samples that fit and for every way one does not: flat
    # tuples, lists and dicts of fixed leaves, and nested containers with object leaves.
    _collate = _collate_mod()
    base = torch.arange(24.).view(4, 6)
    first = (base[1], torch.tensor(3), 7, 2.5, True, np.float32(1.5), np.zeros(2, np.int16))
    variants = [first,
                (base[2], torch.tensor(4), -1, 0.0, False, np.float32(2), np.ones(2, np.int16)),
                (base[:, 1],) + first[1:], (base[1].double(),) + first[1:],
                (base[1].clone().requires_grad_(),) + first[1:],
                (base[1], torch.tensor(3.0)) + first[2:], first[:2] + (1 << 70,) + first[3:],
                first[:2] + (1 << 63,) + first[3:], first[:2] + (-(1 << 63),) + first[3:],
                first[:2] + (True,) + first[3:], first[:2] + (7.0,) + first[3:],
                first[:3] + ("x",) + first[4:], first[:6] + (np.zeros(3, np.int16),),
                first[:-1], first + (1,)]
    d = _as_dict(first)
    reordered = dict(reversed(list(d.items())))
    renamed = dict(d, k9=d["k0"])
    del renamed["k0"]

    def nested(v):  # a dict holding a tuple of a tensor and a list, a namedtuple and objects
        return {"x": (v[0], [v[2], "text", None]), "p": Pair(v[-1], b"id"), "n": v[3],
                "t": "doc"}
    cases = []
    for make in (tuple, list, _as_dict, nested):
        others = [list(first) if make is tuple else first, 5, "a string"]
        if make is _as_dict:  # keys in another order, another key, another mapping type
            others += [reordered, renamed, collections.OrderedDict(d)]
        if make is nested:
            n = nested(first)
            others += [dict(n, x=(first[0], [7, "text"])), dict(n, p=(first[6], b"id")),
                       dict(n, x=[first[0], [7, "a", None]]), {k: n[k] for k in reversed(n)}]
        cases.append((make(first), [make(v) for v in variants] + others))
    cases.append((first[0], [first[0], base[2], base[1].double(), "x", None]))  # a bare leaf
    for first_sample, samples in cases:
        layout = _collate.Layout(first_sample)
        assert layout._walk_fn is not None
        walk = _collate.Layout(first_sample)
        walk._walk_fn = None  # flatten takes the recursive walk
        # (a layout sent to worker processes compiles its walk again there)
        assert pickle.loads(pickle.dumps(layout))._walk_fn is not None
        for sample in samples:
            for pointers in (True, False):
                _same_flattening(layout.flatten(sample, pointers), walk.flatten(sample, pointers),
                                 sample)
    # past _WALK_NODES nodes the recursive walk serves (compiling would cost more)
    big = _collate.Layout(list(range(_collate._WALK_NODES + 1)))
    assert big._walk_fn is None
    bufs, objects, _, mask = big.flatten(list(range(_collate._WALK_NODES + 1)))
    assert mask == 0 and len(bufs) == _collate.MAX_FIXED and objects[-1] == _collate._WALK_NODES
    assert _collate.Layout(((base[1], 7), 2))._flat is None
    assert _collate.Layout({"a": (1, 2)})._flat is None
    assert _collate.Layout(collections.OrderedDict(a=1))._flat is None


class EveryViewDtype(Dataset):
    """A tuple of fixed leaves of each dtype the batch views carry (Batch.leaf_views), and a
    sample that leaves the layout every 5 samples (a float64 tensor for the float32 one)."""

    def __len__(self):
        return 23

    def __getitem__(self, i):
        x = torch.full((2, 3), float(i))
        if i % 5 == 3:
            x = x.double()
        return (x, i, i / 4, np.arange(2, dtype=np.int16) + i, torch.tensor(i, dtype=torch.uint8),
                np.float64(i), torch.arange(2, dtype=torch.int8) - i, torch.ones(1).half() * i)


def _calls_of(monkeypatch, method):
    """A list that gets an item at each call of _collate.Layout's `method` (still called)."""
    from stoker import _collate
    made = []
    orig = getattr(_collate.Layout, method)
    monkeypatch.setattr(_collate.Layout, method,
                        lambda self, views: made.append(1) or orig(self, views))
    return made


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_of_fixed_leaves_are_views_made_in_c(workers, monkeypatch):
    # A batch whose rows all fit a layout of fixed leaves is made by Batch.leaf_views, equal to
    # the DataLoader's; a batch with a row that does not fit (the odd samples) takes the general
    # path, and so does a layout holding a leaf those views do not carry (bool, bfloat16).
    from torch.utils.data import DataLoader
    made = _calls_of(monkeypatch, "collate_fixed")
    ds = EveryViewDtype()
    loader = stoker.Loader(ds, batch_size=4, num_workers=workers)
    assert loader._leaf_spec is not None
    got = list(loader)
    want = list(DataLoader(ds, batch_size=4))
    assert len(got) == len(want) == 6
    for a, b in zip(got, want):
        assert_same(a, b)
    fitting = [b for b in range(6) if not any(i % 5 == 3 for i in range(4 * b, min(23, 4 * b + 4)))]
    assert len(made) == len(fitting) > 0
    for extra in (True, torch.ones(1, dtype=torch.bfloat16)):
        class WithExtra(Dataset):
            def __len__(self):
                return 8

            def __getitem__(self, i, extra=extra):
                return torch.full((2,), float(i)), extra

        loader = stoker.Loader(WithExtra(), batch_size=4, num_workers=workers)
        assert loader._leaf_spec is None
        for a, b in zip(loader, DataLoader(WithExtra(), batch_size=4)):
            assert_same(a, b)


class ByList(Dataset):
    """__getitem__ of a list of indices (the batch-fetch idiom): two tensors, an int, a float,
    an array and a NumPy scalar; with `flag` a bool beside them (a leaf the views do not
    carry)."""

    def __init__(self, flag=False):
        self.x, self.flag = torch.arange(40.).view(20, 2), flag

    def __len__(self):
        return 20

    def __getitem__(self, idx):
        out = (self.x[idx], torch.tensor(idx), len(idx), idx[0] / 2, np.array(idx[:2]),
               np.float32(idx[0]))
        return out + (True,) if self.flag else out


@pytest.mark.parametrize("workers", [0, 2])
def test_unbatched_samples_of_fixed_leaves_are_views_made_in_c(workers, monkeypatch):
    # batch_size=None with a sampler of index lists: a sample of fixed leaves is made from
    # Batch.leaf_views as default_convert makes it (tensors, arrays and NumPy scalars as
    # tensors, numbers as themselves), as the DataLoader passes it; one with a bool leaf takes
    # the general path. Equal to the DataLoader's either way.
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler
    made = _calls_of(monkeypatch, "sample_fixed")
    for flag in (False, True):
        ds = ByList(flag)

        def kw():
            return dict(batch_size=None, sampler=BatchSampler(SequentialSampler(ds), 6, False))
        loader = stoker.Loader(ds, num_workers=workers, **kw())
        assert (loader._leaf_spec is None) == flag
        got, want = list(loader), list(DataLoader(ds, **kw()))
        assert len(got) == len(want) == 4
        for a, b in zip(got, want):
            assert_same(a, b)
    assert len(made) == 3  # the first dataset's lists of 6 (the last, of 2, has another
    # shape than the layout's: it travels whole, by the general path)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_in_order_exactly_once_epochs_and_stats(executor):
    loader = stoker.Loader(Plain(), batch_size=8, num_workers=2, executor=executor)
    for e in range(2):
        got = epoch(loader)
        assert labels(got) == list(range(37))
        assert [len(y) for _, y in got] == [8, 8, 8, 8, 5]
        assert all(torch.equal(x[:, 0, 0], y.float()) for x, y in got)
        assert got[0][0].dtype == torch.float32 and got[0][1].dtype == torch.int64
    info, st = loader.info(), loader.stats()
    assert info["executor"] == executor and isinstance(info["executor_reason"], str)
    assert info["layout"].startswith("(")
    assert st["python_samples"] >= 74 and st["python_s"] > 0
    assert st["gil_share"] is None or 0.0 <= st["gil_share"] <= 1.0
    loader.close()


@pytest.mark.parametrize("executor", EXECUTORS)
def test_shuffle_ranks_and_resume(executor):
    n, b = 37, 5
    full = [labels(epoch(stoker.Loader(Plain(n), b, shuffle=True, seed=3, rank=r, world_size=3,
                                       num_workers=2, executor=executor)))
            for r in range(3)]
    assert all(len(f) == 13 for f in full)  # ceil(37 / 3), DistributedSampler's padding
    assert sorted(set(sum(full, []))) == list(range(n))
    one = stoker.Loader(Plain(n), b, shuffle=True, seed=3, num_workers=2, executor=executor)
    order = labels(epoch(one))
    assert sorted(order) == list(range(n)) and order != list(range(n))
    assert order == [int(i) for i in stoker.epoch_order(n, True, 3, 0)]
    # resume after 3 batches of epoch 1: the rest of that epoch, then epoch 2, as uninterrupted
    it = iter(one)
    head = [next(it)[1].tolist() for _ in range(3)]
    state = one.state_dict()
    rest = labels(it)
    nxt = labels(epoch(one))
    again = stoker.Loader(Plain(n), b, shuffle=True, seed=99, num_workers=1, executor=executor)
    again.load_state_dict(state)
    assert labels(epoch(again)) == rest and labels(epoch(again)) == nxt
    assert sorted(sum(head, []) + rest) == list(range(n))


# ---- seeding ----

def expected_draws(seed, epoch, i):
    _pyworker.seed_all(_core.sample_seed(seed, epoch, i))
    return random.random(), float(np.random.rand()), float(torch.rand(()))


def test_reseed_same_sample_for_any_worker_count_and_resume():
    state = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    want = {i: expected_draws(11, 0, i) for i in range(24)}
    want1 = {i: expected_draws(11, 1, i) for i in range(24)}
    random.setstate(state[0]), np.random.set_state(state[1]), torch.set_rng_state(state[2])
    runs = []
    for workers in (1, 3):
        loader = stoker.Loader(Draws(), batch_size=5, num_workers=workers, seed=11,
                               executor="process")
        got = {}
        for i, a, b, c in loader:
            for k in range(len(i)):
                got[int(i[k])] = (float(a[k]), float(b[k]), float(c[k]))
        runs.append(got)
        again = {}
        for i, a, b, c in loader:  # epoch 1: other numbers
            for k in range(len(i)):
                again[int(i[k])] = (float(a[k]), float(b[k]), float(c[k]))
        assert again == pytest.approx(want1) or again == want1
        loader.close()
    assert runs[0] == runs[1]
    assert runs[0] == {i: (w[0], w[1], pytest.approx(w[2])) for i, w in want.items()}
    # resume mid-epoch: the same numbers for the samples that remain
    loader = stoker.Loader(Draws(), batch_size=5, num_workers=2, seed=11, executor="process")
    it = iter(loader)
    next(it)
    st = loader.state_dict()
    resumed = stoker.Loader(Draws(), batch_size=5, num_workers=2, seed=11, executor="process")
    resumed.load_state_dict(st)
    for i, a, _, _ in resumed:
        for k in range(len(i)):
            assert float(a[k]) == want[int(i[k])][0]
    # reseed=False: the workers' own streams, not the per-sample seeds
    off = stoker.Loader(Draws(), batch_size=5, num_workers=2, seed=11, executor="process",
                        reseed=False)
    firsts = [float(a[k]) for i, a, _, _ in off for k in range(len(i))]
    assert sum(f == want[k][0] for k, f in enumerate(firsts)) < 3


class Augmented(Dataset):
    """A random augmentation as the articles write one: torchvision's RandomCrop and
    RandomHorizontalFlip on a tensor image (torch's generator), a random.uniform brightness and
    NumPy noise."""

    def __init__(self, n=20):
        from torchvision import transforms as T
        self.base = torch.arange(n * 3 * 12 * 12, dtype=torch.float32).reshape(n, 3, 12, 12)
        self.t = T.Compose([T.RandomCrop(8), T.RandomHorizontalFlip()])

    def __len__(self):
        return len(self.base)

    def __getitem__(self, i):
        x = self.t(self.base[i]) * random.uniform(0.5, 1.5)
        return x + torch.from_numpy(np.random.normal(size=(3, 8, 8)).astype(np.float32)), i


def samples_of(batches):
    out = {}
    for x, i in batches:
        for k in range(len(i)):
            out[int(i[k])] = x[k].clone()
    return out


def same_samples(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_random_augmentation_same_sample_for_any_workers_ranks_and_resume():
    pytest.importorskip("torchvision")
    zero = stoker.Loader(Augmented(), batch_size=3, num_workers=0, seed=5)
    assert zero.info()["executor"] == "process"  # per-sample seeding needs a process
    ref = samples_of(zero)
    ref1 = samples_of(zero)  # epoch 1: other numbers
    assert len(ref) == 20 and not same_samples(ref, ref1)
    for kw in (dict(num_workers=1), dict(num_workers=2, shuffle=True),
               dict(num_workers=2, executor="process", batch_size=7)):
        kw = {"batch_size": 3, **kw}
        loader = stoker.Loader(Augmented(), seed=5, **kw)
        assert loader.info()["executor"] == "process", kw
        assert same_samples(samples_of(loader), ref), kw
        assert same_samples(samples_of(loader), ref1), kw
        loader.close()
    # two ranks: each sample as with one
    ranks = [samples_of(stoker.Loader(Augmented(), batch_size=3, seed=5, num_workers=1,
                                      rank=r, world_size=2)) for r in (0, 1)]
    assert same_samples({**ranks[0], **ranks[1]}, ref)
    # resumed mid-epoch with another worker count: the samples that remain, unchanged
    first = stoker.Loader(Augmented(), batch_size=3, seed=5, num_workers=2, shuffle=True)
    it = iter(first)
    head = samples_of([next(it), next(it)])
    state = first.state_dict()
    first.close()
    resumed = stoker.Loader(Augmented(), batch_size=3, seed=5, num_workers=1, shuffle=True)
    resumed.load_state_dict(state)
    rest = samples_of(resumed)
    assert len(head) == 6 and not head.keys() & rest.keys()
    assert same_samples({**head, **rest}, ref)


def test_auto_picks_processes_for_global_random_draws():
    loader = stoker.Loader(Draws(), batch_size=4, num_workers=2)
    assert loader.info()["executor"] == "process"
    assert "random generators" in loader.info()["executor_reason"]
    # the probe put the caller's generators back as they were
    random.seed(5)
    a = random.random()
    random.seed(5)
    stoker.Loader(Draws(), batch_size=4, num_workers=2).close()
    assert random.random() == a


def test_threads_warn_about_global_random_draws():
    with pytest.warns(RuntimeWarning, match="not reproducible"):
        loader = stoker.Loader(Draws(), batch_size=4, num_workers=2, executor="thread")
    assert len(labels([(None, i) for i, _, _, _ in loader])) == 24


class SeedsItself(Dataset):
    """torchvision's FakeData's way: the global torch generator saved, seeded from the index,
    drawn from, and put back, so the generators end as they began."""

    def __len__(self):
        return 24

    def __getitem__(self, i):
        state = torch.get_rng_state()
        torch.manual_seed(i)
        x = torch.randn(4)
        torch.set_rng_state(state)
        return x, i


def test_a_dataset_that_seeds_the_generators_itself_uses_them():
    """A __getitem__ that seeds a global generator and puts it back (FakeData) leaves nothing
    the before/after comparison sees, yet two threads running it interleave one's seeding with
    the other's draws: the probe notes the seeding call, so "auto" takes worker processes
    (whatever the timing says) and executor="thread" warns. Was: no warning; "auto" chose by
    the timing alone (threads gave FakeData images that differ from the DataLoader's). The
    probe leaves torch's functions as they were."""
    seed_fn, set_fn = torch.manual_seed, torch.set_rng_state
    with stoker.Loader(SeedsItself(), batch_size=4, num_workers=2) as loader:
        assert loader.info()["executor"] == "process"
        assert "random generators" in loader.info()["executor_reason"]
        got = {int(i): x for xs, ix in loader for x, i in zip(xs, ix)}
    for i in range(24):
        torch.manual_seed(i)
        assert torch.equal(got[i], torch.randn(4))
    with pytest.warns(RuntimeWarning, match="SeedsItself.__getitem__ draws from the global"):
        stoker.Loader(SeedsItself(), batch_size=4, num_workers=2, executor="thread").close()
    assert torch.manual_seed is seed_fn and torch.set_rng_state is set_fn


# ---- workers: get_worker_info, worker_init_fn ----

@pytest.mark.parametrize("executor", EXECUTORS)
def test_worker_info_and_init_fn(executor):
    loader = stoker.Loader(Info(), batch_size=4, num_workers=3, executor=executor,
                           worker_init_fn=init_worker)
    seen, workers = set(), set()
    for i, wid, n, init in loader:
        assert (n == 3).all()
        assert ((wid >= 0) & (wid < 3)).all()
        assert torch.equal(init, wid * 10)  # worker_init_fn ran in that worker first
        seen.update(i.tolist())
        workers.update(wid.tolist())
    assert seen == set(range(30))
    assert get_worker_info() is None  # not in a worker here
    if executor == "thread":  # once per thread that ran a sample, once more for the probe here
        del i, wid, n, init  # (a batch still held would make the loader rebuild its threads)
        for _, wid, _, _ in loader:
            workers.update(wid.tolist())
        # which threads take samples is the scheduler's choice (a loaded machine may leave one
        # idle, and a thread may first run a sample of the next epoch, prepared ahead and not
        # taken here): each thread's init runs at most once, before its first sample
        calls = {w: _INIT_CALLS.count(w) for w in set(_INIT_CALLS)}
        assert workers <= set(calls) <= {0, 1, 2}
        assert all(n == 1 for w, n in calls.items() if w) and 1 <= calls[0] <= 2, _INIT_CALLS
    _INIT_CALLS.clear()


# ---- the bad cases ----

@pytest.mark.parametrize("executor", EXECUTORS)
def test_exception_in_getitem_names_sample_and_traceback(executor):
    loader = stoker.Loader(Failing(), batch_size=4, num_workers=2, executor=executor)
    it = iter(loader)
    got = []
    with pytest.raises(KeyError) as e:
        while True:
            got += next(it).tolist()
    msg = str(e.value)
    assert "sample 9" in msg and "no sample 9" in msg and f"stoker worker {executor}" in msg
    assert "raise KeyError" in msg  # the worker's traceback
    assert got == list(range(8))
    rest = [int(v) for b in it for v in b]  # the loader goes on with the next batch
    assert rest == list(range(12, 20))
    skip = stoker.Loader(Failing(), batch_size=4, num_workers=2, executor=executor,
                         on_error="skip")
    vals = [int(v) for b in skip for v in b]
    assert len(vals) == 20 and 9 not in vals and vals.count(10) == 2
    assert skip.stats()["skipped"] == 1


class FailsLate(Dataset):
    """(tensor, int) samples, the fast plan's kind, one failing well after each thread's first."""
    def __len__(self):
        return 40

    def __getitem__(self, i):
        if i == 30:
            raise ValueError(f"bad sample {i}")  # the line the traceback must show
        return torch.full((3,), float(i)), i


def test_worker_threads_call_getitem_themselves():
    # After a thread's first sample (the runner's: get_worker_info, worker_init_fn), the thread
    # calls __getitem__ from C and writes the leaves by the layout's plan (ThreadExec.set_fast):
    # the same batches, the time counted, and an exception named as the runner names it.
    loader = stoker.Loader(FailsLate(), batch_size=4, num_workers=1, executor="thread")
    it = iter(loader)
    got = []
    with pytest.raises(ValueError) as e:
        while True:
            x, y = next(it)
            assert torch.equal(x[:, 0], y.float())
            got += y.tolist()
    msg = str(e.value)
    assert "stoker worker thread 0 while loading sample 30 (epoch 0)" in msg
    assert "bad sample 30" in msg and "raise ValueError" in msg
    assert got == list(range(28))
    assert [int(v) for _, y in it for v in y] == list(range(32, 40))
    fast, ns = loader._thread_exec.fast_counts()
    st = loader.stats()
    assert 30 <= fast < st["python_samples"] and st["python_s"] >= ns / 1e9 > 0
    loader.close()


class Epochal(Dataset):
    """What the training loop sets between epochs (dataset.set_epoch(e)) is in every sample."""
    def __init__(self):
        self.epoch = 0

    def set_epoch(self, e):
        self.epoch = e

    def __len__(self):
        return 12

    def __getitem__(self, i):
        return torch.tensor([i, self.epoch])


_INITS = [0]  # worker_init_fn's calls in this (worker) process


def _count_init(wid):
    _INITS[0] += 1


class EpochalInits(Epochal):
    def __getitem__(self, i):
        return torch.tensor([i, self.epoch, _INITS[0]])


class LoadsOnlyBefore9(Epochal):
    """Pickles at every epoch; a worker cannot load it once its epoch is 9."""
    def __setstate__(self, state):
        if state["epoch"] == 9:
            raise RuntimeError("epoch 9 cannot be loaded here")
        self.__dict__.update(state)


@pytest.mark.parametrize("persistent", [False, True])
def test_worker_processes_take_the_dataset_the_training_loop_changed(persistent):
    # Worker processes hold a copy of the dataset; the DataLoader starts its workers anew each
    # epoch (persistent_workers=False), so they see dataset.set_epoch(e): stoker's workers take
    # the dataset as it is, as a new worker would (worker_init_fn again), when the training loop
    # changed it since the last epoch ended, not otherwise; with persistent_workers=True they
    # keep their copy (the DataLoader's keep theirs too).
    ds = EpochalInits()
    loader = stoker.Loader(ds, batch_size=4, num_workers=2, executor="process",
                           persistent_workers=persistent, worker_init_fn=_count_init)
    seen = []
    for e in (0, 5, 5, 7):
        ds.set_epoch(e)
        got = [b.tolist() for b in loader]
        assert sorted(i for b in got for i, _, _ in b) == list(range(12))
        seen.append({(v, n) for b in got for _, v, n in b})
    if persistent:
        assert seen == [{(0, 1)}] * 4
    else:
        assert seen == [{(0, 1)}, {(5, 2)}, {(5, 2)}, {(7, 3)}]
    assert loader.stats()["python_samples"] >= 48
    loader.close()


def _values_and_errors(loader):
    values, errors = set(), []
    it = iter(loader)
    while True:
        try:
            b = next(it)
        except StopIteration:
            return values, errors
        except stoker.StokerWorkerError as e:
            errors.append(str(e))
            continue
        values |= {v for _, v in b.tolist()}


def test_a_changed_dataset_the_workers_cannot_load_is_a_named_error():
    # Workers that cannot load the changed dataset do not go on with their old copy (or some
    # with the new one: samples of two versions): the pass raises the workers' error at iter(),
    # every pass while the dataset stays so, and once it loads they read it; the loader stays
    # usable throughout.
    ds = LoadsOnlyBefore9()
    loader = stoker.Loader(ds, batch_size=4, num_workers=2, executor="process")
    assert _values_and_errors(loader) == ({0}, [])
    ds.set_epoch(9)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="epoch 9 cannot be loaded here") as e:
            iter(loader)
        assert "stoker worker process" in str(e.value)
    ds.set_epoch(10)
    assert _values_and_errors(loader) == ({10}, [])
    assert len(loader) == 3 and loader.state_dict()["epoch"] >= 1
    loader.close()


def test_a_changed_dataset_that_no_longer_pickles_keeps_the_workers():
    # The training loop changed the dataset and it no longer pickles (it now holds a lock): the
    # worker processes keep the copy they have, with a warning that says why; once it pickles
    # again, they take it.
    ds = Epochal()
    loader = stoker.Loader(ds, batch_size=4, num_workers=2, executor="process")
    assert {v for b in loader for _, v in b.tolist()} == {0}
    pids = loader.worker_pids()
    ds.set_epoch(3)
    ds.lock = threading.Lock()
    with pytest.warns(RuntimeWarning, match="keep the copy they have: .*lock"):
        got = {v for b in loader for _, v in b.tolist()}
    assert got == {0} and loader.worker_pids() == pids
    del ds.lock
    assert {v for b in loader for _, v in b.tolist()} == {3} and loader.worker_pids() == pids
    loader.close()


class _ProbeAnsweredBySample:
    """The worker pool with probe() answering as a sample's reply would (status 0, no payload):
    what _renew would read if a ticket's reply were still in a worker's socket."""

    def __init__(self, pool):
        self._real = pool

    def __getattr__(self, name):
        return getattr(self._real, name)

    def probe(self, wid, request):
        return 0, b""


def test_a_renewal_answered_by_another_reply_is_an_error():
    # A worker process's answer to the renewal (a changed dataset, taken in place of its copy)
    # is told from a sample's reply: another reply read there means the worker may still hold
    # the old copy, and a pass on a mix of the two would be silent, so iter() raises instead
    # (a CI run once saw a pass here mix the two copies; not reproduced: docs/reliability.md).
    ds = Epochal()
    loader = stoker.Loader(ds, batch_size=4, num_workers=2, executor="process")
    assert {v for b in loader for _, v in b.tolist()} == {0}
    real = loader._pool
    loader._pool = _ProbeAnsweredBySample(real)
    ds.set_epoch(3)
    with pytest.raises(stoker.StokerStateError, match="answered the dataset's renewal with "
                                                      "another reply"):
        iter(loader)
    loader._pool = real
    assert {v for b in loader for _, v in b.tolist()} == {3}  # the next pass tries again
    loader.close()


class CollectsOnce(Dataset):
    """At sample `at` (past the probed samples and the first batch, so a loader's worker runs
    it), once the test has let its loader go, runs the garbage collector on that worker thread:
    the collector finalizes the loader there."""

    def __init__(self, dropped, at=8, n=32):
        self.dropped, self.at, self.n, self.found = dropped, at, n, None

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.at:
            assert self.dropped.wait(120)
            self.found = (gc.collect(), _core.in_worker_call())
        return i


def test_loader_finalized_on_its_own_worker_thread_closes():
    """A loader in a reference cycle can be finalized by the collector on one of its own worker
    threads (any allocation there may run it). Closing it there joined that very thread: the
    loader was freed under the running worker and the process died (a Python fatal error,
    "PyThreadState_Delete: tstate is still current", or a segfault). It is now closed on a
    thread of its own."""
    dropped = threading.Event()
    ds = CollectsOnce(dropped)
    enabled = gc.isenabled()
    gc.disable()  # only the worker's explicit collection may find the cycle
    try:
        loader = stoker.Loader(ds, batch_size=4, num_workers=2, executor="thread")
        core = weakref.ref(loader._core)
        it = iter(loader)
        assert next(it).tolist() == [0, 1, 2, 3]
        holder = [loader, it]
        holder.append(holder)  # a cycle: only the collector frees the loader
        del loader, it, holder
        assert core() is not None
        dropped.set()
        while core() is not None:  # closed on its own thread, then freed (pytest's timeout)
            time.sleep(0.02)
    finally:
        if enabled:
            gc.enable()
    collected, in_call = ds.found
    assert collected > 0 and in_call  # the worker's collection finalized the loader


def test_killed_worker_is_named_and_restarted(tmp_path):
    loader = stoker.Loader(KillsOnce(str(tmp_path / "killed")), batch_size=4, num_workers=2,
                           executor="process")
    it = iter(loader)
    got, errors = [], []
    while True:
        try:
            b = next(it)
        except StopIteration:
            break
        except stoker.StokerIOError as e:
            errors.append(str(e))
            continue
        got += b.tolist()
    assert len(errors) == 1
    assert "sample 13" in errors[0] and "signal 9" in errors[0] and "OOM" in errors[0]
    assert got == [i for i in range(40) if not 12 <= i < 16]
    assert loader.stats()["worker_deaths"] == 1 and loader.stats()["worker_restarts"] >= 1
    assert sorted(int(v) for b in loader for v in b) == list(range(40))  # next epoch whole
    assert all(p > 0 for p in loader.worker_pids())


RESTART_AFTER_CHANGE = textwrap.dedent("""
    import os, signal, sys, torch, stoker
    from torch.utils.data import Dataset

    class Valued(Dataset):  # (defined in the main program: the fork server stays a fork, which
        value = 0            # holds the first copy)
        def __len__(self):
            return 64
        def __getitem__(self, i):
            return self.value

    ds = Valued()
    loader = stoker.Loader(ds, batch_size=4, num_workers=2, executor="process", prefetch=1)
    first = [int(v) for b in loader for v in b]
    ds.value = 1  # the training loop changes the dataset: the workers take it at iter()
    it = iter(loader)
    got, errors = [int(v) for v in next(it)], 0
    for pid in loader.worker_pids():  # both lost now: restarted for the rest of the epoch
        os.kill(pid, signal.SIGKILL)
    while True:
        try:
            got += [int(v) for v in next(it)]
        except StopIteration:
            break
        except stoker.StokerIOError:
            errors += 1
    st = loader.stats()
    print((sorted(set(first)), sorted(set(got)), len(got), errors, st["worker_restarts"]))
    """)


def test_a_worker_restarted_after_the_dataset_changed_takes_the_change():
    # A worker process restarted after the training loop changed the dataset (its copy renewed
    # at iter()) takes the dataset as it is now, as the renewed workers did, never the fork
    # server's first copy: no epoch mixes the two (seen once in ~75 runs of
    # test_dataset_changed_between_epochs, a worker lost at the epoch's start).
    r = run_python(RESTART_AFTER_CHANGE)
    assert r.returncode == 0, r.stderr[-3000:]
    first, got, n, errors, restarts = eval(r.stdout.strip().splitlines()[-1])
    assert first == [0] and restarts >= 1 and n >= 4
    assert got == [1], (got, n, errors)


def _epoch_through_timeouts(loader, kinds=(stoker.StokerIOError,)):
    """One pass: the samples delivered and the errors (`kinds`), going on after each. The
    DataLoader's timeout= also bounds each next()'s wait for a batch, and a batch on a loaded
    machine may take longer than that (seen under `make test-under-load`): that RuntimeError
    consumes nothing and the next call goes on waiting, so it is counted, not a verdict (a hang
    guard bounds it)."""
    it = iter(loader)
    got, timeouts, errors = [], 0, []
    while True:
        try:
            b = next(it)
        except StopIteration:
            return got, errors
        except kinds as e:
            errors.append(str(e))
            continue
        except RuntimeError as e:  # the DataLoader's timeout: nothing was consumed
            assert "timed out" in str(e)
            timeouts += 1
            assert timeouts < 1000
            continue
        got += b.tolist()


def test_getitem_that_never_returns_times_out(tmp_path):
    # the stuck sample lies past the first samples the constructor probes (PROBE_SAMPLES, run
    # outside timeout=: a hang there hangs the constructor, a known limit), so the test does not
    # depend on how many of them the probe's time budget reaches
    assert _pyworker.PROBE_SAMPLES <= 12
    loader = stoker.Loader(StuckOnce(str(tmp_path / "stuck"), at=13), batch_size=4,
                           num_workers=2, executor="process", timeout=1)
    got, errors = _epoch_through_timeouts(loader)
    assert len(errors) == 1 and "__getitem__(13) did not return within 1 s" in errors[0]
    assert got == [i for i in range(24) if not 12 <= i < 16]
    got, errors = _epoch_through_timeouts(loader)  # the next epoch whole
    assert not errors and sorted(got) == list(range(24))


class KillsOnceSaying(KillsOnce):
    """KillsOnce whose marker names the worker it kills (its id, written whole before the
    kill)."""

    def __getitem__(self, i):
        if i == 13 and not os.path.exists(self.marker):
            with open(self.marker + ".tmp", "w") as f:
                f.write(str(get_worker_info().id))
            os.replace(self.marker + ".tmp", self.marker)
            os.kill(os.getpid(), signal.SIGKILL)
        return i


class KillsOnceThenLets(KillsOnceSaying):
    """KillsOnceSaying whose healthy worker, after the kill, lets the restarted one take a
    sample: each of its samples from 16 on waits (at most `each` seconds, well under the test's
    timeout=) until the restarted worker is held in its start-up (HeldStart's `holding-` file).
    Without it the healthy worker could take every remaining ticket while the restart was being
    asked for, and the restarted worker's start-up would never be waited on."""

    def __init__(self, marker, each=0.25):
        super().__init__(marker)
        self.each = each

    def __getitem__(self, i):
        if i >= 16 and os.path.exists(self.marker):
            with open(self.marker) as f:
                killed = int(f.read())
            if get_worker_info().id != killed:
                dir = os.path.dirname(self.marker)
                until = time.monotonic() + self.each
                while time.monotonic() < until and not _holders(dir):
                    time.sleep(0.01)
        return super().__getitem__(i)


class HeldStart:
    """A worker_init_fn that holds the start-up of the worker restarted after KillsOnceSaying's
    kill, on an event the test controls: a worker starting with the id that `dir/killed` names
    writes `dir/holding-<pid>` and waits until `dir/go` exists (at most `forever` seconds, a
    hang guard). A first start, however late, is never held."""

    def __init__(self, dir, forever=600.0):
        self.dir, self.forever = dir, forever

    def __call__(self, wid):
        try:
            with open(os.path.join(self.dir, "killed")) as f:
                killed = int(f.read())
        except OSError:
            return
        if killed == wid:
            self.hold()

    def hold(self):
        go = os.path.join(self.dir, "go")
        if os.path.exists(go):
            return
        open(os.path.join(self.dir, f"holding-{os.getpid()}"), "w").close()
        deadline = time.monotonic() + self.forever
        while not os.path.exists(go) and time.monotonic() < deadline:
            time.sleep(0.01)


class NeverStarts(HeldStart):
    """Holds every worker's start-up until `dir/go` exists."""

    def __call__(self, wid):
        self.hold()


def _holders(dir):
    """The pids of the worker processes HeldStart holds (or held) in their start-up."""
    return [int(n.split("-")[1]) for n in os.listdir(dir) if n.startswith("holding-")]


def _gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


@pytest.mark.timing
def test_restarted_workers_start_up_is_not_part_of_a_samples_timeout(tmp_path, monkeypatch):
    # a worker killed at sample 13 is restarted, and the new worker's worker_init_fn is held
    # (HeldStart) until the loader is seen waiting for that start-up, then longer than timeout=:
    # the start-up is not the next sample's __getitem__, so no sample times out. (Before the
    # fix the sample's deadline ran from its request, sent at once to the starting worker: the
    # held worker was killed as stuck, which the watcher below sees, so the test failed on that
    # event, whatever the machine's load.) No start-up limit here (STARTUP_LIMIT_S=None): the
    # verdict does not depend on how long the hold lasts.
    monkeypatch.setattr(_procpool, "STARTUP_LIMIT_S", None)
    t = 2
    loader = stoker.Loader(KillsOnceThenLets(str(tmp_path / "killed")), batch_size=4,
                           num_workers=2, executor="process", timeout=t,
                           worker_init_fn=HeldStart(str(tmp_path)))
    seen = {}

    def watch():  # releases the hold; records what it saw
        guard = time.monotonic() + 600
        # ends with the epoch too ("go", written below once it is over): when no sample went to
        # the restarted worker, nothing ever waits on its start-up, and before this check the
        # watcher looped to its guard while the test joined it, past pytest's 300 s timeout
        while time.monotonic() < guard and not os.path.exists(tmp_path / "go"):
            holders = _holders(tmp_path)
            if holders and any(_gone(p) for p in holders):
                seen["killed_while_starting"] = True  # the bug: a start-up taken for a sample
                break
            if holders and loader._pool.stats().get("starting", 0) > 0:
                seen["waited"] = True  # the loader waits for the start-up, no sample's clock
                time.sleep(2 * t)  # a start-up longer than timeout=
                break
            time.sleep(0.01)
        open(tmp_path / "go", "w").close()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        got, errors = _epoch_through_timeouts(loader)
    finally:
        open(tmp_path / "go", "w").close()
        watcher.join()
    assert "killed_while_starting" not in seen
    assert len(errors) == 1, errors
    assert "sample 13" in errors[0] and "signal 9" in errors[0]
    assert got == [i for i in range(40) if not 12 <= i < 16]
    stats = loader.stats()
    assert stats["worker_deaths"] == 1 and stats["worker_restarts"] == 1
    assert sorted(int(v) for b in loader for v in b) == list(range(40))  # next epoch whole
    loader.close()
    if not seen:  # which worker takes the samples after the kill is the scheduler's choice:
        # when the healthy worker took every one, the held start-up was never waited on, so
        # the case this test is for did not occur; said, not passed
        pytest.skip("no sample went to the restarted worker in this run: its held start-up "
                    "was never waited on")
    assert seen == {"waited": True}


@pytest.mark.timing
def test_worker_that_never_starts_is_a_named_error(tmp_path, monkeypatch):
    # a worker_init_fn that never returns (held until the test's end): with timeout= set, the
    # worker's start-up has a limit of its own, and the constructor (whose probe runs in worker
    # 0) raises naming it, instead of waiting forever
    monkeypatch.setattr(_procpool, "STARTUP_LIMIT_S", 0.5)
    assert _procpool.startup_limit(0.5) == 0.5 and _procpool.startup_limit(0) == 0
    try:
        with pytest.raises(stoker.StokerIOError) as e:
            stoker.Loader(Plain(16), batch_size=4, num_workers=2, executor="process",
                          timeout=0.5, worker_init_fn=NeverStarts(str(tmp_path)))
    finally:
        open(tmp_path / "go", "w").close()
    msg = str(e.value)
    assert "worker process 0" in msg and "did not finish starting" in msg
    assert "worker_init_fn" in msg and "within 0.5 s" in msg


@pytest.mark.timing
def test_restarted_worker_that_never_starts_fails_its_samples_by_name(tmp_path, monkeypatch):
    # the restarted worker (after the kill at sample 13) never finishes starting until the
    # consumer has seen a start-up failure: each such failure names the worker, the start-up and
    # the sample, fails that sample's batch, and the loader goes on; nothing else is lost. The
    # 0.5 s limit is set once the constructor has run (its probe waits for worker 0's first
    # start, which takes longer than that on a loaded machine); a first start of worker 1 past it
    # is such a failure too, and the verdict holds either way
    monkeypatch.setattr(_procpool, "STARTUP_LIMIT_S", None)
    # (not KillsOnceThenLets: its waits in the healthy worker would count against timeout=0.5)
    loader = stoker.Loader(KillsOnceSaying(str(tmp_path / "killed")), batch_size=4,
                           num_workers=2, executor="process", timeout=0.5,
                           worker_init_fn=HeldStart(str(tmp_path)))
    loader._pool.set_startup(0.5)
    it = iter(loader)
    got, errors = [], []
    try:
        while True:
            try:
                b = next(it)
            except StopIteration:
                break
            except stoker.StokerIOError as e:
                errors.append(str(e))
                if "did not finish starting" in str(e):
                    open(tmp_path / "go", "w").close()  # later restarts start
                continue
            except RuntimeError as e:  # the DataLoader's timeout on a next(): nothing consumed
                assert "timed out" in str(e)
                continue
            got += b.tolist()
    finally:
        open(tmp_path / "go", "w").close()
    killed = [m for m in errors if "signal 9" in m]
    assert len(killed) == 1 and "sample 13" in killed[0]
    late = [m for m in errors if m not in killed]
    assert all("did not finish starting (its set-up and worker_init_fn) within 0.5 s" in m
               for m in late), errors
    # each error failed its own batch, whole; every other sample came once, in order
    assert got == sorted(set(got)) and set(got) <= set(range(40))
    lost = set(range(40)) - set(got)
    whole = {i // 4 for i in lost if all(j in lost for j in range(i // 4 * 4, i // 4 * 4 + 4))}
    assert {i // 4 for i in lost} == whole
    assert len(whole) == len(errors) and 13 in lost
    loader.close()
    if not late:  # which worker takes the samples after the kill is the scheduler's choice:
        # when the healthy worker took every one, the held start-up was never waited on
        # (seen once under make test-under-load); said, not passed
        pytest.skip("no sample went to the restarted worker in this run: its held start-up "
                    "was never waited on")


class HeldOnce(StuckOnce):
    """StuckOnce whose sample `at` waits, the first time, until the file `marker + ".go"`
    exists (at most `forever` seconds, a hang guard): the test releases it on an event."""

    def __getitem__(self, i):
        if i == self.at and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            deadline = time.monotonic() + self.forever
            while not os.path.exists(self.marker + ".go") and time.monotonic() < deadline:
                time.sleep(0.01)
        return i


class Counted(Dataset):
    """Counts the calls of __getitem__ per index, in call order (threads share it)."""

    def __init__(self, n=50):
        self.n, self.calls, self.here, self.main = n, [], [], threading.get_ident()

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.calls.append(i)
        if threading.get_ident() == self.main:
            self.here.append(i)
        return torch.full((2,), float(i)), i


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("shuffle", [False, True])
def test_probed_samples_are_not_loaded_again(workers, shuffle):
    # the constructor's probe loads the first samples of epoch 0's order; the thread executor
    # hands those out instead of calling __getitem__ again (one call per sample, as the
    # DataLoader makes). 200 samples and a ring of 2 batches of 4: epoch 1 is not reached
    # while the first batch is taken
    ds = Counted(200)
    loader = stoker.Loader(ds, batch_size=4, shuffle=shuffle, seed=3, num_workers=workers,
                           executor="thread", prefetch=1)
    probed = list(ds.here)  # the probe runs in the constructing thread
    assert 1 <= len(probed) <= _pyworker.PROBE_SAMPLES
    it = iter(loader)
    x, y = next(it)
    first = [int(v) for v in y]
    n = min(4, len(probed))  # the probe stops early past its time budget (a loaded machine)
    assert first[:n] == probed[:n]  # the probe read the first batch's samples
    assert torch.equal(x[:, 0], y.float())
    assert all(ds.calls.count(i) == 1 for i in probed)  # and none was loaded again
    del x, y
    rows = first + [int(v) for _, y in it for v in y]
    assert sorted(rows) == list(range(200))
    assert rows[:len(probed)] == probed
    loader.close()


@pytest.mark.parametrize("shuffle", [False, True])
def test_probed_samples_are_this_ranks_under_a_distributed_sampler(shuffle):
    """Under a DistributedSampler (rank 1 of 3) the probe loads this rank's first samples, the
    first batch's, which the thread executor hands out, and no other rank's sample is loaded
    (was: the first indices of the dataset, two thirds of them another rank's, loaded for
    nothing)."""
    ds = Counted(60)
    sampler = torch.utils.data.DistributedSampler(ds, num_replicas=3, rank=1, shuffle=shuffle)
    with stoker.Loader(ds, batch_size=4, sampler=sampler, num_workers=2,
                       executor="thread") as loader:
        probed = list(ds.here)
        got = [int(v) for _, y in loader for v in y]
    assert got == list(sampler)
    assert probed and probed == got[:len(probed)]
    assert set(ds.calls) <= set(got)  # (the workers may run ahead into the next pass's samples)


def test_worker_processes_do_not_map_the_ring():
    # worker processes write their rows with pwrite into the ring's memfd: the ring is mapped in
    # the training process only, so it does not count again in each worker's resident memory
    loader = stoker.Loader(Plain(64), batch_size=8, num_workers=2, executor="process")
    got = [int(v) for _, y in loader for v in y]
    assert got == list(range(64))
    pids = loader.worker_pids()
    assert len(pids) == 2 and all(p > 0 for p in pids)
    with open(f"/proc/{os.getpid()}/maps") as f:
        assert "stoker-ring" in f.read()  # (the name the check below looks for)
    for pid in pids:
        with open(f"/proc/{pid}/maps") as f:
            assert "stoker-ring" not in f.read()
    loader.close()


@pytest.mark.parametrize("executor", ["thread", "process", "auto"])
def test_probe_obeys_timeout(tmp_path, executor):
    # the stuck sample is the first one, which the constructor's probe always runs (in this
    # process for "thread" and "auto", in worker process 0 for "process"): timeout= applies there
    # as during iteration, with the same named error, instead of hanging the constructor
    # (a StokerIOError, as before, and a RuntimeError, as the DataLoader's timeout)
    with pytest.raises(stoker.StokerIOError, match=r"__getitem__\(0\) did not return within "
                                                   r"1 s \(timeout=\)") as raised:
        stoker.Loader(StuckOnce(str(tmp_path / "stuck"), at=0), batch_size=4, num_workers=2,
                      executor=executor, timeout=1)
    assert isinstance(raised.value, RuntimeError)
    assert os.path.exists(str(tmp_path / "stuck"))
    # nothing of the failed loader is left in the way: the next one works
    loader = stoker.Loader(StuckOnce(str(tmp_path / "stuck"), at=0), batch_size=4,
                           num_workers=2, executor=executor, timeout=1)
    assert sorted(int(v) for b in loader for v in b) == list(range(24))
    loader.close()


def test_a_sample_that_never_returns_on_threads_lets_close_and_exit_return():
    """timeout= on worker threads and a __getitem__ that never returns: the loop gets the
    timeout error, close() returns after at most the timeout with a RuntimeWarning (the loader
    is freed when the thread returns), and the interpreter exits (was: close() and the exit
    joined the stuck thread forever). "auto" takes worker processes when timeout= is given."""
    code = textwrap.dedent("""
        import threading, time, warnings, torch, stoker
        class Stuck(torch.utils.data.Dataset):
            def __len__(self):
                return 40
            def __getitem__(self, i):
                if i == 20:
                    threading.Event().wait()  # never returns
                return i
        loader = stoker.Loader(Stuck(), batch_size=4, num_workers=2, timeout=1)
        print(loader.info()["executor"])
        for executor in ("thread", "thread-exit"):
            loader = stoker.Loader(Stuck(), batch_size=4, num_workers=2, timeout=1,
                                   executor="thread")
            try:
                for b in loader:
                    pass
            except RuntimeError as e:
                print("timed out" if "timed out" in str(e) else e)
            if executor == "thread":
                with warnings.catch_warnings(record=True) as w:  # (no clock read: that it
                    warnings.simplefilter("always")              # returns while the thread is
                    loader.close()                               # stuck, the warning says)
                print("closed", loader.closed,
                      any("still in __getitem__" in str(x.message) for x in w))
        print("end")
    """)
    r = run_python(code, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:5] == ["process", "timed out", "closed True True", "timed out",
                                        "end"], r.stdout


@contextlib.contextmanager
def _ctrl_c_once_started(marker):
    """Ctrl-C (SIGINT to this thread) once the stuck sample has started (its marker file
    exists), not after a delay; none after the block."""
    main = threading.get_ident()
    done = threading.Event()

    def interrupt():
        while not os.path.exists(marker) and not done.is_set():
            time.sleep(0.01)
        if not done.is_set():
            signal.pthread_kill(main, signal.SIGINT)

    t = threading.Thread(target=interrupt, daemon=True)
    t.start()
    try:
        yield
    finally:
        done.set()
        t.join()


def _os_threads():
    """This process's thread ids: the threads a step left are those after it less those before
    (a count would also move with earlier tests' threads that end meanwhile)."""
    return set(os.listdir("/proc/self/task"))


@pytest.mark.parametrize("how", ["timeout", "ctrl-c"])
def test_a_probe_left_in_getitem_keeps_no_meter_nor_switch_interval(tmp_path, how):
    # executor="auto" (the default) measures the probed samples with a GIL meter (a thread of its
    # own) under a raised switch interval (_pyworker.PROBE_SWITCH_S). A constructor that stops
    # waiting for a __getitem__ that never returns (timeout=, Ctrl-C) leaves that thread in it, as
    # a stuck worker thread is left; it must not also leave the whole process switching the GIL
    # once a second, nor the meter's thread taking the GIL every cycle until the sample returns.
    marker = str(tmp_path / "stuck")
    switch = sys.getswitchinterval()
    assert _pyworker.PROBE_SWITCH_S != switch
    before = _os_threads()
    with _ctrl_c_once_started(marker) if how == "ctrl-c" else contextlib.nullcontext():
        with pytest.raises(KeyboardInterrupt if how == "ctrl-c" else stoker.StokerIOError):
            stoker.Loader(StuckOnce(marker, at=0), batch_size=4, num_workers=2,
                          executor="auto", timeout=1 if how == "timeout" else 60)
    assert os.path.exists(marker)  # the probe's thread is in __getitem__(0), left to it
    assert sys.getswitchinterval() == switch
    assert len(_os_threads() - before) == 1  # that thread, and no meter beside it


@pytest.mark.parametrize("executor", ["thread", "process"])
@pytest.mark.parametrize("timeout", [0, 60])
def test_ctrl_c_during_the_probe(tmp_path, executor, timeout):
    # Ctrl-C while the constructor's probe waits for a __getitem__ that never returns (in this
    # process, or in worker process 0): KeyboardInterrupt, and the next loader works. The signal
    # is sent once the stuck sample has started (its marker file exists), not after a delay.
    marker = str(tmp_path / "stuck")
    with _ctrl_c_once_started(marker):
        with pytest.raises(KeyboardInterrupt):
            stoker.Loader(StuckOnce(marker, at=0), batch_size=4, num_workers=2,
                          executor=executor, timeout=timeout)
    loader = stoker.Loader(StuckOnce(marker, at=0), batch_size=4, num_workers=2,
                           executor=executor)
    assert sorted(int(v) for b in loader for v in b) == list(range(24))
    loader.close()


def test_ctrl_c_mid_epoch_keeps_the_loader(tmp_path):
    """Ctrl-C while next() waits for batch 3, whose sample 13 is held until the interrupt was
    handled: the batch is delivered by a later call, nothing lost or repeated. (Sample 13 slept
    2 s and a timer fired 0.3 s after batch 0: on a loaded machine the timer could land after
    the epoch or between a batch's return and its use; issue 30.)"""
    marker = str(tmp_path / "slow")
    loader = stoker.Loader(HeldOnce(marker, at=13), batch_size=4, num_workers=2,
                           executor="process")

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    it = iter(loader)
    got = [v for _ in range(3) for v in next(it).tolist()]  # batches 0-2
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(KeyboardInterrupt):
            next(it)  # batch 3 cannot be ready before the release below
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        open(marker + ".go", "w").close()
    got += [int(v) for b in it for v in b]
    assert got == list(range(24))  # nothing lost or repeated


def test_close_does_not_wait_for_a_stuck_worker(tmp_path):
    loader = stoker.Loader(StuckOnce(str(tmp_path / "s"), at=13, forever=600.0), batch_size=4,
                           num_workers=2, executor="process")
    it = iter(loader)
    assert next(it).tolist() == [0, 1, 2, 3]  # a worker is inside sample 13 for good by now
    while not os.path.exists(str(tmp_path / "s")):
        time.sleep(0.01)
    loader.close()  # (the test's time limit would catch a wait)
    assert loader.closed


class Handle(Dataset):
    """Sample i: (i, a value read through an open handle: an LMDB environment holding k -> v, or
    an HDF5 file holding x = 0..9), the handle opened in the constructor."""

    def __init__(self, kind, path):
        self.kind, self.path = kind, path
        if kind == "lmdb":
            import lmdb
            with lmdb.open(path, map_size=1 << 20) as env, env.begin(write=True) as txn:
                txn.put(b"k", b"v")
        else:
            import h5py
            with h5py.File(path, "w") as f:
                f["x"] = np.arange(10)
        self.h = self._open()

    def _open(self):
        if self.kind == "lmdb":
            import lmdb
            return lmdb.open(self.path, readonly=True, lock=False)
        import h5py
        return h5py.File(self.path, "r")

    def __len__(self):
        return 10

    def __getitem__(self, i):
        if self.kind == "lmdb":
            with self.h.begin() as txn:
                return i, len(txn.get(b"k"))
        return i, int(self.h["x"][i])


@pytest.mark.parametrize("kind", ["lmdb", "h5py"])
def test_open_handles_across_fork(kind, tmp_path):
    pytest.importorskip(kind)
    ds = Handle(kind, str(tmp_path / ("db" if kind == "lmdb" else "x.h5")))
    with pytest.raises(ValueError, match=f"{kind}.*lazily"):
        stoker.Loader(ds, batch_size=4, num_workers=2, executor="process")
    loader = stoker.Loader(ds, batch_size=4, num_workers=2)  # auto: threads share the handle
    assert loader.info()["executor"] == "thread"
    assert kind in loader.info()["executor_reason"]
    assert sorted(int(v) for i, _ in loader for v in i) == list(range(10))


class LazyHandle(Handle):
    """Handle's file, opened on first use in __getitem__ (the articles' HDF5Dataset and
    LMDBDataset): fork-safe until something calls __getitem__ in this process."""

    def __init__(self, kind, path):
        super().__init__(kind, path)
        self.h.close()
        self.h = None

    def __getitem__(self, i):
        if self.h is None:
            self.h = self._open()
        return super().__getitem__(i)


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("kind", ["lmdb", "h5py"])
def test_a_handle_stoker_opened_here_does_not_reach_the_next_loader(kind, split, tmp_path):
    """The first loader's probe runs __getitem__ in this process (executor="auto"), which opens
    the dataset's file here: a second loader of the same dataset (split: the training and
    validation halves of random_split, two Subsets of it) still gives its worker processes the
    dataset as it was before (its attribute back to None, in their copy), as the DataLoader's
    workers would find it, instead of refusing processes for a handle stoker opened; the dataset
    in this process keeps its handle. A loader with worker processes made before (so the fork
    server exists, and the first loader's spec is pickled after its probe) used to fail there:
    "h5py objects cannot be pickled"."""
    pytest.importorskip(kind)
    before = stoker.Loader(torch.utils.data.TensorDataset(torch.arange(4)), batch_size=2,
                           num_workers=2, executor="process")
    before.close()
    ds = LazyHandle(kind, str(tmp_path / ("db" if kind == "lmdb" else "x.h5")))
    a, b = (torch.utils.data.Subset(ds, range(5)), torch.utils.data.Subset(ds, range(5, 10))) \
        if split else (ds, ds)
    want_a, want_b = (list(range(5)), list(range(5, 10))) if split else ([*range(10)],) * 2
    first = stoker.Loader(a, batch_size=4, num_workers=2)
    try:
        assert sorted(int(v) for i, _ in first for v in i) == want_a
    finally:
        first.close()
    assert ds.h is not None  # opened here by the probe
    handle = ds.h
    second = stoker.Loader(b, batch_size=4, num_workers=2, executor="process")
    try:
        assert second.info()["executor"] == "process"
        assert sorted(int(v) for i, _ in second for v in i) == want_b
    finally:
        second.close()
    assert ds.h is handle


def test_parent_with_threads_already_running(tmp_path):
    # A thread holds a lock forever; a fork now would give workers the lock held (the
    # DataLoader's futex hang). stoker's workers come from a fresh fork server instead.
    mod = tmp_path / "lockds.py"
    mod.write_text(textwrap.dedent("""
        import threading, torch
        LOCK = threading.Lock()
        class LockDS(torch.utils.data.Dataset):
            def __len__(self):
                return 12
            def __getitem__(self, i):
                with LOCK:
                    return i
    """))
    code = textwrap.dedent(f"""
        import sys, threading
        sys.path.insert(0, {str(tmp_path)!r})
        import lockds, stoker
        held = threading.Event()
        def hold():
            lockds.LOCK.acquire()
            held.set()
            threading.Event().wait()
        threading.Thread(target=hold, daemon=True).start()
        held.wait()
        loader = stoker.Loader(lockds.LockDS(), batch_size=4, num_workers=2, executor="process")
        print(loader.info()["start_method"], sorted(int(v) for b in loader for v in b))
    """)
    r = run_python(code, timeout=240)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split(None, 1) == ["forkserver", str(list(range(12))) + "\n"]


class Records(Dataset):
    """The binary-records dataset of the articles: the file opened once in __init__, each
    sample a seek and a read of one record (a pause between them, where another worker with the
    same file position would move it)."""

    def __init__(self, path, n=48, buffering=-1):
        self.n = n
        self.f = open(path, "rb", buffering=buffering)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.f.seek(i * 4096)
        time.sleep(0.0005)
        return torch.from_numpy(np.frombuffer(self.f.read(4096), dtype=np.int32).copy()), i


def records_file(tmp_path, n=48):
    path = tmp_path / "records.bin"
    np.arange(n * 1024, dtype=np.int32).tofile(path)
    return str(path)


def assert_records(loader, n=48, epochs=2):
    """Every record read whole and as its own index's, each once per epoch."""
    seen = []
    for _ in range(epochs):
        for x, y in loader:
            want = y.to(torch.int32)[:, None] * 1024 + torch.arange(1024, dtype=torch.int32)
            assert torch.equal(x, want), "a worker read another sample's bytes"
            seen += y.tolist()
    assert sorted(seen) == sorted(list(range(n)) * epochs)


def test_a_dataset_reading_an_open_file_gets_a_position_per_worker(tmp_path):
    """A dataset holding a file it opened in __init__ (seek, then read, in __getitem__): its
    worker processes each read through a position of their own (it is opened again by path in
    each), so no sample gets another's bytes; "auto" takes processes for it and says why, and
    executor="thread" with several threads warns (they share one position). Was: "auto" ran it
    on threads, which read other samples' bytes silently, and executor="process" refused it
    ("cannot pickle '_io.BufferedReader' object"). (The DataLoader's forked workers share the
    position, and read the wrong bytes too.)"""
    path = records_file(tmp_path)
    before = stoker.Loader(Plain(4), batch_size=2, num_workers=2, executor="process")
    before.close()  # (the fork server exists: this dataset is pickled to the workers)
    loader = stoker.Loader(Records(path), batch_size=4, num_workers=3)
    assert loader.info()["executor"] == "process"
    assert "open file, dataset.f (" + path in loader.info()["executor_reason"]
    assert_records(loader)
    loader.close()
    for buffering in (-1, 0):  # a BufferedReader, a FileIO
        with stoker.Loader(Records(path, buffering=buffering), batch_size=4, num_workers=3,
                           executor="process") as loader:
            assert_records(loader)
    with pytest.warns(RuntimeWarning, match="open file, dataset.f .* 3 worker threads share"):
        stoker.Loader(Records(path), batch_size=4, num_workers=3, executor="thread").close()


class LazyRecords(Records):
    """The same records, the file opened on first use in __getitem__ (the h5py articles'
    lazy-open pattern applied to a plain file)."""

    def __init__(self, path, n=48):
        self.path, self.n, self.f = path, n, None

    def __getitem__(self, i):
        if self.f is None:
            self.f = open(self.path, "rb")
        return super().__getitem__(i)


class MadeOnFirstUse(Dataset):
    """A handle made on first use and kept (no file: threads may share it)."""

    def __init__(self):
        self.handle = None

    def __len__(self):
        return 48

    def __getitem__(self, i):
        if self.handle is None:
            self.handle = object()
        time.sleep(0.0005)
        return i


class Scratch(Dataset):
    """An attribute used as scratch inside __getitem__: safe in the DataLoader's worker
    processes (a copy each), not on threads sharing the dataset."""

    def __len__(self):
        return 48

    def __getitem__(self, i):
        self.cur = i
        time.sleep(0.0005)
        return self.cur


def test_a_dataset_assigning_its_attributes_in_getitem_gets_worker_processes(tmp_path):
    """A file opened lazily in __getitem__, or an attribute it assigns at every call (scratch):
    the constructor's first samples (run here) show it, so "auto" takes worker processes and
    says why, and executor="thread" warns; a handle made once on first use does not count. Was: "auto" chose threads, which shared the lazily opened
    file (a sample got another's bytes: 4-167 wrong of 2,000 per epoch) or the scratch value
    (1,512-1,986 of 2,000 wrong), silently; the open-file check saw only files opened before."""
    path = records_file(tmp_path)
    loader = stoker.Loader(LazyRecords(path), batch_size=4, num_workers=3)
    assert loader.info()["executor"] == "process", loader.info()["executor_reason"]
    assert "open file" in loader.info()["executor_reason"]
    assert_records(loader)
    loader.close()
    loader = stoker.Loader(Scratch(), batch_size=4, num_workers=2)
    assert loader.info()["executor"] == "process"
    assert "__getitem__ assigns Scratch.cur" in loader.info()["executor_reason"]
    assert sorted(int(v) for b in loader for v in b) == list(range(48))
    loader.close()
    # threads asked for, their count left to stoker (the probe then runs several samples)
    with pytest.warns(RuntimeWarning, match=r"assigns Scratch.cur, which its \d+ worker threads"):
        stoker.Loader(Scratch(), batch_size=4, executor="thread").close()
    # a handle opened on first use only (an h5py file, an lmdb environment) is no such write
    loader = stoker.Loader(MadeOnFirstUse(), batch_size=4, num_workers=2)
    assert "assigns" not in loader.info()["executor_reason"]
    loader.close()


class ManyLeaves(Dataset):
    """A dict of 20 small tensors: 5 past the ring's fields travel as pickled object leaves."""

    def __init__(self, n=256):
        self.x = torch.randn(n, 8)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {f"k{j}": self.x[i] * j for j in range(20)}


def test_many_tensor_leaves_stay_off_worker_processes():
    """The probe times pickling the first sample's object leaves, which a worker process would
    send and the training thread take back (~70 us a torch tensor): "auto" no longer sends a
    dict of 20 small tensors to processes (was: 0.31x the DataLoader; 0.82x now)."""
    loader = stoker.Loader(ManyLeaves(), batch_size=16, num_workers=2)
    assert loader.info()["executor"] == "thread", loader.info()["executor_reason"]
    want = ManyLeaves.__getitem__(loader.dataset, 3)
    first = next(iter(loader))
    assert all(torch.equal(first[k][3], v) for k, v in want.items())
    loader.close()


def test_a_file_inherited_by_the_workers_gets_a_position_per_worker(tmp_path):
    """The same dataset in a process whose first loader forks the fork server with it (the
    dataset inherited, not pickled): each worker opens the file again under the same
    descriptor, at the position it had."""
    path = records_file(tmp_path)
    code = textwrap.dedent(f"""
        import sys, time, numpy as np, torch, stoker
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_pydataset import Records, assert_records
        loader = stoker.Loader(Records({path!r}), batch_size=4, num_workers=3,
                               executor="process")
        assert_records(loader, epochs=3)
        print(loader.info()["start_method"], "ok")
    """)
    r = run_python(code, timeout=240)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["fork", "ok"]


def test_a_zipfile_dataset_on_worker_processes_and_threads(tmp_path):
    """A zipfile.ZipFile opened in __init__ (bench_openfile.py's Zipped: the DataLoader's
    forked workers share its file position, "BadZipFile: Bad CRC-32"): pickled to the worker
    processes as its path (each opens it again), so executor="process" runs it after the fork
    server exists, every sample whole; on threads it is read under the ZipFile's own lock, so
    no warning there."""
    import zipfile
    from bench_openfile import Zipped
    path = str(tmp_path / "samples.zip")
    with zipfile.ZipFile(path, "w") as z:
        for i in range(40):
            z.writestr(f"{i}.bin", np.full(256, i, np.int32).tobytes())
    before = stoker.Loader(Plain(4), batch_size=2, num_workers=2, executor="process")
    before.close()
    for executor in ("process", "thread"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            loader = stoker.Loader(Zipped(path, 40), batch_size=4, num_workers=3,
                                   executor=executor)
        with loader:
            got = [(x, y) for _ in range(2) for x, y in loader]
        assert all(torch.equal(x, y.to(torch.int32)[:, None].expand(-1, 256)) for x, y in got)
        assert sorted(v for _, y in got for v in y.tolist()) == sorted(list(range(40)) * 2)


class Lines(IterableDataset):
    """An IterableDataset over a text file opened in __init__, each worker taking every n-th
    line (get_worker_info)."""

    def __init__(self, path):
        self.f = open(path)

    def __iter__(self):
        info = get_worker_info()
        wid, n = (info.id, info.num_workers) if info is not None else (0, 1)
        self.f.seek(0)
        for k, line in enumerate(self.f):
            if k % n == wid:
                yield int(line.split()[1])


@pytest.mark.parametrize("executor", EXECUTORS)
def test_an_iterable_dataset_reading_an_open_file(executor, tmp_path):
    """Each worker (a process, or a thread's replica) reads the file through a position of its
    own: every line once per pass. Was: the threads' replicas shared one file object (2,600 of
    5,000 lines, silently), and the processes one position."""
    path = tmp_path / "lines.txt"
    path.write_text("".join(f"line {i:06d}\n" for i in range(3000)))
    with stoker.Loader(Lines(str(path)), batch_size=50, num_workers=2,
                       executor=executor) as loader:
        for _ in range(2):
            assert sorted(int(v) for b in loader for v in b) == list(range(3000))


def test_read_only_files_pickle_by_path_and_position(tmp_path):
    """_holds.dumps: a file opened read-only unpickles as the same kind of file object, on the
    same file at the same position, with a descriptor of its own; a file open for writing still
    does not pickle."""
    from stoker import _holds
    path = tmp_path / "t.txt"
    path.write_text("line one\nline two\n")
    with open(path, "rb") as b, open(path, "rb", buffering=0) as r, open(path) as t:
        for f in (b, r, t):
            f.readline()
            g = pickle.loads(_holds.dumps(f))
            try:
                assert type(g) is type(f) and g.fileno() != f.fileno()
                assert g.readline() in (b"line two\n", "line two\n")
            finally:
                g.close()
    with open(tmp_path / "w.bin", "wb") as w, pytest.raises(TypeError, match="cannot pickle"):
        _holds.dumps({"f": w})


class DrawsUnpicklable(Dataset):
    """Draws from Python's random (so "auto" wants worker processes) and holds a lambda (so it
    does not pickle)."""

    def __init__(self):
        self.scale = lambda v: v * 2

    def __len__(self):
        return 20

    def __getitem__(self, i):
        random.random()
        return self.scale(i)


def test_auto_takes_threads_for_a_dataset_that_does_not_pickle():
    """executor="auto" for a dataset that wants worker processes but does not pickle, made
    after the fork server was started (an earlier loader: a validation loader after the
    training one): threads, with a RuntimeWarning and the reason in info(), every sample
    once. Was: the constructor raised TypeError ("... pickling failed: ... lambda"), while
    the DataLoader (which forks) runs it. executor="process" still raises it."""
    before = stoker.Loader(Plain(4), batch_size=2, num_workers=2, executor="process")
    before.close()
    with pytest.warns(RuntimeWarning,
                      match="DrawsUnpicklable runs on worker threads.*does not pickle"):
        loader = stoker.Loader(DrawsUnpicklable(), batch_size=4, num_workers=2)
    with loader:
        assert loader.info()["executor"] == "thread"
        assert "lambda" in loader.info()["executor_reason"]
        assert sorted(int(v) for b in loader for v in b) == [2 * i for i in range(20)]
    # (the fix named is the lambda's: it was "open files and handles lazily")
    with pytest.raises(TypeError, match="pickling failed.*define the functions it holds at "
                                        "module level"):
        stoker.Loader(DrawsUnpicklable(), batch_size=4, num_workers=2, executor="process")


def test_single_threaded_parent_forks_the_dataset_unpickled():
    code = textwrap.dedent("""
        import stoker, torch
        class Unpicklable(torch.utils.data.Dataset):   # defined in a -c script, holds a lambda
            def __init__(self):
                self.f = lambda i: i * 2
            def __len__(self):
                return 10
            def __getitem__(self, i):
                return self.f(i)
        loader = stoker.Loader(Unpicklable(), batch_size=3, num_workers=2, executor="process")
        print(loader.info()["start_method"], [int(v) for b in loader for v in b])
    """)
    r = run_python(code, timeout=240)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "fork " + str([i * 2 for i in range(10)])


DRAWS = textwrap.dedent("""
    class Draws(torch.utils.data.Dataset):  # draws: "auto" wants worker processes
        def __len__(self):
            return 12
        def __getitem__(self, i):
            random.random()
            return i
""")  # (defined in a test's main program, which imports random and torch)


def test_a_threaded_parent_with_the_dataset_in_the_main_program(tmp_path):
    """The notebook case: a process that already runs other threads (a notebook kernel's) when
    it first needs worker processes gets a fresh interpreter as its fork server, which cannot
    import classes defined in a main program it cannot import again (a notebook cell, python
    -c, a script without a __main__ guard). executor="auto" takes worker threads there with a
    RuntimeWarning that says why and what to do, every sample once (was: the constructor
    raised "TypeError: the worker processes could not be started: AttributeError: Can't get
    attribute ..." for the default settings). The same dataset in a script with the guard runs
    on worker processes (the fresh interpreter imports the script)."""
    body = textwrap.dedent("""
        import random, threading, warnings, stoker, torch
        threading.Thread(target=threading.Event().wait, daemon=True).start()  # a kernel's
    """) + DRAWS + textwrap.dedent("""
        def main():
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                loader = stoker.Loader(Draws(), batch_size=4, num_workers=2)
                got = sorted(int(v) for b in loader for v in b)
            said = [str(x.message) for x in w if "runs on worker threads" in str(x.message)]
            print(loader.info()["executor"], got == list(range(12)), said)
    """)
    r = run_python(body + "main()\n", timeout=240)
    assert r.returncode == 0, r.stderr
    executor, whole, said = r.stdout.strip().split(" ", 2)
    assert (executor, whole) == ("thread", "True"), r.stdout
    assert "its dataset class Draws is defined in the main program" in said and \
        "Define the dataset in a module" in said, said
    script = tmp_path / "train.py"
    script.write_text(body + "if __name__ == '__main__':\n    main()\n")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=240, env=dict(os.environ, PYTHONPATH=PYTHONPATH))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "process True []", r.stdout


def test_code_changed_after_the_fork_server_started_never_runs_old(tmp_path):
    """A class redefined in a later notebook cell (here a python -c program), or a module edited
    and reloaded, while an earlier loader keeps the fork server: its worker processes ran the
    old code (all of the second loader's samples with executor='process', all but the probe's
    first batch with 'auto'), where the DataLoader, forking at iter(), runs the new. Now "auto"
    takes threads with a RuntimeWarning saying why, and executor='process' raises TypeError."""
    mod = tmp_path / "edited_ds.py"
    code = textwrap.dedent("""
        import importlib, random, sys, warnings
        import torch, stoker
        from torch.utils.data import Dataset
        sys.path.insert(0, %r)
        warnings.simplefilter("always")
        SRC = ("import random, torch\\nfrom torch.utils.data import Dataset\\n"
               "class DS(Dataset):\\n    def __len__(self): return 8\\n"
               "    def __getitem__(self, i): return torch.tensor([VERSION + 0 * random.random()])\\n")
        with open(%r, "w") as f:
            f.write(SRC.replace("VERSION", "1"))
        import edited_ds

        class DS(Dataset):
            def __len__(self): return 8
            def __getitem__(self, i): return torch.tensor([1 + 0 * random.random()])

        def values(loader):
            return sorted({float(v) for b in loader for v in b})
        def run(make, ex):
            with warnings.catch_warnings(record=True) as w:
                try:
                    loader = stoker.Loader(make(), batch_size=4, num_workers=2, executor=ex)
                except TypeError as e:
                    return f"TypeError:{'after stoker' + chr(39) + 's fork server started' in str(e)}"
                said = any("after stoker's fork server started" in str(x.message) for x in w)
                return f"{loader.info()['executor']}:{values(loader)}:{said}"
        first = stoker.Loader(DS(), batch_size=4, num_workers=2, executor="process")
        other = stoker.Loader(edited_ds.DS(), batch_size=4, num_workers=2, executor="process")
        print(values(first), values(other), run(DS, "process"))  # unchanged: processes
        class DS(Dataset):
            def __len__(self): return 8
            def __getitem__(self, i): return torch.tensor([2 + 0 * random.random()])
        print(run(DS, "auto"), run(DS, "process"))
        with open(%r, "w") as f:
            f.write(SRC.replace("VERSION", "3"))
        importlib.reload(edited_ds)
        print(run(edited_ds.DS, "auto"), run(edited_ds.DS, "process"))
        """) % (str(tmp_path), str(mod), str(mod))
    r = run_python(code)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split("\n")[:3] == [
        "[1.0] [1.0] process:[1.0]:False",
        "thread:[2.0]:True TypeError:True",
        "thread:[3.0]:True TypeError:True"], (r.stdout, r.stderr[-2000:])


def test_a_threaded_unguarded_script_runs_once_and_its_iterable_on_threads(tmp_path):
    """A script without a __main__ guard that only mentions both names (logging.getLogger(
    __name__), "__main__" in a comment), whose process already runs a thread: its body runs
    once (was: stoker's fresh fork server imported the script again, running its whole body,
    and then failed with "Can't get attribute"), and both a map-style dataset and an
    IterableDataset defined in it run on worker threads with the RuntimeWarning (the iterable
    was: TypeError "the worker processes could not be started")."""
    log = tmp_path / "runs.txt"
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        # a training script, not guarded by `if __name__ == "__main__":`
        import logging, os, random, threading, warnings, stoker, torch
        log = logging.getLogger(__name__)
        with open({str(log)!r}, "a") as f:
            f.write(str(os.getpid()) + "\\n")
        threading.Thread(target=threading.Event().wait, daemon=True).start()  # a heartbeat
    """) + DRAWS + textwrap.dedent("""
        class Stream(torch.utils.data.IterableDataset):
            def __iter__(self):
                info = torch.utils.data.get_worker_info()
                return iter(range(info.id, 12, info.num_workers))
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            out = []
            for ds in (Draws(), Stream()):
                loader = stoker.Loader(ds, batch_size=4, num_workers=2)
                got = sorted(int(v) for b in loader for v in b)
                out.append(f"{loader.info()['executor']}:{got == list(range(12))}")
        said = [x for x in w if "runs on worker threads" in str(x.message)]
        print(*out, len(said), all(x.filename == __file__ for x in said))
    """))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=240, env=dict(os.environ, PYTHONPATH=PYTHONPATH))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["thread:True", "thread:True", "2", "True"], (r.stdout, r.stderr)
    assert len(log.read_text().split()) == 1  # the body ran in this process only


def test_guards_main_reads_the_scripts_top_level():
    from stoker._procpool import _guards_main
    assert _guards_main("def main():\n    pass\nif __name__ == '__main__':\n    main()\n")
    assert _guards_main('if "__main__" == __name__:\n    pass\n')
    assert not _guards_main("import logging\nlog = logging.getLogger(__name__)  # __main__\n")
    assert not _guards_main("def f():\n    if __name__ == '__main__':\n        pass\n")
    assert not _guards_main("if __name__ != '__main__':\n    pass\n")
    assert not _guards_main("if __name__ == '__main__'\n")  # (a syntax error)


def test_a_forked_child_collects_a_closed_loader():
    """A process forked after a loader with Python worker threads was closed (a DataLoader's
    worker, say) and collecting its copy: the threads' Python states were deleted by Python
    after the fork, and deleting them again aborted the child ("double free or corruption")."""
    code = textwrap.dedent("""
        import gc, os, torch, stoker
        class DS(torch.utils.data.Dataset):
            def __len__(self):
                return 64
            def __getitem__(self, i):
                return torch.tensor(i)
        loader = stoker.Loader(DS(), batch_size=8, num_workers=2, executor="thread")
        got = sorted(int(v) for b in loader for v in b)
        loader.close()
        pid = os.fork()
        if pid == 0:
            del loader
            gc.collect()
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print(got == list(range(64)), os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0,
              os.WIFSIGNALED(status) and os.WTERMSIG(status))
    """)
    r = run_python(code, timeout=240)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True True False", (r.stdout, r.stderr)


# ---- batches of other shapes ----

@pytest.mark.parametrize("executor", EXECUTORS)
def test_varying_shapes(executor):
    def pad(samples):
        n = max(len(s) for s in samples)
        return torch.stack([torch.nn.functional.pad(s, (0, n - len(s))) for s in samples])

    got = list(stoker.Loader(Var(), batch_size=3, num_workers=2, executor=executor,
                             collate_fn=pad))
    assert [b.shape for b in got] == [(3, 3), (3, 6), (3, 9), (1, 10)]
    assert got[1][2].tolist() == [0, 1, 2, 3, 4, 5]
    one = list(stoker.Loader(Var(), batch_size=1, num_workers=2, executor=executor))
    assert [b.shape for b in one] == [(1, i + 1) for i in range(10)]
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        list(stoker.Loader(Var(), batch_size=3, num_workers=2, executor=executor))


def test_unbatched_and_batch_sampler():
    unb = list(stoker.Loader(Plain(5), batch_size=None, num_workers=1))
    assert [(x.shape, y) for x, y in unb] == [((3, 4), i) for i in range(5)]
    groups = [[4, 0], [3], [1, 2, 5], [6]]
    got = [y.tolist() for _, y in stoker.Loader(Plain(7), batch_sampler=groups, num_workers=2)]
    assert got == groups
    even = [[6, 5], [4, 3], [2]]
    loader = stoker.Loader(Plain(7), batch_sampler=even, num_workers=2)
    assert len(loader) == 3 and [y.tolist() for _, y in loader] == even


def test_arguments():
    with pytest.raises(ValueError, match="empty"):
        stoker.Loader(Plain(0), batch_size=2)
    assert labels(epoch(stoker.Loader(dataset=Plain(6), batch_size=4))) == list(range(6))
    with pytest.raises(ValueError, match="once"):
        stoker.Loader(Plain(6), dataset=Plain(6))
    with pytest.raises(ValueError, match="executor"):
        stoker.Loader(Plain(6), executor="gpu")
    with pytest.raises(ValueError, match="transforms"):
        stoker.Loader(Plain(6), transforms="imagenet-train")
    with pytest.raises(ValueError, match="persistent_workers"):
        stoker.Loader(Plain(6), num_workers=0, persistent_workers=True)
    with pytest.raises(ValueError, match="mutually exclusive"):
        stoker.Loader(Plain(6), batch_sampler=[[0]], batch_size=3)
    if not torch.cuda.is_available():
        with pytest.warns(UserWarning, match="pin_memory"):
            stoker.Loader(Plain(6), batch_size=2, pin_memory=True).close()


# ---- iterable datasets ----

class Shards(IterableDataset):
    """Counts 0..n-1, split among the workers by get_worker_info(); resumable."""

    def __init__(self, n=23):
        self.n, self.pos = n, 0

    def __iter__(self):
        info = get_worker_info()
        wid, nw = (0, 1) if info is None else (info.id, info.num_workers)
        start = self.pos
        for k, v in enumerate(range(wid, self.n, nw)):
            if k >= start:
                self.pos = k + 1
                yield v
        self.pos = 0

    def state_dict(self):
        return {"pos": self.pos}

    def load_state_dict(self, st):
        self.pos = st["pos"]


class NoState(IterableDataset):
    def __iter__(self):
        return iter(range(5))


@pytest.mark.parametrize("executor", EXECUTORS)
def test_iterable_shards_and_resume(executor):
    loader = stoker.Loader(Shards(), batch_size=3, num_workers=2, executor=executor)
    assert loader.info()["executor"] == executor
    full = [b.tolist() for b in loader]
    assert sorted(sum(full, [])) == list(range(23))
    assert full[0] == [0, 2, 4] and full[1] == [1, 3, 5]  # round-robin over the workers
    it = iter(loader)
    head = [next(it).tolist() for _ in range(3)]
    st = loader.state_dict()
    rest = [b.tolist() for b in it]
    assert head + rest == full
    again = stoker.Loader(Shards(), batch_size=3, num_workers=2, executor=executor)
    again.load_state_dict(st)
    assert [b.tolist() for b in again] == rest
    plain = stoker.Loader(NoState(), batch_size=2, num_workers=1, executor=executor)
    assert [b.tolist() for b in plain] == [[0, 1], [2, 3], [4]]
    with pytest.raises(stoker.StokerNotSupportedError, match="state_dict"):
        plain.state_dict()


def test_iterable_state_at_an_epoch_boundary_and_its_errors():
    """state_dict() of a resumable IterableDataset's loader before its first pass and after a
    whole epoch (was: TypeError "'NoneType' object is not iterable", the checkpoint after each
    epoch of the docs' quick start): the next epoch from its start, into any num_workers. A
    mid-epoch state into another worker count, and a state of another kind, say what is wrong
    (was: "it needs the same num_workers, N" with this loader's N either way)."""
    loader = stoker.Loader(Shards(), batch_size=3, num_workers=2)
    fresh = loader.state_dict()
    full = [b.tolist() for b in loader]
    after = loader.state_dict()
    assert (fresh["epoch"], after["epoch"]) == (0, 1)
    for workers in (2, 1):
        again = stoker.Loader(Shards(), batch_size=3, num_workers=workers)
        again.load_state_dict(after)
        assert sorted(sum((b.tolist() for b in again), [])) == sorted(sum(full, []))
        assert again.state_dict()["epoch"] == 2
        again.close()
    it = iter(loader)
    next(it)
    mid = loader.state_dict()
    other = stoker.Loader(Shards(), batch_size=3, num_workers=1)
    with pytest.raises(stoker.StokerInvalidError, match="taken mid-epoch with 2 workers and "
                                                        "this loader has 1"):
        other.load_state_dict(mid)
    with pytest.raises(stoker.StokerInvalidError, match="not a state of a loader over an "
                                                        "IterableDataset"):
        other.load_state_dict(stoker.Loader(Plain(4), batch_size=2).state_dict())
    other.close()
    loader.close()


class NoisyShards(Shards):
    """Shards with a random draw per item from each global generator; resumable."""

    def __iter__(self):
        for v in super().__iter__():
            yield v, random.random(), float(np.random.rand()), float(torch.rand(()))


def test_a_resumed_iterable_draws_what_it_would_have_drawn():
    # A worker process's generators were seeded once per epoch, so a replica resumed mid-epoch
    # drew the epoch's first numbers again (0 of 28 resumed items had their own); they are now
    # seeded again per (seed, epoch, worker, batch), and the state keeps each worker's count.
    def items(batches):
        return [tuple(float(x[k]) for x in b) for b in batches for k in range(len(b[0]))]
    def make():
        return stoker.Loader(NoisyShards(), batch_size=3, num_workers=2, executor="process",
                             seed=5)
    loader = make()
    full = items(loader)
    assert len(full) == 23 and len({x[1] for x in full}) == 23
    loader.close()
    loader = make()
    it = iter(loader)
    head = items([next(it) for _ in range(3)])
    st = loader.state_dict()
    assert st["drawn"] == [2, 1]
    loader.close()
    again = make()
    again.load_state_dict(st)
    assert head + items(again) == full
    with pytest.raises(stoker.StokerInvalidError, match="not one batch count per worker"):
        again.load_state_dict(dict(st, drawn=[1]))
    again.close()


class ShuffledShards(IterableDataset):
    """Shuffles its worker's shard with random.Random(get_worker_info().seed), the usual way."""

    def __iter__(self):
        info = get_worker_info()
        shard = list(range(info.id, 40, info.num_workers))
        random.Random(info.seed).shuffle(shard)
        return iter(shard)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_worker_info_seed_changes_with_the_epoch(executor):
    # The DataLoader's workers, started anew each epoch, get a new seed each epoch; stoker's
    # persistent workers kept theirs, so this shuffle was the same every epoch
    loader = stoker.Loader(ShuffledShards(), batch_size=4, num_workers=2, executor=executor)
    orders = [[int(v) for b in loader for v in b] for _ in range(3)]
    assert all(sorted(o) == list(range(40)) for o in orders)
    assert orders[0] != orders[1] and orders[1] != orders[2]
    again = stoker.Loader(ShuffledShards(), batch_size=4, num_workers=2, executor=executor,
                          seed=loader.seed)
    assert [int(v) for b in again for v in b] == orders[0]  # (a function of the seed)
    again.set_epoch(2)
    assert [int(v) for b in again for v in b] == orders[2]
    loader.close()
    again.close()


class QuietShards(Shards):
    """Shards drawing from torch's generator once per item (where the DataLoader's main process
    draws it, at num_workers=0)."""

    def __iter__(self):
        for v in super().__iter__():
            yield v, float(torch.rand(()))


def test_an_iterable_at_num_workers_0_leaves_the_training_loops_generators():
    # On the worker thread of num_workers=0 (the default for an IterableDataset) the global
    # generators were seeded per epoch: the training loop's own draws after torch.manual_seed
    # were the same for any seed, and a dataset that drew got other numbers than under the
    # DataLoader. The thread now leaves them as they are, as the DataLoader's main process does.
    def after_an_epoch(make):
        torch.manual_seed(100)
        random.seed(100)
        np.random.seed(100)
        got = [b[1].tolist() for b in make(QuietShards())]
        return got, (torch.rand(()).item(), random.random(), float(np.random.rand()))
    want = after_an_epoch(lambda ds: torch.utils.data.DataLoader(ds, batch_size=4))
    got = after_an_epoch(lambda ds: stoker.Loader(ds, batch_size=4))
    assert got == want and len(want[0]) == 6


# ---- map= returning bytes (the one-name switch's native path) ----

def test_map_returning_the_sample_unchanged(tmp_path):
    path = str(tmp_path / "a.stk")
    stoker.write_shard(path, {"image": "bytes", "label": "int64"},
                       ({"image": bytes([i]) * (i + 1), "label": i} for i in range(10)))
    plain = [(b.bytes("image"), b["label"].tolist()) for b in stoker.Loader(path, 4)]
    mapped = [(b.bytes("image"), b["label"].tolist())
              for b in stoker.Loader(path, 4, map=lambda s: s)]
    assert mapped == plain
    grow = {"image": lambda s: {"image": s["image"] * (100 if s["label"] == 5 else 1)}}
    it = iter(stoker.Loader(path, 4, map=grow["image"]))
    next(it)
    with pytest.raises(stoker.StokerFormatError, match="record 5.*600 bytes, more than the 64"):
        next(it)


Pair = collections.namedtuple("Pair", "x y")


def test_probe_pickles_a_view_without_its_storage():
    # a sample that is a view into the dataset's memory (self.images[i]) pickles its whole
    # storage; the probe sends the first sample to the constructing process pickled, so it
    # sends the view's own elements only (36 MB -> 0.6 MB for bench_pydataset.py's tensor224)
    images = torch.arange(64 * 300.0).reshape(64, 300)
    arrays = np.arange(64 * 300.0).reshape(64, 300)
    whole = torch.arange(5)
    sample = {"t": images[3], "a": arrays[5], "n": Pair(images[1:3], 7), "l": [whole, "s"]}
    got = _procpool.own_storage(sample)
    assert len(pickle.dumps(sample)) > len(pickle.dumps(images))  # the views carry it all
    own = 300 * 4 + 300 * 8 + 2 * 300 * 4 + 5 * 8  # the elements the sample shows
    assert len(pickle.dumps(got)) < 2 * own
    assert torch.equal(got["t"], images[3]) and np.array_equal(got["a"], arrays[5])
    assert type(got["n"]) is Pair and torch.equal(got["n"].x, images[1:3]) and got["n"].y == 7
    assert got["l"][0] is whole and got["l"][1] == "s"  # owns its storage: kept as it is
    assert _procpool.own_storage(sample["l"]) is sample["l"]
    assert images.sum().item() == sum(range(64 * 300))  # the dataset's memory untouched


class Views(Dataset):
    def __init__(self):
        self.images = torch.arange(16 * 6.0).reshape(16, 2, 3)

    def __len__(self):
        return 16

    def __getitem__(self, i):
        return self.images[i], i


def test_views_into_the_dataset_load_in_worker_processes():
    loader = stoker.Loader(Views(), batch_size=4, num_workers=2, executor="process")
    got = [(x.clone(), y.tolist()) for x, y in loader]
    loader.close()
    assert [i for _, y in got for i in y] == list(range(16))
    assert torch.equal(torch.cat([x for x, _ in got]), Views().images)


def test_threads_stop_before_the_exit_handlers_of_earlier_imports():
    # a library the dataset imported before the loader was made registered its exit handler
    # first (h5py's holds HDF5's lock and takes the GIL: with a worker thread inside h5py,
    # holding the GIL and waiting for that lock, the process hung at exit); stoker closes a
    # loader left open before such handlers run
    code = textwrap.dedent("""
        import atexit, stoker, torch
        class DS(torch.utils.data.Dataset):
            def __len__(self):
                return 64
            def __getitem__(self, i):
                return i
        made = []
        atexit.register(lambda: print("closed before the library's handler:", made[0].closed))
        made.append(stoker.Loader(DS(), batch_size=4, num_workers=1, executor="thread"))
        print(next(iter(made[0])).tolist())
    """)
    r = run_python(code, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["[0, 1, 2, 3]", "closed before the library's handler: True"]

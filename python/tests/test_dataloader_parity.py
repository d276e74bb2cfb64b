"""DataLoader parity (issue 24): the same scenarios through torch.utils.data.DataLoader and
stoker.Loader, asserting equal results: structures and dtypes, len, order without shuffle,
samplers and batch samplers, drop_last, collate_fn, worker_init_fn, get_worker_info,
IterableDataset sharding, multiprocessing contexts and errors. Scenarios in the spirit of
PyTorch's own test/test_dataloader.py (CountingDataset, WorkerSpecificIterableDataset, the
worker_init_fn seed, the non-batched iterable that keeps ints); the code is this project's.

The one documented difference: a shuffled order is stoker's permutation of (seed, epoch), not
the DataLoader's torch.randperm stream, so shuffled runs compare the samples each epoch holds."""
import collections
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import (BatchSampler, ChainDataset, ConcatDataset, DataLoader,  # noqa
                              Dataset, DistributedSampler, IterableDataset, RandomSampler,
                              SequentialSampler, Subset, SubsetRandomSampler, TensorDataset,
                              WeightedRandomSampler, get_worker_info)

import stoker  # noqa: E402

EXECUTORS = ["thread", "process"]
Point = collections.namedtuple("Point", "x y")


def same(a, b, path="batch"):
    """a (stoker's) equals b (the DataLoader's): same types, dtypes, shapes and values."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(b, torch.Tensor):
        assert a.dtype == b.dtype, f"{path}: {a.dtype} != {b.dtype}"
        assert a.shape == b.shape, f"{path}: {tuple(a.shape)} != {tuple(b.shape)}"
        assert torch.equal(a, b), f"{path}: {a} != {b}"
    elif isinstance(b, dict):
        assert list(a) == list(b), f"{path}: keys {list(a)} != {list(b)}"
        for k in b:
            same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(b, (list, tuple)):
        assert len(a) == len(b), f"{path}: {len(a)} != {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def both(ds, executor=None, **kw):
    """(stoker's epoch, the DataLoader's epoch) with the same arguments."""
    s = stoker.Loader(ds, executor=executor or "thread", **kw)
    got = list(s)
    s.close()
    return got, list(DataLoader(ds, **kw))


def assert_equal_runs(ds, executor=None, **kw):
    got, want = both(ds, executor, **kw)
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        same(a, b, f"batch {i}")
    return got


# ---- datasets (module level: worker processes import them) ----

class Counting(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


class Structured(Dataset):
    def __len__(self):
        return 13

    def __getitem__(self, i):
        return {"img": torch.full((2, 3), float(i)), "arr": np.arange(3, dtype=np.uint8) + i,
                "npf": np.float64(i) / 4, "npi": np.int32(-i), "npb": np.bool_(i % 3 == 0),
                "f": i / 8, "i": i * 1000, "b": i % 2 == 1, "s": f"n{i}", "by": b"b" * (i % 4),
                "pt": Point(i, [i, i + 1]), "tup": (torch.tensor(i), "x"),
                "nested": [{"k": torch.arange(i, i + 2, dtype=torch.float16)}]}


class SeedDataset(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.initial_seed()


def init_fn(worker_id):
    torch.manual_seed(12345)


class WorkerInfoDataset(Dataset):
    def __len__(self):
        return 12

    def __getitem__(self, i):
        info = get_worker_info()
        assert info is not None and 0 <= info.id < info.num_workers
        assert info.dataset is not None and len(info.dataset) == 12
        return info.num_workers


class CountingIterable(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self):
        return self.n


class WorkerSpecificIterable(IterableDataset):
    """Worker k yields range(sizes[k])."""

    def __init__(self, sizes):
        self.sizes = sizes

    def __iter__(self):
        info = get_worker_info()
        assert info is not None
        return iter(range(self.sizes[info.id]))


class Sharded(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        if info is None:
            return iter(range(self.n))
        per = math.ceil(self.n / info.num_workers)
        return iter(range(info.id * per, min(self.n, (info.id + 1) * per)))


class Bad(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        if i == 6:
            raise IndexError("index 6 is out of this world")
        return i


class BadIterable(IterableDataset):
    def __iter__(self):
        yield 1
        raise ZeroDivisionError("in the iterator")


class NoneSample(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return {"x": i, "y": None}


# ---- map-style ----

@pytest.mark.parametrize("executor", EXECUTORS)
def test_structures_and_dtypes(executor):
    assert_equal_runs(Structured(), executor, batch_size=4, num_workers=2)


@pytest.mark.parametrize("bs,drop_last", [(1, False), (3, False), (3, True), (7, True),
                                          (20, False), (20, True)])
def test_order_len_drop_last(bs, drop_last):
    ds = TensorDataset(torch.arange(17, dtype=torch.float32).view(17, 1), torch.arange(17))
    if bs == 20 and drop_last:  # no batch at all: both loaders yield nothing
        assert len(stoker.Loader(ds, batch_size=bs, drop_last=True, executor="thread")) == 0
        assert len(DataLoader(ds, batch_size=bs, drop_last=True)) == 0
        return
    s = stoker.Loader(ds, batch_size=bs, drop_last=drop_last, num_workers=2, executor="thread")
    assert len(s) == len(DataLoader(ds, batch_size=bs, drop_last=drop_last))
    assert_equal_runs(ds, batch_size=bs, drop_last=drop_last, num_workers=2)


def test_subset_concat_and_default_batch_size():
    base = TensorDataset(torch.arange(10) * 2)
    for ds in (Subset(base, [9, 1, 4, 4, 0]),
               ConcatDataset([base, TensorDataset(torch.arange(3) - 5)])):
        assert_equal_runs(ds)              # batch_size=1, the DataLoader's default
        assert_equal_runs(ds, batch_size=3, num_workers=1)


def test_unbatched():
    assert_equal_runs(Counting(5), batch_size=None)
    got = list(stoker.Loader(Counting(5), batch_size=None, executor="thread"))
    assert got == [0, 1, 2, 3, 4] and all(type(x) is int for x in got)  # ints stay ints


def test_samplers_and_batch_samplers():
    ds = Counting(11)
    assert_equal_runs(ds, batch_size=3, sampler=SequentialSampler(ds))
    assert_equal_runs(ds, batch_size=2, sampler=[3, 1, 4, 1, 5, 9, 2, 6])  # custom: its order
    assert_equal_runs(ds, batch_sampler=BatchSampler(SequentialSampler(ds), 4, False))
    assert_equal_runs(ds, batch_sampler=BatchSampler(SequentialSampler(ds), 4, True))
    assert_equal_runs(ds, batch_sampler=[[0, 1, 2], [10], [5, 6]])  # batches of any size
    for sampler in (SubsetRandomSampler([1, 3, 5, 7]),
                    RandomSampler(ds, generator=torch.Generator().manual_seed(3))):
        got, want = both(ds, batch_size=2, sampler=sampler)
        assert sorted(torch.cat(got).tolist()) == sorted(torch.cat(want).tolist())
    w = WeightedRandomSampler([0.0] * 5 + [1.0] * 6, num_samples=9, replacement=True)
    got, want = both(ds, batch_size=4, sampler=w)
    assert [len(b) for b in got] == [len(b) for b in want] == [4, 4, 1]
    assert all(v >= 5 for v in torch.cat(got).tolist())


def test_shuffle_holds_every_sample_and_follows_the_generator():
    ds = Counting(30)
    got, want = both(ds, batch_size=4, shuffle=True)
    assert sorted(torch.cat(got).tolist()) == sorted(torch.cat(want).tolist()) == list(range(30))
    runs = []
    for _ in range(2):
        s = stoker.Loader(ds, batch_size=4, shuffle=True, executor="thread",
                          generator=torch.Generator().manual_seed(42))
        runs.append([torch.cat(list(s)).tolist() for _ in range(2)])
    assert runs[0] == runs[1]                 # the same generator seed: the same epochs
    assert runs[0][0] != runs[0][1]           # and each epoch its own order


def test_distributed_sampler_covers_the_same_samples():
    ds = Counting(23)
    mine, theirs = [], []
    for r in range(3):
        got, want = both(ds, batch_size=4, sampler=DistributedSampler(ds, num_replicas=3,
                                                                      rank=r, shuffle=False))
        assert sum(map(len, got)) == sum(map(len, want)) == 8  # ceil(23 / 3), padded
        mine += torch.cat(got).tolist()
        theirs += torch.cat(want).tolist()
    assert sorted(mine) == sorted(theirs)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_collate_fn_gets_the_samples(executor):
    def collate(samples):
        return {"n": len(samples), "sum": sum(s["i"] for s in samples),
                "names": [s["s"] for s in samples], "img": torch.stack([s["img"] for s in samples])}
    assert_equal_runs(Structured(), executor, batch_size=5, collate_fn=collate, num_workers=2)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_worker_init_fn_and_get_worker_info(executor):
    got = torch.cat(list(stoker.Loader(SeedDataset(4), batch_size=2, num_workers=2,
                                       worker_init_fn=init_fn, executor=executor,
                                       reseed=False)))
    want = torch.cat(list(DataLoader(SeedDataset(4), batch_size=2, num_workers=2,
                                     worker_init_fn=init_fn)))
    assert got.tolist() == want.tolist() == [12345] * 4
    assert_equal_runs(WorkerInfoDataset(), executor, batch_size=5, num_workers=3)
    assert get_worker_info() is None


@pytest.mark.parametrize("ctx", [None, "fork", "spawn", "forkserver"])
def test_multiprocessing_contexts(ctx):
    import multiprocessing as mp
    for c in ([ctx] if ctx is None else [ctx, mp.get_context(ctx)]):
        got = list(stoker.Loader(Counting(11), batch_size=3, num_workers=3, executor="process",
                                 multiprocessing_context=c))
        assert [b.tolist() for b in got] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10]]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_errors_are_the_dataloaders(executor):
    def run(loader):
        out = []
        it = iter(loader)
        while True:
            try:
                out.append(next(it).tolist())
            except StopIteration:
                return out
            except Exception as e:  # noqa: BLE001
                out.append((type(e), "index 6 is out of this world" in str(e)))
    s = stoker.Loader(Bad(), batch_size=3, num_workers=2, executor=executor)
    d = DataLoader(Bad(), batch_size=3, num_workers=2)
    assert run(s) == run(d) == [[0, 1, 2], [3, 4, 5], (IndexError, True), [9]]
    with pytest.raises(TypeError) as a:
        list(stoker.Loader(NoneSample(), batch_size=2, executor=executor))
    with pytest.raises(TypeError) as b:
        list(DataLoader(NoneSample(), batch_size=2))
    assert str(a.value) == str(b.value)


def test_argument_errors_are_the_dataloaders():
    for kw in (dict(num_workers=-1), dict(timeout=-1), dict(sampler=[0], shuffle=True),
               dict(batch_sampler=[[0]], batch_size=2), dict(batch_size=None, drop_last=True),
               dict(persistent_workers=True, num_workers=0)):
        with pytest.raises(ValueError):
            DataLoader(Counting(3), **kw)
        with pytest.raises(ValueError):
            stoker.Loader(Counting(3), **kw)


# ---- iterable-style ----

@pytest.mark.parametrize("executor", EXECUTORS)
def test_iterable_unbatched_keeps_ints(executor):
    s = stoker.Loader(CountingIterable(20), batch_size=None, executor=executor, num_workers=0)
    got = list(s)
    assert got == list(range(20)) and all(type(x) is int for x in got)
    assert len(s) == 20 == len(DataLoader(CountingIterable(20), batch_size=None))


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("drop_last", [False, True])
def test_iterable_worker_specific_sizes(executor, drop_last):
    ds = WorkerSpecificIterable([0, 4, 20])
    got, want = both(ds, executor, batch_size=7, num_workers=3, drop_last=drop_last)
    assert [b.tolist() for b in got] == [b.tolist() for b in want]
    assert {tuple(b.tolist()) for b in got} == (
        {tuple(range(7)), tuple(range(7, 14))} if drop_last else
        {tuple(range(4)), tuple(range(7)), tuple(range(7, 14)), tuple(range(14, 20))})


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("workers", [0, 1, 3])
def test_iterable_sharding_order(executor, workers):
    assert_equal_runs(Sharded(25), executor, batch_size=4, num_workers=workers)
    assert_equal_runs(ChainDataset([CountingIterable(5), CountingIterable(3)]), executor,
                      batch_size=3, num_workers=min(workers, 1))


@pytest.mark.parametrize("executor", EXECUTORS)
def test_iterable_errors(executor):
    for loader in (stoker.Loader(BadIterable(), batch_size=None, num_workers=1,
                                 executor=executor),
                   DataLoader(BadIterable(), batch_size=None, num_workers=1)):
        it = iter(loader)
        assert next(it) == 1
        with pytest.raises(ZeroDivisionError, match="in the iterator"):
            next(it)
    with pytest.raises(ValueError, match="shuffle"):
        stoker.Loader(CountingIterable(3), shuffle=True)
    with pytest.raises(ValueError, match="sampler"):
        stoker.Loader(CountingIterable(3), sampler=[0])

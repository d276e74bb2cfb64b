"""DataLoader parity (issue 24): the same scenarios through torch.utils.data.DataLoader and
stoker.Loader, asserting equal results: structures and dtypes, len, order without shuffle,
samplers and batch samplers, drop_last, collate_fn, worker_init_fn, get_worker_info,
IterableDataset sharding, multiprocessing contexts and errors. Scenarios in the spirit of
PyTorch's own test/test_dataloader.py (CountingDataset, WorkerSpecificIterableDataset, the
worker_init_fn seed, the non-batched iterable that keeps ints); the code is this project's.

The one documented difference: a shuffled order is stoker's permutation of (seed, epoch), not
the DataLoader's torch.randperm stream, so shuffled runs compare the samples each epoch holds."""
import collections
import gc
import itertools
import math
import os
import pickle
import warnings

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


_MADE = []


def mk(ds, executor="thread", **kw):
    """stoker.Loader(ds, executor=executor, **kw), closed after the test (_close_made)."""
    loader = stoker.Loader(ds, executor=executor, **kw)
    _MADE.append(loader)
    return loader


@pytest.fixture(autouse=True)
def _close_made():
    """Every loader mk() made is closed after its test: none of its threads or worker
    processes outlive the test. (This is what found a forked child aborting on a closed
    loader's thread states: test_pydataset.py's test_a_forked_child_collects_a_closed_loader.)"""
    yield
    while _MADE:
        _MADE.pop().close()


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


class Plain(IterableDataset):
    """An IterableDataset that does not shard itself (the articles' kind)."""
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter(range(self.n))


class CountingIterable(Plain):
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


class NumpySample(Dataset):
    def __len__(self):
        return 5

    def __getitem__(self, i):
        return {"a": np.arange(3, dtype=np.int16) + i, "s": np.float32(i) / 2, "l": [np.int8(i)],
                "t": (np.ones(2) * i, "name")}


class MaybeNone(Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        return None if i % 3 == 1 else i


class VarLen(Dataset):
    def __len__(self):
        return 7

    def __getitem__(self, i):
        return torch.arange(i % 4 + 1, dtype=torch.float32), i


class Detection(Dataset):
    """torchvision's detection tutorial's shape of sample: an image and a target dict whose
    boxes and labels have one row per object; the first sample of every batch has as many
    objects as the first sample of all (the layout's), the others another count."""

    def __len__(self):
        return 24

    def __getitem__(self, i):
        n = 2 if i % 4 == 0 else 1 + i % 3
        return (torch.full((3, 4, 4), float(i)),
                {"boxes": torch.arange(n * 4, dtype=torch.float32).reshape(n, 4) + i,
                 "labels": torch.full((n,), i, dtype=torch.int64)})


class MixedNumbers(Dataset):
    """A float for even indices, an int for odd ones; a float32 array, or float64 every third
    sample: default_collate takes the first sample's type and promotes."""

    def __len__(self):
        return 12

    def __getitem__(self, i):
        return (float(i) if i % 2 == 0 else i,
                np.full(2, i, dtype=np.float64 if i % 3 == 1 else np.float32))


def detection_collate(batch):  # the tutorial's utils.collate_fn
    return tuple(zip(*batch))


def pad_collate(batch):
    xs, ys = zip(*batch)
    return (torch.nn.utils.rnn.pad_sequence(xs, batch_first=True),
            torch.tensor([len(x) for x in xs]), torch.tensor(ys))


def drop_none_collate(batch):  # the common "filter the bad samples" collate_fn
    batch = [b for b in batch if b is not None]
    return torch.utils.data.default_collate(batch) if batch else None


class Ints(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return i


class Floats(Dataset):
    def __len__(self):
        return 3

    def __getitem__(self, i):
        return float(i) + 0.5


class KeyedByList(Dataset):
    """A dataset a sampler hands lists of indices (the batched fetch of batch_size=None)."""
    def __len__(self):
        return 10

    def __getitem__(self, idx):
        return torch.tensor(idx) * 10


class Mutable(Dataset):
    def __init__(self):
        self.value = 0

    def __len__(self):
        return 6

    def __getitem__(self, i):
        return self.value


class Pinnable:
    """A custom batch type, as in the DataLoader's docs ("memory pinning")."""
    def __init__(self, samples):
        self.inp = torch.stack([torch.tensor([s]) for s in samples])
        self.pinned = False

    def pin_memory(self):
        self.pinned = True
        self.inp = self.inp.pin_memory()
        return self


def pinnable_collate(samples):
    return Pinnable(samples)


class CifarLike(Dataset):
    """torchvision's CIFAR10 in miniature: uint8 HWC images in memory, PIL, a transform."""
    def __init__(self, transform):
        g = np.random.default_rng(0)
        self.data = g.integers(0, 256, (10, 8, 8, 3), dtype=np.uint8)
        self.targets = [int(t) for t in g.integers(0, 10, 10)]
        self.transform = transform

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        from PIL import Image
        return self.transform(Image.fromarray(self.data[i])), self.targets[i]


class MyDict(dict):
    pass


class MyList(list):
    pass


SAMPLES = {  # name: sample i (default_collate's corner cases, as PyTorch's test_dataloader has)
    "OrderedDict": lambda i: collections.OrderedDict([("b", i), ("a", torch.tensor([i]))]),
    "dict subclass": lambda i: MyDict(x=i, y=[i, i]),
    "list subclass": lambda i: MyList([i, float(i)]),
    "deque": lambda i: collections.deque([i, i + 1]),
    "set": lambda i: {i},
    "ragged list": lambda i: [1] * (i % 2 + 1),
    "numpy str array": lambda i: np.array(["a", "b"]),
    "numpy object array": lambda i: np.array([1, "x"], dtype=object),
    "numpy str_": lambda i: np.str_(f"s{i}"),
    "big-endian array": lambda i: np.arange(3, dtype=">i4") + i,
    "numpy bool array": lambda i: np.array([True, False]) ^ bool(i % 2),
    "float16 array, int64": lambda i: (np.zeros((2, 2), np.float16) + i, np.int64(i)),
    "non-contiguous tensor": lambda i: torch.arange(12.).view(3, 4).t()[:, :2] + i,
    "bfloat16": lambda i: torch.ones(2, dtype=torch.bfloat16) * i,
    "complex64": lambda i: torch.ones(2, dtype=torch.complex64) * i,
    "0-dim tensor": lambda i: torch.tensor(float(i)),
    "empty tensor": lambda i: torch.empty(0, 3),
    "sparse tensor": lambda i: torch.eye(2).to_sparse(),
}
ARRAY_SAMPLES = ["big-endian array", "numpy bool array", "float16 array, int64",
                 "non-contiguous tensor", "bfloat16", "complex64", "0-dim tensor"]


class Kind(Dataset):
    """SAMPLES[name](i) for i < 4."""
    def __init__(self, name):
        self.name = name

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return SAMPLES[self.name](i)


# ---- map-style ----

@pytest.mark.parametrize("executor", EXECUTORS)
def test_structures_and_dtypes(executor):
    assert_equal_runs(Structured(), executor, batch_size=4, num_workers=2)


class Drifting(Dataset):
    """A tuple of tensors and numbers (what a worker process's C loop writes itself,
    _ext/_ticketloop.c), then samples that leave that path each another way: a column of the
    same shape (not contiguous), another dtype, a tensor for an int, a float tensor for an int one, a string
    for a bool, an array of another shape, a shorter and a longer tuple, a list. (A tensor that
    requires grad is left out: the DataLoader's workers fail to stack it.)"""
    base = torch.arange(24.).view(4, 6)
    first = (base[1], torch.tensor(3), 7, 2.5, True, np.float32(1.5), np.zeros(2, np.int16))

    def __len__(self):
        return 11

    def __getitem__(self, i):
        f, b = self.first, self.base
        return [f, (b[2] + i, torch.tensor(i), -i, i / 2, bool(i % 2), np.float32(i),
                    np.ones(2, np.int16)),
                (torch.arange(12.).view(6, 2)[:, 1],) + f[1:], (b[1].double(),) + f[1:],
                f[:2] + (torch.tensor(7),) + f[3:], (b[1], torch.tensor(3.0)) + f[2:],
                f[:4] + ("x",) + f[5:], f[:6] + (np.zeros(3, np.int16),), f[:-1], f + (1,),
                list(f)][i]


class DriftingDict(Dataset):
    """Drifting's idea for a dict of fixed leaves (the C loop writes those too): then the keys
    in another order, a key more, a key less, another key, an OrderedDict, a value of another
    dtype, a column of the same shape."""
    img = torch.arange(12.).view(3, 4)

    def __len__(self):
        return 9

    def __getitem__(self, i):
        first = {"img": self.img[1] + i, "y": i, "w": i / 4}
        return [first, {"img": self.img[2], "y": -i, "w": 0.5},
                {"y": i, "img": self.img[1], "w": 1.0}, dict(first, z=1),
                {"img": self.img[1], "y": i}, {"img": self.img[1], "y": i, "v": 1.0},
                collections.OrderedDict(first), dict(first, img=self.img[1].long()),
                dict(first, img=torch.arange(8.).view(4, 2)[:, 0])][i]


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("ds", [Drifting, DriftingDict])
def test_samples_that_leave_the_fast_path(executor, ds):
    got, want = both(ds(), executor, batch_size=1, num_workers=2)
    assert len(got) == len(want) == len(ds())
    for i, (a, b) in enumerate(zip(got, want)):
        same(a, b, f"sample {i}")


@pytest.mark.parametrize("bs,drop_last", [(1, False), (3, False), (3, True), (7, True),
                                          (20, False), (20, True)])
def test_order_len_drop_last(bs, drop_last):
    ds = TensorDataset(torch.arange(17, dtype=torch.float32).view(17, 1), torch.arange(17))
    if bs == 20 and drop_last:  # no batch at all: both loaders yield nothing
        assert len(mk(ds, batch_size=bs, drop_last=True)) == 0
        assert len(DataLoader(ds, batch_size=bs, drop_last=True)) == 0
        return
    s = mk(ds, batch_size=bs, drop_last=drop_last, num_workers=2)
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
    got = list(mk(Counting(5), batch_size=None))
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


class _Buckets(torch.utils.data.Sampler):
    """A bucketing batch_sampler as NLP scripts write them: batches of 1 to 5 consecutive
    indices, in an order drawn from (seed, epoch); `advance`: its __iter__ moves its own epoch
    on (set_epoch is there too). `claimed`: what its __len__ says."""

    def __init__(self, n, advance=False, claimed=None):
        self.n, self.advance, self.claimed, self.epoch = n, advance, claimed, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        import random
        rng, out, i = random.Random(self.epoch), [], 0
        while i < self.n:
            k = rng.randint(1, 5)
            out.append(list(range(i, min(i + k, self.n))))
            i += k
        rng.shuffle(out)
        if self.advance:
            self.epoch += 1
        return iter(out)

    def __len__(self):
        return self.claimed if self.claimed is not None else sum(1 for _ in self.__iter__())


@pytest.mark.parametrize("executor", EXECUTORS)
def test_batch_sampler_epochs_len_and_resume(executor):
    """A bucketing batch_sampler (batches of several sizes): a resume mid-epoch gives the
    uninterrupted run's batches (was: the batches cut again at the epoch's first sizes,
    mixing buckets, then StokerStateError 'the epoch ended inside a batch'); one whose __iter__
    moves its own epoch on delivers its epochs 0, 1, 2 as the DataLoader (was: 1, 2, 3: the
    constructor's iteration taken for the user's set_epoch); len(loader) is len(batch_sampler)
    as the DataLoader's (was: the batches of the constructor's pass)."""
    ds = Counting(40)
    whole = [[b.tolist() for b in mk(ds, executor, batch_sampler=_Buckets(40))]]
    assert len({len(b) for b in whole[0]}) > 1  # batches of several sizes
    for stop in (1, 2, 5):
        a = mk(ds, executor, batch_sampler=_Buckets(40))
        it = iter(a)
        head = [next(it).tolist() for _ in range(stop)]
        state = a.state_dict()
        b = mk(ds, executor, batch_sampler=_Buckets(40))
        b.load_state_dict(state)
        assert head + [x.tolist() for x in b] == whole[0], stop
        assert [x.tolist() for x in b] != whole[0]  # its next epoch: another order
    b = mk(ds, executor, batch_sampler=_Buckets(40))
    b.load_state_dict(dict(state, consumed=state["consumed"] + 1))  # inside a batch
    with pytest.raises(stoker.StokerStateError, match="falls inside a batch"):
        iter(b)
    dl = DataLoader(ds, batch_sampler=_Buckets(40, advance=True))
    want = [[x.tolist() for x in dl] for _ in range(3)]
    s = mk(ds, executor, batch_sampler=_Buckets(40, advance=True))
    assert [[x.tolist() for x in s] for _ in range(3)] == want
    for claimed in (None, 3):
        bs = _Buckets(40, claimed=claimed)
        assert len(mk(ds, executor, batch_sampler=bs)) == len(DataLoader(ds, batch_sampler=bs))


def test_shuffle_holds_every_sample_and_follows_the_generator():
    ds = Counting(30)
    got, want = both(ds, batch_size=4, shuffle=True)
    assert sorted(torch.cat(got).tolist()) == sorted(torch.cat(want).tolist()) == list(range(30))
    runs = []
    for _ in range(2):
        s = mk(ds, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(42))
        runs.append([torch.cat(list(s)).tolist() for _ in range(2)])
    assert runs[0] == runs[1]                 # the same generator seed: the same epochs
    assert runs[0][0] != runs[0][1]           # and each epoch its own order


@pytest.mark.parametrize("executor", EXECUTORS)
def test_distributed_sampler_gives_each_rank_the_dataloaders_batches(executor):
    """DistributedSampler over a Python dataset, every combination of its shuffle and drop_last
    and the loader's drop_last, 3 ranks, two epochs (set_epoch): each rank gets exactly the
    DataLoader's batches (the sampler's strided split; its drop_last drops the uneven tail,
    else the tail is padded by wrapping), and 16 ranks over 10 samples with the sampler's
    drop_last give every rank nothing. Was: contiguous blocks per rank, and the tail padded
    where the sampler drops it (pytorch/examples' distributed validation counted repeated
    samples)."""
    ds = Counting(10)
    for shuffle in (False, True):
        for tail in (False, True):
            for drop_last in (False, True):
                for r in range(3):
                    def make(loader):
                        return loader(ds, batch_size=2, drop_last=drop_last,
                                      sampler=DistributedSampler(ds, num_replicas=3, rank=r,
                                                                 shuffle=shuffle,
                                                                 drop_last=tail))
                    dl, s = make(DataLoader), make(lambda *a, **k: mk(*a, executor, **k))
                    for epoch in (0, 1):
                        dl.sampler.set_epoch(epoch)
                        s.sampler.set_epoch(epoch)
                        want = [b.tolist() for b in dl]
                        assert [b.tolist() for b in s] == want, (shuffle, tail, drop_last, r)
                        assert len(s) == len(dl)
    empty = mk(ds, executor, batch_size=4,
               sampler=DistributedSampler(ds, num_replicas=16, rank=12, drop_last=True))
    assert len(empty) == 0 and list(empty) == []


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


class CountingLoader(stoker.Loader):
    """A user's Loader subclass (the timm and Lightning habit), counting the batches it yields."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.yielded = 0

    def __iter__(self):
        for batch in super().__iter__():
            self.yielded += 1
            yield batch


def test_a_subclass_of_loader_runs_python_datasets():
    # class MyLoader(stoker.Loader) took the native loader, which refused every user Dataset
    # ("its samples come from Python code"), and executor= was an unexpected keyword
    loader = CountingLoader(Counting(10), batch_size=4, executor="thread",
                            collate_fn=lambda b: sum(b))
    assert list(loader) == [6, 22, 17] and loader.yielded == 3
    assert isinstance(loader, CountingLoader) and type(loader).__name__ == "CountingLoader"
    stream = CountingLoader(torch.utils.data.TensorDataset(torch.arange(5)), batch_size=2)
    assert [b[0].tolist() for b in stream] == [[0, 1], [2, 3], [4]]
    loader.close()
    stream.close()


def test_attributes_assigned_after_construction():
    # collate_fn collates the next batches (the training thread collates; it was ignored);
    # what the workers started with is refused, not ignored (loader.timeout = 0.3 never fired)
    loader = mk(Counting(10), batch_size=4, num_workers=2)
    assert [b.tolist() for b in loader][0] == [0, 1, 2, 3]
    loader.collate_fn = len
    assert list(loader) == [4, 4, 2]
    loader.collate_fn = torch.utils.data.default_collate
    assert [b.tolist() for b in loader][-1] == [8, 9]
    for attr, value in (("timeout", 0.3), ("num_workers", 0), ("worker_init_fn", print),
                        ("pin_memory", True), ("generator", torch.Generator())):
        with pytest.raises(ValueError, match=f"{attr} attribute should not be set after"):
            setattr(loader, attr, value)
    assert loader.num_workers == 2
    native = stoker.Loader(torch.utils.data.TensorDataset(torch.arange(4)), batch_size=2)
    with pytest.raises(ValueError, match="collate_fn attribute should not be set after"):
        native.collate_fn = len  # (collated in C: refused)
    native.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_copies_and_pickles_are_loaders_of_their_own(workers):
    # copy.copy shared the C loader: the copy's pass ended the original's, whose iterator then
    # gave the epoch from its start (samples 0-3 twice); deepcopy and pickle raised TypeError,
    # and a copy of a deleted loader said "the loader is closed"
    import copy
    ds = torch.utils.data.TensorDataset(torch.arange(18))
    want = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15], [16, 17]]
    loader = stoker.Loader(ds, batch_size=4, num_workers=workers, shuffle=True)
    order = [b[0].tolist() for b in loader]
    for other in (copy.copy(loader), copy.deepcopy(loader), pickle.loads(pickle.dumps(loader))):
        assert [b[0].tolist() for b in other] == order  # (the seed it took: the same order)
        other.close()
    loader.close()
    plain = stoker.Loader(ds, batch_size=4, num_workers=workers)
    it = iter(plain)
    assert next(it)[0].tolist() == want[0]
    dup = copy.copy(plain)
    assert [b[0].tolist() for b in dup] == want
    assert [b[0].tolist() for b in it] == want[1:]  # the original's pass goes on
    kept = copy.copy(plain)
    del plain, it
    gc.collect()
    assert [b[0].tolist() for b in kept] == want
    kept.close()
    dup.close()


def test_ranks_given_as_arguments_share_the_default_seed():
    # rank= and world_size= with shuffle=True and no seed: each rank drew its seed from its
    # own torch generator, so the ranks shuffled differently and their shares overlapped (7-12
    # of 33 samples read twice, others never); they now take the documented default, 0
    got = []
    for rank in range(2):
        torch.manual_seed(100 + rank)  # (the ranks' generators as they happen to be)
        loader = mk(Counting(33), batch_size=4, shuffle=True, rank=rank, world_size=2)
        assert loader.seed == 0
        got += [int(v) for b in loader for v in b]
    assert len(got) == 34 and set(got) == set(range(33))  # (one padded)
    for bad in (2 ** 64, -1, 1.5):
        with pytest.raises(stoker.StokerInvalidError, match="seed"):
            mk(Counting(4), batch_size=2, seed=bad)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_collate_fn_gets_the_samples(executor):
    def collate(samples):
        return {"n": len(samples), "sum": sum(s["i"] for s in samples),
                "names": [s["s"] for s in samples], "img": torch.stack([s["img"] for s in samples])}
    assert_equal_runs(Structured(), executor, batch_size=5, collate_fn=collate, num_workers=2)


class KeptSamples(Dataset):
    """Variable-length samples made once and kept, so a collate_fn can tell whether it got
    these very objects."""

    def __init__(self, n=21):
        g = torch.Generator().manual_seed(0)
        self.items = [(torch.arange(int(k)) + i, i) for i, k in
                      enumerate(torch.randint(1, 9, (n,), generator=g))]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_collate_fn_on_threads_gets_the_samples_themselves(num_workers):
    # On threads the samples reach a collate_fn whole and by reference, as from the DataLoader
    # at num_workers=0 (they were rebuilt from copies in the ring before, which cost half the
    # DataLoader's speed on variable-length sequences); worker processes give equal samples.
    ds = KeptSamples()
    loader = mk(ds, "thread", batch_size=4, num_workers=num_workers, collate_fn=list)
    got = [s for b in loader for s in b]
    assert len(got) == len(ds) and all(s is ds.items[i] for i, s in enumerate(got))
    assert loader.info()["layout"] == "whole samples (tuple) for collate_fn"
    want = [s for b in DataLoader(ds, batch_size=4, num_workers=2, collate_fn=list) for s in b]
    got = [s for b in mk(ds, "process", batch_size=4, num_workers=2, collate_fn=list) for s in b]
    assert len(got) == len(want) and all(a[1] == b[1] and torch.equal(a[0], b[0])
                                         for a, b in zip(got, want))


@pytest.mark.parametrize("executor", EXECUTORS)
def test_worker_init_fn_and_get_worker_info(executor):
    got = torch.cat(list(mk(SeedDataset(4), batch_size=2, num_workers=2,
                            worker_init_fn=init_fn, executor=executor, reseed=False)))
    want = torch.cat(list(DataLoader(SeedDataset(4), batch_size=2, num_workers=2,
                                     worker_init_fn=init_fn)))
    assert got.tolist() == want.tolist() == [12345] * 4
    assert_equal_runs(WorkerInfoDataset(), executor, batch_size=5, num_workers=3)
    assert get_worker_info() is None


@pytest.mark.parametrize("ctx", [None, "fork", "spawn", "forkserver"])
def test_multiprocessing_contexts(ctx):
    import multiprocessing as mp
    for c in ([ctx] if ctx is None else [ctx, mp.get_context(ctx)]):
        got = list(mk(Counting(11), batch_size=3, num_workers=3, executor="process",
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
    s = mk(Bad(), batch_size=3, num_workers=2, executor=executor)
    d = DataLoader(Bad(), batch_size=3, num_workers=2)
    assert run(s) == run(d) == [[0, 1, 2], [3, 4, 5], (IndexError, True), [9]]
    with pytest.raises(TypeError) as a:
        list(mk(NoneSample(), batch_size=2, executor=executor))
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
    s = mk(CountingIterable(20), batch_size=None, executor=executor, num_workers=0)
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
    for loader in (mk(BadIterable(), batch_size=None, num_workers=1, executor=executor),
                   DataLoader(BadIterable(), batch_size=None, num_workers=1)):
        it = iter(loader)
        assert next(it) == 1
        with pytest.raises(ZeroDivisionError, match="in the iterator"):
            next(it)
    with pytest.raises(ValueError, match="shuffle"):
        stoker.Loader(CountingIterable(3), shuffle=True)
    with pytest.raises(ValueError, match="sampler"):
        stoker.Loader(CountingIterable(3), sampler=[0])


# ---- wider: what scripts and PyTorch's own test_dataloader do (see docs/python.md,
# "DataLoader parity: what is covered") ----

@pytest.mark.parametrize("executor", EXECUTORS)
def test_unbatched_default_convert(executor):
    """batch_size=None: numpy arrays and scalars become tensors (default_convert), no batch
    dimension; strings and structures stay."""
    assert_equal_runs(NumpySample(), executor, batch_size=None)
    assert_equal_runs(NumpySample(), executor, batch_size=None, num_workers=2)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_none_samples_and_none_batches_are_delivered(executor):
    """A None sample (batch_size=None) and a collate_fn's None are delivered, not taken for the
    end of the epoch; batched, default_collate's error on [0, None] is the DataLoader's."""
    got, want = both(MaybeNone(), executor, batch_size=None, num_workers=2)
    assert got == want == [0, None, 2, 3, None, 5]
    got, want = both(MaybeNone(), executor, batch_size=1, collate_fn=drop_none_collate)
    assert [None if b is None else b.tolist() for b in got] == \
        [None if b is None else b.tolist() for b in want] == [[0], None, [2], [3], None, [5]]
    errors = []
    for loader in (mk(MaybeNone(), executor, batch_size=2),
                   DataLoader(MaybeNone(), batch_size=2)):
        with pytest.raises(RuntimeError) as e:  # "Could not infer dtype of NoneType"
            list(loader)
        errors.append((type(e.value), str(e.value)))
    assert errors[0] == errors[1]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_variable_length_samples(executor):
    """A pad collate_fn (pad_sequence) gives the DataLoader's batches; without one, both fail
    with default_collate's RuntimeError (the same message)."""
    assert_equal_runs(VarLen(), executor, batch_size=3, collate_fn=pad_collate, num_workers=2)
    errors = []
    for loader in (mk(VarLen(), executor, batch_size=3),
                   DataLoader(VarLen(), batch_size=3)):
        with pytest.raises(RuntimeError) as e:
            list(loader)
        errors.append(str(e.value))
    assert "stack expects each tensor to be equal size" in errors[1]
    assert errors[1] in errors[0]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_rows_off_the_layout_after_rows_on_it(executor):
    """Batches whose first row fits the layout the first sample fixed and whose later rows do
    not (another object count, another dtype), over several batches: the DataLoader's batches
    (was: "row 1 of the batch lost its object leaves ... please report this" from the second
    such batch on, both executors)."""
    assert_equal_runs(Detection(), executor, batch_size=4, num_workers=2,
                      collate_fn=detection_collate)
    # The DataLoader's own dtype here depends on num_workers: a worker stacks into a shared
    # tensor of the first sample's dtype (float32), the main process promotes (float64).
    # stoker collates in the consumer at every num_workers: the num_workers=0 result.
    want = list(DataLoader(MixedNumbers(), batch_size=4))
    for workers in (0, 2):
        got = list(mk(MixedNumbers(), executor, batch_size=4, num_workers=workers))
        assert len(got) == len(want) == 3
        for i, (a, b) in enumerate(zip(got, want)):
            same(a, b, f"batch {i}")
    assert want[0][1].dtype == torch.float64 and want[1][0].dtype == torch.float64


class NoLen(Dataset):
    """A map-style dataset without __len__ (the DataLoader takes it with a sampler)."""

    def __getitem__(self, i):
        return i * 10


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_dataset_without_len_with_a_sampler(executor):
    """No __len__: with a sampler or a batch_sampler naming the indices, the DataLoader's
    batches, two passes, and its len(); without one, a TypeError from both (the DataLoader's at
    iter(), stoker's at construction). Was: stoker's TypeError in every case."""
    for kw in ({"batch_size": 2, "sampler": [3, 1, 4, 1, 5]},
               {"batch_sampler": [[0, 1], [2], [7, 8, 9]]}):
        s = mk(NoLen(), executor, **kw)
        want = [b.tolist() for b in DataLoader(NoLen(), **kw)]
        assert [[b.tolist() for b in s] for _ in range(2)] == [want, want]
        assert len(s) == len(DataLoader(NoLen(), **kw)) and "no len()" in repr(s)
    with pytest.raises(TypeError, match="has no len"):
        list(DataLoader(NoLen(), batch_size=2))
    with pytest.raises(TypeError, match="has no len"):
        mk(NoLen(), executor, batch_size=2)


class IndexType(Dataset):
    def __len__(self):
        return 12

    def __getitem__(self, i):
        return {"i": int(i), "is_int": type(i) is int}


@pytest.mark.parametrize("executor", EXECUTORS)
def test_samplers_of_numpy_integers_and_tensors(executor):
    """A sampler that is a numpy permutation or a tensor: the same samples in the same batches;
    stoker hands __getitem__ a Python int where the DataLoader hands the sampler's item (a
    documented difference)."""
    for sampler in (np.random.RandomState(0).permutation(12), torch.tensor([7, 3, 9, 1, 0])):
        got, want = both(IndexType(), executor, batch_size=4, sampler=sampler)
        assert [b["i"].tolist() for b in got] == [b["i"].tolist() for b in want]
        assert all(b["is_int"].all() for b in got) and not any(b["is_int"].any() for b in want)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_concat_of_different_sample_types_random_split(executor):
    """ConcatDataset of int and float samples: each batch collated as its first sample says
    (a float64 batch after the int64 ones), as default_collate does; random_split's Subset in
    the split's order."""
    assert_equal_runs(ConcatDataset([Ints(), Floats()]), executor, batch_size=3)
    part = torch.utils.data.random_split(Counting(10), [7, 3],
                                         generator=torch.Generator().manual_seed(1))[0]
    assert_equal_runs(part, executor, batch_size=3, num_workers=2)


class TinyRows(Dataset):
    """The tiny-sample idiom: __getitem__ takes a list of indices and returns the batch."""
    x = torch.arange(60.).view(30, 2)
    y = torch.arange(30) % 7

    def __len__(self):
        return 30

    def __getitem__(self, idx):
        return self.x[idx], self.y[idx]


@pytest.mark.parametrize("workers,executor", [(0, "thread"), (2, "thread"), (2, "process")])
def test_sampler_yielding_lists_unbatched(workers, executor):
    """batch_size=None with a sampler that yields lists of indices (a dataset that fetches a
    batch itself): each list goes whole to __getitem__, as the DataLoader hands it, every
    epoch (ListFetch: worker processes read each epoch's lists from the files it writes; more
    epochs than it has tags for them)."""
    sampler = [[0, 1, 2], [7], [3, 4]]
    want = [b.tolist() for b in DataLoader(KeyedByList(), batch_size=None, sampler=sampler)]
    assert want == [[0, 10, 20], [70], [30, 40]]
    loader = stoker.Loader(KeyedByList(), batch_size=None, sampler=sampler, num_workers=workers,
                           executor=executor)
    assert len(loader) == 3 and loader.info()["executor"] == executor
    for _ in range(10):
        assert [b.tolist() for b in loader] == want
    # a BatchSampler over a RandomSampler: the same batches as the DataLoader's, epoch by epoch
    # (both iterate the sampler once per epoch), and a resume from the middle of an epoch
    def batches(seed):
        g = torch.Generator().manual_seed(seed)
        return BatchSampler(RandomSampler(TinyRows(), generator=g), 8, drop_last=False)
    dl = DataLoader(TinyRows(), batch_size=None, sampler=batches(5))
    st = stoker.Loader(TinyRows(), batch_size=None, sampler=batches(5), num_workers=workers,
                       executor=executor)
    assert len(st) == len(dl) == 4
    for _ in range(3):
        for a, b in itertools.zip_longest(st, dl):
            same(a, b)
    st = stoker.Loader(TinyRows(), batch_size=None, sampler=batches(6), num_workers=workers,
                       executor=executor)
    it = iter(st)
    first = next(it)[1].tolist()  # (not the batch: it would hold its ring slot)
    state = st.state_dict()
    rest = [y.tolist() for _, y in it]
    again = stoker.Loader(TinyRows(), batch_size=None, sampler=batches(6), num_workers=workers,
                          executor=executor)
    again.load_state_dict(state)
    assert [y.tolist() for _, y in again] == rest and len(rest) == 3
    assert sorted(first + sum(rest, [])) == sorted(TinyRows.y.tolist())
    dirs = [x._order.fetch.files for x in (loader, st, again)]
    assert all(d is not None and os.path.isdir(d) for d in dirs) == (executor == "process")
    for x in (loader, st, again):  # worker processes' lists are files, removed with the loader
        x.close()
    assert not any(d and os.path.exists(d) for d in dirs)


class FailsOnRow13(Dataset):
    def __len__(self):
        return 20

    def __getitem__(self, idx):
        if 13 in idx:
            raise KeyError("no row 13")
        return torch.tensor(idx)


class SeesItsOwnType(KeyedByList):
    """Says, per index, whether get_worker_info().dataset is this dataset (its own class)."""
    def __getitem__(self, idx):
        return torch.tensor([type(get_worker_info().dataset) is SeesItsOwnType] * len(idx))


class ListsThenInts:
    """A sampler that yields lists in its first epoch and integers after."""
    def __init__(self):
        self.passes = 0

    def __iter__(self):
        self.passes += 1
        return iter([[0, 1], [2]] if self.passes == 1 else [0, 1, 2])


def test_sampler_yielding_lists_files_of_a_killed_process_are_removed():
    """The lists' directory a training process killed before its loader closed (left under
    /dev/shm) is removed by the next loader that makes one; a live process's is kept."""
    import subprocess
    import sys
    import tempfile
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    parent = "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    orphan = os.path.join(parent, f"stoker-lists-{gone}-zz9")
    live = os.path.join(parent, f"stoker-lists-{os.getppid()}-zz9")
    for d in (orphan, live):
        os.makedirs(d, exist_ok=True)
    try:
        loader = stoker.Loader(KeyedByList(), batch_size=None, sampler=[[1], [2]], num_workers=1,
                               executor="process")
        assert [b.tolist() for b in loader] == [[10], [20]]
        assert not os.path.exists(orphan) and os.path.isdir(live)
        loader.close()
    finally:
        for d in (orphan, live):
            if os.path.isdir(d):
                os.rmdir(d)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_sampler_yielding_lists_errors(executor):
    """A batch fetch that raises: its type and message at that batch, the sampler's list named
    in the traceback, the pass going on after it (as the DataLoader's); get_worker_info().dataset
    is the user's dataset; a sampler whose later epoch yields integers after lists: a ValueError
    at that pass, not another dataset."""
    sampler = [list(range(i, i + 4)) for i in range(0, 20, 4)]
    it = iter(stoker.Loader(FailsOnRow13(), batch_size=None, sampler=sampler, num_workers=2,
                            executor=executor))
    got = [next(it).tolist() for _ in range(3)]
    with pytest.raises(KeyError, match="no row 13") as e:
        next(it)
    assert "the sampler's list 3 of the epoch: [12, 13, 14, 15]" in str(e.value)
    assert got + [b.tolist() for b in it] == [sampler[k] for k in (0, 1, 2, 4)]
    seen = []
    if executor == "thread":  # (a worker process's worker_init_fn cannot append here)
        loader = stoker.Loader(KeyedByList(), batch_size=None, sampler=[[1], [2]], num_workers=2,
                               executor="thread", worker_init_fn=lambda w: seen.append(
                                   type(get_worker_info().dataset)))
        assert [b.tolist() for b in loader] == [[10], [20]] and set(seen) == {KeyedByList}
    loader = stoker.Loader(SeesItsOwnType(), batch_size=None, sampler=[[1, 2], [3]],
                           num_workers=2, executor=executor)
    assert [b.tolist() for b in loader] == [[True, True], [True]]
    loader = stoker.Loader(KeyedByList(), batch_size=None, sampler=ListsThenInts(),
                           executor=executor)
    assert [b.tolist() for b in loader] == [[0, 10], [20]]
    with pytest.raises(ValueError, match="yielded lists of indices in its first epoch"):
        list(loader)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_iterable_default_workers_read_each_item_once(executor):
    """An IterableDataset that does not shard itself, with num_workers not given: each item
    once, in order (the DataLoader's default num_workers=0), not once per worker."""
    got, want = both(Plain(7), executor, batch_size=3)
    assert [b.tolist() for b in got] == [b.tolist() for b in want] == [[0, 1, 2], [3, 4, 5], [6]]


def test_len_of_loaders():
    """len(): map-style with and without drop_last, a sampler, a batch_sampler; an
    IterableDataset with __len__ (batched and not) and without one (TypeError, both)."""
    for kw in (dict(batch_size=4), dict(batch_size=4, drop_last=True), dict(batch_size=None),
               dict(batch_size=3, sampler=[1, 2, 3, 4]), dict(batch_sampler=[[0], [1, 2]])):
        assert len(mk(Counting(10), **kw)) == \
            len(DataLoader(Counting(10), **kw)), kw
    for kw in (dict(batch_size=4), dict(batch_size=4, drop_last=True), dict(batch_size=None)):
        assert len(mk(CountingIterable(10), **kw)) == \
            len(DataLoader(CountingIterable(10), **kw)), kw
    for loader in (mk(Plain(3)), DataLoader(Plain(3))):
        with pytest.raises(TypeError):
            len(loader)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_shuffle_reproducible_by_generator_and_manual_seed(executor):
    """The same generator seed: the same order, epoch by epoch (stoker's own permutation of
    (seed, epoch), not the DataLoader's); torch.manual_seed before the loader does the same
    without a generator."""
    def epochs(**kw):
        s = mk(Counting(12), executor, batch_size=12, shuffle=True, **kw)
        out = [next(iter(s)).tolist() for _ in range(2)]
        s.close()
        return out
    a = epochs(generator=torch.Generator().manual_seed(9))
    assert a == epochs(generator=torch.Generator().manual_seed(9))
    assert a[0] != a[1] and sorted(a[0]) == list(range(12))
    torch.manual_seed(4)
    b = epochs()
    torch.manual_seed(4)
    assert b == epochs()


@pytest.mark.parametrize("executor", EXECUTORS)
def test_custom_batch_type_with_pin_memory(executor):
    """collate_fn returning a custom type with pin_memory(): the same type and contents; its
    pin_memory() is called only where CUDA is (neither loader calls it without)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # stoker says pin_memory without CUDA does nothing
        got, want = both(Counting(5), executor, batch_size=2, collate_fn=pinnable_collate,
                         pin_memory=True)
    assert [type(b) for b in got] == [type(b) for b in want] == [Pinnable] * 3
    assert [b.inp.tolist() for b in got] == [b.inp.tolist() for b in want]
    cuda = torch.cuda.is_available()
    assert [b.pinned for b in got] == [b.pinned for b in want] == [cuda] * 3


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("persistent", [False, True])
def test_dataset_changed_between_epochs(executor, persistent):
    """The training loop changes the dataset between epochs (dataset.set_epoch(e), curriculum).
    DataLoader: num_workers=0 and fresh workers see the change, persistent workers keep their
    copy. stoker on threads: every sample of the next epoch sees an assigned attribute (never
    part of a batch); on worker processes: new workers, started when the dataset changed, see
    it, unless persistent_workers=True keeps the old ones with their copy, as the DataLoader."""
    def run(make):
        ds = Mutable()
        loader = make(ds)
        out = []
        for _ in range(3):
            out.append([b.tolist() for b in loader])
            ds.value += 1
        return out
    kw = dict(batch_size=3, num_workers=2, persistent_workers=persistent)
    want = run(lambda ds: DataLoader(ds, **kw))
    got = run(lambda ds: mk(ds, executor, **kw))
    fresh = [[[e] * 3] * 2 for e in range(3)]
    kept = [[[0] * 3] * 2] * 3
    assert want == (kept if persistent else fresh)
    assert got == (fresh if executor == "thread" else want)


class _Scale:
    """A transform object whose strength the training loop sets (curriculum)."""
    def __init__(self):
        self.m = 0

    def __call__(self, x):
        return x * self.m


class Scaled(Dataset):
    def __init__(self):
        self.transform = _Scale()
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __len__(self):
        return 12

    def __getitem__(self, i):
        return torch.tensor([self.epoch, self.transform(i)])


@pytest.mark.parametrize("executor", EXECUTORS + ["auto"])
@pytest.mark.parametrize("workers", [0, 2])
def test_dataset_changed_before_the_first_pass_or_inside_its_transform(executor, workers):
    """Changes the DataLoader's workers see, since they are started by iter(): one made after
    the loader was built and before its first pass (ds.set_epoch(start) on resume; was: the
    whole first epoch from the constructor's copy on worker processes, the first samples on
    threads) and an attribute of an object the dataset holds (ds.transform.m = epoch; was:
    never seen by worker processes, a batch read ahead on threads)."""
    def run(make):
        ds = Scaled()
        loader = make(ds)
        out = []
        for epoch in (5, 6, 7):
            ds.set_epoch(epoch)
            ds.transform.m = epoch
            out.append([b.tolist() for b in loader])
        return out
    kw = dict(batch_size=4, num_workers=workers)
    want = run(lambda ds: DataLoader(ds, **kw))
    assert want == [[[[e, i * e] for i in range(k, k + 4)] for k in (0, 4, 8)]
                    for e in (5, 6, 7)]
    assert run(lambda ds: mk(ds, executor, **kw)) == want


@pytest.mark.parametrize("how", ["shuffle", "distributed-loader", "distributed-sampler"])
def test_set_epoch_before_the_resumed_pass_keeps_the_position(how):
    """The loop of a resumed run calls set_epoch(e) before each epoch, the resumed one
    included: the pass goes on from the state's position (was: loader.set_epoch(e) jumped to
    the epoch's start, repeating its first batches, silently); loader.set_epoch also sets a
    DistributedSampler's epoch (it chooses each pass's: was left at 0)."""
    from torch.utils.data import DistributedSampler
    ds = Counting(40)

    def make():
        if how == "shuffle":
            return mk(ds, batch_size=4, shuffle=True, seed=1, num_workers=0)
        return mk(ds, batch_size=4, num_workers=0,
                  sampler=DistributedSampler(ds, num_replicas=2, rank=0, seed=1))

    def set_epoch(loader, e):
        (loader.sampler if how == "distributed-sampler" else loader).set_epoch(e)
    full = make()
    want = []
    for e in range(3):
        set_epoch(full, e)
        want.append([b.tolist() for b in full])
    assert want[0] != want[1]
    first = make()
    set_epoch(first, 0)
    assert [b.tolist() for b in first] == want[0]
    set_epoch(first, 1)
    it = iter(first)
    head = [next(it).tolist() for _ in range(2)]
    state = first.state_dict()
    again = make()
    again.load_state_dict(state)
    got = []
    for e in (1, 2):
        set_epoch(again, e)
        got.append([b.tolist() for b in again])
    assert [head + got[0], got[1]] == want[1:]


class OpenedImages(Dataset):
    """Image.open(path) as it is (a lazily read JpegImageFile or PngImageFile)."""

    def __init__(self, paths):
        self.paths = paths

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        from PIL import Image
        return Image.open(self.paths[i])


def names_and_sizes(batch):
    return [(os.path.basename(im.filename), im.size, im.format) for im in batch]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_pil_images_keep_their_filename_for_collate_fn(executor, tmp_path):
    """A collate_fn that reads a PIL image's filename (to record prediction paths) gets it, as
    in the DataLoader, whose collate_fn runs in the worker (was: None for every sample a worker
    process loaded, since PIL's pickle leaves it out)."""
    from PIL import Image
    paths = []
    for i in range(6):
        paths.append(str(tmp_path / f"{i}.png"))
        Image.new("RGB", (4 + i, 3), (i, 0, 0)).save(paths[-1])
    for workers in (0, 2):
        want = [b for b in DataLoader(OpenedImages(paths), batch_size=4, num_workers=workers,
                                      collate_fn=names_and_sizes)]
        assert want[0][0] == ("0.png", (4, 3), "PNG")
        got = [b for b in mk(OpenedImages(paths), executor, batch_size=4,
                             num_workers=workers, collate_fn=names_and_sizes)]
        assert got == want


def test_a_batch_kept_from_a_peek_warns_nothing():
    """The tutorials' peek (images, labels = next(iter(loader)), kept for make_grid, then the
    training loop) holds one ring slot once: no RuntimeWarning (was: "still holds the batch");
    a loop that keeps every batch still gets it."""
    for ds in (Counting(40), torch.utils.data.TensorDataset(torch.arange(40))):
        loader = mk(ds, batch_size=4, num_workers=2)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            peek = next(iter(loader))
            for _ in range(2):
                assert sum(len(b[0] if isinstance(b, (list, tuple)) else b) for b in loader) == 40
        assert len(peek[0] if isinstance(peek, (list, tuple)) else peek) == 4
        with pytest.warns(RuntimeWarning, match="still holds the batch"):
            kept = [b for b in loader]
        assert len(kept) == 10


class CountedCalls(Dataset):
    """Counts the __getitem__ calls of each index (worker threads share the counter)."""

    def __init__(self, n):
        self.n = n
        self.calls = collections.Counter()

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.calls[i] += 1
        return torch.full((3,), i)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loop_keeping_every_batch_loads_each_sample_once(workers):
    # list(loader) holds every ring slot, so stoker goes on in a new ring each time: the new C
    # loader used to start at epoch 0 and then move to the position, and its workers loaded
    # epoch 0's first batches again each time (index 0 about 60 times here, at 2 workers)
    ds = CountedCalls(480)
    loader = mk(ds, batch_size=4, num_workers=workers, executor="thread")
    with pytest.warns(RuntimeWarning, match="still holds the batch"):
        kept = list(loader)
    assert torch.cat(kept)[:, 0].tolist() == list(range(480))
    # (index 0: the probe's, the epoch's, and the next epoch's read ahead at most)
    assert ds.calls[0] <= 3, ds.calls[0]
    assert all(ds.calls[i] == 1 for i in range(64, 480)), ds.calls


def test_batches_released_by_another_thread_between_loading_and_taking():
    # num_workers=0 and a producer thread feeding a queue whose consumer drops the batches: the
    # next batch's slot was held when the producer loaded its turn and free when it took it,
    # "STK_LOADER_CALLER_LOADS: batch 2 is not loaded" (18 of 30 runs). The release between
    # the two steps is made to happen here every time.
    loader = mk(Counting(40), "auto", batch_size=8, num_workers=0)
    assert loader._helper.inline  # (the training thread loads each batch)
    it = iter(loader)
    held = [next(it), next(it)]  # both ring slots
    run = loader._helper.run

    def run_then_released_elsewhere(core):
        n = run(core)
        held.clear()
        gc.collect()
        return n
    loader._helper.run = run_then_released_elsewhere
    assert [b.tolist() for b in it] == [list(range(k, k + 8)) for k in range(16, 40, 8)]


def test_worker_init_fn_runs_once_per_worker_thread_through_new_rings():
    # each new ring (a loop keeping its batches) has new C threads: worker_init_fn ran again on
    # each (17-34 calls in 3 epochs), so the classic np.random.seed(torch.initial_seed()) kept
    # resetting NumPy's shared generator to one value
    calls = []
    loader = mk(CountedCalls(96), batch_size=4, num_workers=2, executor="thread",
                worker_init_fn=calls.append)
    with pytest.warns(RuntimeWarning, match="still holds the batch"):
        for _ in range(3):
            assert len(list(loader)) == 24
    # (worker 0's also ran on the constructing thread, which read the first samples as worker
    # 0, the generators put back after it: documented)
    assert sorted(calls) == [0, 0, 1]


# ---- torchvision datasets run as Python datasets ----

@pytest.mark.parametrize("executor", EXECUTORS)
def test_torchvision_fakedata_and_datasetfolder(executor, tmp_path):
    """FakeData (its __getitem__ seeds torch itself per index) and a DatasetFolder with its own
    loader function (np.load): the DataLoader's batches."""
    tv = pytest.importorskip("torchvision")
    T = tv.transforms
    fake = tv.datasets.FakeData(size=9, image_size=(3, 8, 8), num_classes=4,
                                transform=T.ToTensor())
    # FakeData seeds torch's global generator in __getitem__: two worker threads would race on
    # it (stoker warns about global draws on threads), so one thread there
    assert_equal_runs(fake, executor, batch_size=4, num_workers=1 if executor == "thread" else 2)
    for c in ("cat", "dog"):
        (tmp_path / c).mkdir()
        for i in range(3):
            np.save(tmp_path / c / f"{i}.npy", np.full((2, 2), i + 10 * (c == "dog"), np.float32))
    folder = tv.datasets.DatasetFolder(str(tmp_path), loader=np.load, extensions=(".npy",))
    assert_equal_runs(folder, executor, batch_size=4, num_workers=2)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_cifar_like_dataset_with_torchvision_transforms(executor):
    """A CIFAR-style dataset: an evaluation transform (ToTensor, Normalize) gives the
    DataLoader's tensors exactly; a training one (RandomCrop with padding, flip) the same
    shapes, dtypes and labels, and on worker processes the same pixels whatever num_workers
    (stoker seeds each sample from (seed, epoch, index); the DataLoader's draws depend on the
    worker count; documented)."""
    tv = pytest.importorskip("torchvision")
    T = tv.transforms
    evaluation = T.Compose([T.ToTensor(), T.Normalize((0.5, 0.4, 0.3), (0.2, 0.2, 0.2))])
    assert_equal_runs(CifarLike(evaluation), executor, batch_size=4, num_workers=2)
    train = CifarLike(T.Compose([T.RandomCrop(8, padding=2), T.RandomHorizontalFlip(),
                                 T.ToTensor()]))
    want = list(DataLoader(train, batch_size=4))
    runs = []
    for workers in (1, 2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # threads: "random but not reproducible per index"
            s = mk(train, executor, batch_size=4, num_workers=workers, seed=5)
            runs.append(list(s))
            s.close()
    for got in runs:
        assert [(x.shape, x.dtype) for x, _ in got] == [(x.shape, x.dtype) for x, _ in want]
        assert [y.tolist() for _, y in got] == [y.tolist() for _, y in want]
    if executor == "process":
        assert all(torch.equal(a, b) for (a, _), (b, _) in zip(*runs))


def outcome(make):
    """(batch types, reprs) of a whole epoch, or (error type, message)."""
    try:
        got = list(make())
    except Exception as e:  # noqa: BLE001 - compared with the DataLoader's
        return type(e), str(e)
    return [type(b) for b in got], [repr(b) for b in got]


@pytest.mark.parametrize("name", list(SAMPLES))
def test_default_collate_corner_cases(name):
    """Sample types default_collate keeps, converts or refuses: the same batches (types,
    dtypes, values) or the same error, batched and with batch_size=None; worker processes too
    for the array types (written into the ring by the worker)."""
    executors = EXECUTORS if name in ARRAY_SAMPLES else ["thread"]
    for bs in (2, None):
        want = outcome(lambda: DataLoader(Kind(name), batch_size=bs))
        for executor in executors:
            got = outcome(lambda: mk(Kind(name), executor, batch_size=bs, num_workers=1))
            assert got == want, (executor, bs)

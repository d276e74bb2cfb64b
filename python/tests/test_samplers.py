"""Samplers (issue 16): SubsetRandomSampler, WeightedRandomSampler and RandomSampler with
replacement or num_samples map onto stoker's own order (deterministic per (seed, epoch), so
resumable); any other Sampler is iterated for its indices each epoch. Distributions against the
weights, exactly-once per epoch, resume mid-epoch, rank sharding, and a torchvision ImageFolder
with a sampler giving the DataLoader's (images, labels)."""
import collections
import math

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import RandomSampler, Sampler, SubsetRandomSampler, WeightedRandomSampler

import stoker

N = 60


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("samplers") / "d.stk")
    stoker.write_shard(path, {"label": "int64"}, ({"label": i * 10} for i in range(N)))
    return path


def epoch(loader):
    """The record indices of one pass, checking each label belongs to its index."""
    out = []
    for b in loader:
        assert (b["label"] == b["index"] * 10).all()
        out += b["index"].tolist()
    return out


def loader(shard, sampler, **kw):
    kw.setdefault("num_workers", 2)
    kw.setdefault("rank", 0)
    kw.setdefault("world_size", 1)
    return stoker.Loader(shard, kw.pop("batch_size", 7), sampler=sampler, **kw)


def test_subset_random_sampler_is_a_permutation_of_the_subset(shard):
    subset = [3, 59, 10, 11, 12, 40, 41, 0, 7]
    g = torch.Generator().manual_seed(5)
    a = loader(shard, SubsetRandomSampler(subset, generator=g))
    e0, e1 = epoch(a), epoch(a)
    assert sorted(e0) == sorted(subset) and sorted(e1) == sorted(subset)
    assert e0 != e1  # each epoch its own permutation (of (seed, epoch))
    assert len(a) == math.ceil(len(subset) / 7)
    # generator= seeds stoker's stream: the same seed gives the same orders, another seed others
    b = loader(shard, SubsetRandomSampler(subset, generator=torch.Generator().manual_seed(5)))
    assert epoch(b) == e0 and epoch(b) == e1
    c = loader(shard, SubsetRandomSampler(subset), generator=torch.Generator().manual_seed(5))
    assert epoch(c) == e0  # the loader's generator= when the sampler has none
    d = loader(shard, SubsetRandomSampler(subset, generator=torch.Generator().manual_seed(6)))
    assert epoch(d) != e0
    for x in (a, b, c, d):
        x.close()


def test_subset_split_among_ranks(shard):
    """With world_size > 1 the sampler's order is split as stoker's own is: each global step cut
    into one slice per rank, the tail padded by wrapping (DistributedSampler's rule)."""
    subset = list(range(5, 28))
    seen = collections.Counter()
    for rank in range(3):
        x = loader(shard, SubsetRandomSampler(subset, generator=torch.Generator().manual_seed(1)),
                   rank=rank, world_size=3, batch_size=4)
        got = epoch(x)
        assert len(got) == math.ceil(len(subset) / 3)
        seen.update(got)
        x.close()
    assert set(seen) == set(subset)
    assert sum(seen.values()) - len(subset) == 3 * math.ceil(len(subset) / 3) - len(subset)


@pytest.mark.parametrize("replacement", [True, False])
def test_weighted_random_sampler_frequencies(shard, replacement):
    w = np.zeros(N)
    w[:10] = np.arange(1, 11)  # records 0..9 weighted 1..10, the rest never drawn
    num = 20000 if replacement else 5
    x = loader(shard, WeightedRandomSampler(w.tolist(), num, replacement=replacement,
                                            generator=torch.Generator().manual_seed(2)),
               batch_size=1000)
    counts = np.zeros(N)
    epochs = 1 if replacement else 400
    for _ in range(epochs):
        got = epoch(x)
        assert len(got) == num
        if not replacement:
            assert len(set(got)) == num  # without replacement: distinct in an epoch
        np.add.at(counts, got, 1)
    x.close()
    assert counts[10:].sum() == 0  # weight 0: never
    if replacement:
        p = w / w.sum()
        sd = np.sqrt(num * p * (1 - p))
        assert np.all(np.abs(counts - num * p) <= 5 * sd + 1), counts[:10]
    else:
        # inclusion in 5 of 10 draws without replacement: the same as torch's own sampler's
        # (by simulation with torch.multinomial), within 5 standard deviations
        g = torch.Generator().manual_seed(0)
        ref = np.zeros(10)
        for _ in range(4000):
            ref[torch.multinomial(torch.tensor(w[:10]), 5, False, generator=g).numpy()] += 1
        q = ref / 4000
        sd = np.sqrt(epochs * q * (1 - q))
        assert np.all(np.abs(counts[:10] - epochs * q) <= 5 * sd + 2), (counts[:10], epochs * q)


def test_random_sampler_with_replacement_and_num_samples(shard):
    x = loader(shard, RandomSampler(range(N), replacement=True, num_samples=90,
                                    generator=torch.Generator().manual_seed(4)))
    got = epoch(x)
    assert len(got) == 90 and len(set(got)) < 90 and all(0 <= i < N for i in got)
    x.close()
    y = loader(shard, RandomSampler(range(N), num_samples=20,
                                    generator=torch.Generator().manual_seed(4)))
    got = epoch(y)
    assert len(got) == 20 and len(set(got)) == 20
    y.close()


class EveryOther(Sampler):
    """A custom sampler: odd indices then even ones, reversed on odd epochs (set_epoch)."""

    def __init__(self):
        self.epoch, self.calls = 0, 0

    def set_epoch(self, e):
        self.epoch = e

    def __iter__(self):
        self.calls += 1
        order = list(range(1, N, 2)) + list(range(0, N, 2)) + [5, 5]  # repeats allowed
        return iter(order[::-1] if self.epoch % 2 else order)

    def __len__(self):
        return N + 2


def test_custom_sampler_is_iterated_each_epoch(shard):
    s = EveryOther()
    x = loader(shard, s)
    forward = list(range(1, N, 2)) + list(range(0, N, 2)) + [5, 5]
    assert epoch(x) == forward
    assert epoch(x) == forward[::-1]  # the loader's epoch 1 handed to set_epoch
    assert s.epoch == 1 and s.calls == 2  # once per epoch, as the DataLoader
    s.set_epoch(4)  # the user's set_epoch: the loader follows
    assert epoch(x) == forward and x.epoch == 5
    x.close()
    # a plain iterable of indices works too; bad indices are refused naming the sampler
    y = loader(shard, [4, 2, 0])
    assert epoch(y) == [4, 2, 0] and epoch(y) == [4, 2, 0]
    y.close()
    with pytest.raises(ValueError, match="index -1"):
        loader(shard, [1, -1])
    with pytest.raises(ValueError, match="out of range"):
        loader(shard, [1, N])
    with pytest.raises(ValueError, match="BatchSampler"):
        loader(shard, [[0, 1], [2, 3]])


@pytest.mark.parametrize("kind", ["subset", "weighted", "weighted-norepl", "custom"])
def test_resume_mid_epoch(shard, kind):
    def make():
        g = torch.Generator().manual_seed(8)
        s = {"subset": lambda: SubsetRandomSampler(list(range(0, N, 2)), generator=g),
             "weighted": lambda: WeightedRandomSampler([1.0 + i for i in range(N)], 50,
                                                       generator=g),
             "weighted-norepl": lambda: WeightedRandomSampler([1.0 + i for i in range(N)], 40,
                                                              replacement=False, generator=g),
             "custom": EveryOther}[kind]()
        return loader(shard, s, batch_size=6)
    ref = make()
    epoch(ref)
    full = epoch(ref)  # epoch 1
    first = make()
    epoch(first)
    it = iter(first)
    head = [next(it)["index"].tolist() for _ in range(3)]
    state = first.state_dict()
    first.close()
    second = make()
    second.load_state_dict(state)
    rest = epoch(second)
    assert sum(head, []) + rest == full
    for x in (ref, second):
        x.close()


def test_imagefolder_with_subset_sampler_gives_dataloader_tuples(tmp_path):
    from torchvision import transforms as T
    from torchvision.datasets import ImageFolder
    if not stoker.has_transforms():
        pytest.skip("no image pipeline")
    rng = np.random.default_rng(0)
    for i in range(8):
        d = tmp_path / f"c{i % 2}"
        d.mkdir(exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (20, 24, 3), dtype=np.uint8)).save(d / f"{i}.png")
    ds = ImageFolder(str(tmp_path), transform=T.Compose([T.Resize((8, 8)), T.ToTensor()]))
    subset = [1, 2, 5, 6, 7]
    x = stoker.Loader(ds, batch_size=2, sampler=SubsetRandomSampler(subset), num_workers=1)
    labels, n = [], 0
    for images, la in x:  # the DataLoader loop
        assert images.shape[1:] == (3, 8, 8)
        labels += la.tolist()
        n += len(la)
    assert n == len(subset)
    assert sorted(labels) == sorted(ds.samples[i][1] for i in subset)
    x.close()

"""Issue 24: a DistributedSampler under stoker.Loader gives exactly the DataLoader's batches.

pytorch/examples' imagenet main.py evaluates with DistributedSampler(val_dataset,
shuffle=False, drop_last=True) under a DataLoader whose drop_last is False: the sampler drops
the uneven tail across ranks, the loader keeps each rank's partial last batch. Every
combination of the two drop_last values, shuffle, world sizes and dataset sizes is compared
here with DataLoader + DistributedSampler directly, for rank in range(world): through a .stk of
record numbers (the `index` field names every sample) and through the one-name switch over a
torchvision ImageFolder (images and labels compared as tensors). Resume and set_epoch too.
"""
import itertools
import os

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader, DistributedSampler
from torchvision import transforms as T
from torchvision.datasets import ImageFolder

import stoker


def _records(directory, n):
    path = os.path.join(directory, f"n{n}.stk")
    if not os.path.exists(path):
        stoker.write_shard(path, {"v": "int64"}, ({"v": i} for i in range(n)))
    return path


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("distparity"))
    return lambda n: _records(d, n)


def _sampler(n, world, rank, shuffle, tail, seed=5):
    return DistributedSampler(list(range(n)), num_replicas=world, rank=rank, shuffle=shuffle,
                              drop_last=tail, seed=seed)


def _torch_batches(n, batch, sampler, last):
    return [b.tolist() for b in DataLoader(list(range(n)), batch_size=batch, sampler=sampler,
                                           drop_last=last)]


def test_every_combination_gives_the_dataloaders_batches(shards):
    for n, world, batch, shuffle, tail, last in itertools.product(
            (1, 2, 3, 7, 10, 23), (1, 2, 3, 4), (1, 3, 4), (False, True), (False, True),
            (False, True)):
        path = shards(n)
        for rank in range(world):
            mine = _sampler(n, world, rank, shuffle, tail)
            theirs = _sampler(n, world, rank, shuffle, tail)
            loader = stoker.Loader(path, batch, sampler=mine, drop_last=last, num_workers=1)
            for epoch in (0, 3):  # set_epoch reshuffles, as the sampler's
                mine.set_epoch(epoch)
                theirs.set_epoch(epoch)
                want = _torch_batches(n, batch, theirs, last)
                got = [b["index"].tolist() for b in loader]
                assert got == want, (n, world, rank, batch, shuffle, tail, last, epoch)
                assert len(loader) == len(want)
            loader.close()


def test_imagenet_validation_split_keeps_every_sample(shards):
    """500 samples, 4 ranks, batch 32: 125 samples per rank in 4 batches (the last of 29), not
    the 96 of drop_last=True on the loader; the ranks together read each sample once."""
    n, world, batch = 500, 4, 32
    seen = []
    for rank in range(world):
        sampler = DistributedSampler(list(range(n)), world, rank, shuffle=False, drop_last=True)
        loader = stoker.Loader(shards(n), batch, sampler=sampler)
        got = [b["index"].tolist() for b in loader]
        assert [len(b) for b in got] == [32, 32, 32, 29]
        assert got == _torch_batches(n, batch, sampler, False)
        seen += [i for b in got for i in b]
    assert sorted(seen) == list(range(n))


def _state_after(loader, k):
    it = iter(loader)
    head = [next(it)["index"].tolist() for _ in range(k)]
    return head, loader.state_dict()


def test_resume_continues_the_dataloaders_batches(shards):
    n, world, batch = 23, 3, 2
    for shuffle, tail, last in itertools.product((False, True), repeat=3):
        for k in (1, 2, 3):
            states = []
            for rank in range(world):
                sampler = _sampler(n, world, rank, shuffle, tail)
                sampler.set_epoch(2)
                want = _torch_batches(n, batch, sampler, last)
                first = stoker.Loader(shards(n), batch, sampler=sampler, drop_last=last)
                head, state = _state_after(first, k)
                first.close()
                assert head == want[:k]
                states.append(state)
                sampler = _sampler(n, world, rank, shuffle, tail)
                sampler.set_epoch(2)  # the training script sets the epoch before resuming
                second = stoker.Loader(shards(n), batch, sampler=sampler, drop_last=last)
                second.load_state_dict(state)
                assert [b["index"].tolist() for b in second] == want[k:]
                # the next epoch goes on as the DataLoader's does after set_epoch(3)
                sampler.set_epoch(3)
                ref = _sampler(n, world, rank, shuffle, tail)
                ref.set_epoch(3)
                assert [b["index"].tolist() for b in second] == \
                    _torch_batches(n, batch, ref, last)
                second.close()
            # the state is global: every rank took the same one
            assert all(s == states[0] for s in states)


def test_sampler_over_another_dataset_is_refused(shards):
    with pytest.raises(ValueError, match="DistributedSampler's dataset has 9 samples"):
        stoker.Loader(shards(10), 2, sampler=_sampler(9, 2, 0, False, False))


# ---- the one-name switch over a torchvision ImageFolder ----

def _tree(base, n):
    """n 8x8 PNGs in 3 classes, each a flat colour naming its file number: the pixels say which
    sample a batch row is."""
    for i in range(n):
        d = base / f"c{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        arr = np.zeros((8, 8, 3), np.uint8)
        arr[..., 0], arr[..., 1], arr[..., 2] = i % 256, i // 256, 40 + i % 3
        Image.fromarray(arr).save(d / f"{i:04d}.png")
    return str(base)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return _tree(tmp_path_factory.mktemp("distfolder") / "val", 31)


@pytest.mark.skipif(not stoker.has_transforms(), reason="no image pipeline")
def test_image_folder_switch_matches_dataloader(folder):
    ds = ImageFolder(folder, transform=T.Compose([T.CenterCrop(8), T.ToTensor()]))
    for world, shuffle, tail, last in itertools.product((2, 4), (False, True), (False, True),
                                                        (False, True)):
        for rank in range(world):
            mine = DistributedSampler(ds, world, rank, shuffle=shuffle, drop_last=tail, seed=1)
            theirs = DistributedSampler(ds, world, rank, shuffle=shuffle, drop_last=tail, seed=1)
            loader = stoker.Loader(ds, batch_size=3, sampler=mine, drop_last=last,
                                   num_workers=2)
            for epoch in (0, 1):
                mine.set_epoch(epoch)
                theirs.set_epoch(epoch)
                want = list(DataLoader(ds, batch_size=3, sampler=theirs, drop_last=last))
                got = [(x.clone(), y.clone()) for x, y in loader]
                assert len(got) == len(want) == len(loader)
                for (x, y), (a, b) in zip(got, want):
                    assert torch.equal(x, a) and torch.equal(y, b), \
                        (world, rank, shuffle, tail, last, epoch)
            loader.close()

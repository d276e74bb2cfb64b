"""Issue 16, first contact: a DataLoader user changes one name (DataLoader -> stoker.Loader)
and nothing surprises them. Each test is written as the user hit the trap: the (images, labels)
loop over a torchvision ImageFolder, the DataLoader's arguments, samplers, resume, two threads,
close() from another thread, the dataset after the loader, a batch larger than the dataset."""
import gc
import json
import math
import threading

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, SequentialSampler
from torchvision import transforms as T
from torchvision.datasets import DatasetFolder, ImageFolder
from torchvision.datasets.folder import default_loader

import stoker
from conftest import torchrun

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
VAL = T.Compose([T.Resize(72), T.CenterCrop(64), T.ToTensor(), T.Normalize(MEAN, STD)])
TRAIN = T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ToTensor(),
                   T.Normalize(MEAN, STD)])
SMALL = T.Compose([T.Resize((16, 16)), T.ToTensor()])
N = 23

pytestmark = pytest.mark.skipif(not stoker.has_transforms(), reason="no image pipeline")


def _photo(rng, w, h):
    """A smooth photo-like image (gradients and shapes): resampling differences stay small."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    c = rng.uniform(0, 1, (3, 3))
    arr = np.stack([255 * (c[k, 0] * x / w + c[k, 1] * y / h) / max(c[k, 0] + c[k, 1], 1e-3)
                    for k in range(3)], axis=-1)
    im = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))
    d = ImageDraw.Draw(im)
    for _ in range(3):
        x0, y0 = int(rng.integers(0, w - 10)), int(rng.integers(0, h - 10))
        d.ellipse([x0, y0, x0 + w // 4, y0 + h // 4], fill=tuple(rng.integers(0, 255, 3).tolist()))
    return im


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """An ImageFolder tree: N JPEGs in 3 classes (one in a nested folder)."""
    base = tmp_path_factory.mktemp("firstcontact") / "train"
    rng = np.random.default_rng(16)
    for i in range(N):
        d = base / f"class{i % 3}" / ("sub" if i == 4 else "")
        d.mkdir(parents=True, exist_ok=True)
        _photo(rng, 96 + 8 * (i % 4), 80 + 4 * (i % 5)).save(d / f"img{i:02d}.jpg", quality=92)
    return str(base)


def psnr01(a, b):
    mse = float(np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(1.0 / mse)


def unnormalise(x):
    return x * torch.tensor(STD)[:, None, None] + torch.tensor(MEAN)[:, None, None]


def pairs(loader):
    out = []
    for images, labels in loader:  # the loop every DataLoader user writes
        out.append((images.clone(), labels.clone()))
    return out


# ---- the one-name switch over ImageFolder ----

def test_val_transform_matches_dataloader_and_stokers_own_path(root):
    ds = ImageFolder(root, transform=VAL)
    loader = stoker.Loader(ds, batch_size=5, num_workers=2)
    got = pairs(loader)
    want = pairs(DataLoader(ds, batch_size=5))
    assert len(loader) == len(got) == len(want) == math.ceil(N / 5)
    for (a, la), (b, lb) in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype == torch.float32
        assert la.dtype == lb.dtype == torch.int64 and la.tolist() == lb.tolist()
        for x, y in zip(a, b):
            assert psnr01(unnormalise(x), unnormalise(y)) >= 30.0
    own = stoker.Loader(root, 5, transforms=VAL, num_workers=2, rank=0, world_size=1)
    own_images = torch.cat([b["image"].clone() for b in own])
    assert torch.equal(torch.cat([a for a, _ in got]), own_images)


def test_train_transform_equals_stokers_own_path(root):
    ds = ImageFolder(root, transform=TRAIN)
    g = torch.Generator().manual_seed(1234)
    loader = stoker.Loader(ds, batch_size=4, shuffle=True, generator=g, num_workers=2,
                           pin_memory=False, persistent_workers=True, prefetch_factor=2)
    got = pairs(loader)
    own = stoker.Loader(root, 4, shuffle=True, seed=g.initial_seed(), transforms=TRAIN,
                        num_workers=1, rank=0, world_size=1)
    ref = [(b["image"].clone(), b["label"].clone()) for b in own]
    assert [a.shape for a, _ in got] == [a.shape for a, _ in ref]
    for (a, la), (b, lb) in zip(got, ref):
        assert torch.equal(a, b) and torch.equal(la, lb)
    labels = sorted(torch.cat([la for _, la in got]).tolist())
    assert labels == sorted(t for _, t in ds.samples)  # every sample once


def test_datasetfolder_with_default_loader(root):
    ds = DatasetFolder(root, loader=default_loader, extensions=(".jpg",), transform=SMALL)
    got = pairs(stoker.Loader(ds, batch_size=8, num_workers=1))
    assert torch.cat([la for _, la in got]).tolist() == [t for _, t in ds.samples]


def test_what_stoker_cannot_express_runs_getitem_as_the_dataloader(root):
    # (issue 24: these were refused before) A folder dataset stoker cannot read in C (an op it
    # does not have, a target_transform, no transform, another loader, a changed sample list or
    # class numbering) runs its own __getitem__ on stoker's workers and gives the DataLoader's
    # batches.
    class Renamed(ImageFolder):
        def find_classes(self, directory):
            classes, _ = super().find_classes(directory)
            return classes, {c: len(classes) - 1 - i for i, c in enumerate(classes)}

    cases = [ImageFolder(root, transform=T.Compose([T.CenterCrop(8), T.RandomPerspective(p=0),
                                                    T.ToTensor()])),

             ImageFolder(root, transform=SMALL, target_transform=lambda t: t + 1),
             DatasetFolder(root, loader=lambda p: torch.tensor([len(p)]), extensions=(".jpg",)),
             DatasetFolder(root, loader=default_loader, transform=SMALL,
                           is_valid_file=lambda p: "sub" not in p),
             Renamed(root, transform=SMALL)]
    for ds in cases:
        loader = stoker.Loader(ds, batch_size=4, num_workers=2, executor="thread")
        assert loader.info()["executor"] == "thread"
        got = pairs(loader)
        want = pairs(DataLoader(ds, batch_size=4))
        assert len(got) == len(want)
        for (a, la), (b, lb) in zip(got, want):
            assert torch.equal(a, b) and torch.equal(la, lb)
    # Where stoker's resampling would differ, the one-name switch runs __getitem__ too: it
    # antialiases a tensor's resize (torchvision 0.14 does not) and extends the border where a
    # padding's zeros blend in (both were read natively: up to 129 and 224 grey levels apart)
    for tf in (T.Compose([T.ToTensor(), T.Resize((12, 12))]),
               T.Compose([T.Pad(4), T.Resize((12, 12)), T.ToTensor()])):
        ds = ImageFolder(root, transform=tf)
        loader = stoker.Loader(ds, batch_size=4, num_workers=2)
        assert loader.info()["executor"] != "native"
        for (a, la), (b, lb) in zip(pairs(loader), pairs(DataLoader(ds, batch_size=4)),
                                    strict=True):
            assert torch.equal(a, b) and torch.equal(la, lb)
    # PIL images, which default_collate cannot batch: the DataLoader's TypeError
    with pytest.raises(TypeError, match="default_collate"):
        next(iter(stoker.Loader(ImageFolder(root), batch_size=4, executor="thread")))


def test_other_datasets_run_their_getitem():
    class Squares(torch.utils.data.Dataset):
        def __len__(self):
            return 10

        def __getitem__(self, i):
            return torch.tensor([i * i]), i

    got = [(x.clone(), y.clone()) for x, y in stoker.Loader(Squares(), batch_size=4,
                                                            executor="thread")]
    assert [y.tolist() for _, y in got] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert torch.equal(torch.cat([x for x, _ in got])[:, 0], torch.arange(10) ** 2)


def test_dataloader_arguments_that_need_python_workers(root):
    ds = ImageFolder(root, transform=SMALL)
    # collate_fn, worker_init_fn and batch_sampler run Python: the dataset's own __getitem__
    # then runs on stoker's workers (not its C path)
    got = stoker.Loader(ds, batch_size=4, collate_fn=lambda b: len(b), executor="thread")
    assert got.info()["executor"] == "thread" and list(got) == [4] * (N // 4) + [N % 4]
    wi = stoker.Loader(ds, batch_size=4, worker_init_fn=lambda w: None, executor="thread")
    assert sum(len(la) for _, la in pairs(wi)) == N
    bs = stoker.Loader(ds, batch_sampler=[[0, 1], [5]], executor="thread")
    assert [la.tolist() for _, la in pairs(bs)] == [[ds.samples[0][1], ds.samples[1][1]],
                                                    [ds.samples[5][1]]]
    for kw, match in ((dict(sampler=SequentialSampler(ds), shuffle=True), "mutually exclusive"),
                      (dict(sampler=3), "torch Sampler")):
        with pytest.raises(ValueError, match=match):
            stoker.Loader(ds, batch_size=4, **kw)
    # the default collate and every other argument are accepted on the C path
    loader = stoker.Loader(ds, 4, collate_fn=torch.utils.data.default_collate, timeout=60,
                           multiprocessing_context="spawn", persistent_workers=False,
                           pin_memory_device="", in_order=True, drop_last=True)
    assert loader.info()["executor"] == "native"
    assert [len(la) for _, la in pairs(loader)] == [4] * (N // 4)


def test_samplers(root):
    ds = ImageFolder(root, transform=SMALL)
    seq = pairs(stoker.Loader(ds, batch_size=6, sampler=SequentialSampler(ds)))
    assert torch.cat([la for _, la in seq]).tolist() == [t for _, t in ds.samples]
    g = torch.Generator().manual_seed(99)
    a = pairs(stoker.Loader(ds, batch_size=6, sampler=RandomSampler(ds, generator=g)))
    b = pairs(stoker.Loader(ds, batch_size=6, shuffle=True, generator=g))
    order = stoker.epoch_order(N, True, g.initial_seed(), 0)
    assert torch.cat([la for _, la in a]).tolist() == [ds.samples[i][1] for i in order]
    assert all(torch.equal(x, y) for (x, _), (y, _) in zip(a, b))
    torch.manual_seed(5)  # no generator: drawn from torch's RNG, as the DataLoader does
    c = torch.cat([la for _, la in pairs(stoker.Loader(ds, batch_size=6, shuffle=True))])
    torch.manual_seed(5)
    d = torch.cat([la for _, la in pairs(stoker.Loader(ds, batch_size=6, shuffle=True))])
    assert c.tolist() == d.tolist()


def test_random_split_of_an_imagefolder_reads_natively(root):
    """random_split of an ImageFolder (the tutorials' train/val split) and a Subset of it read
    natively, the transform in C: the DataLoader's labels and pixels (VAL decodes exactly),
    in the subset's order, and shuffled: each of the subset's samples once per epoch; with a
    sampler over the Subset it runs the Subset's __getitem__ as any Python dataset. Was:
    always the Subset's __getitem__ (torchvision's transform in Python, on threads)."""
    ds = ImageFolder(root, transform=VAL)
    train, val = torch.utils.data.random_split(ds, [N - 8, 8],
                                               generator=torch.Generator().manual_seed(3))
    for part in (train, val, torch.utils.data.Subset(ds, [5, 5, 0, 22])):
        loader = stoker.Loader(part, batch_size=4)
        assert loader.info()["executor"] == "native" and loader.dataset is part
        assert len(loader) == len(DataLoader(part, batch_size=4))
        got, want = pairs(loader), pairs(DataLoader(part, batch_size=4))
        assert [la.tolist() for _, la in got] == [la.tolist() for _, la in want]
        assert all(psnr01(unnormalise(a), unnormalise(b)) > 40 for (a, _), (b, _) in zip(got, want))
        shuffled = stoker.Loader(part, batch_size=4, shuffle=True, seed=1)
        for _ in range(2):
            labels = torch.cat([la for _, la in pairs(shuffled)]).tolist()
            assert sorted(labels) == sorted(ds.samples[i][1] for i in part.indices)
    sampled = stoker.Loader(val, batch_size=4, sampler=SequentialSampler(val))
    assert sampled.info()["executor"] != "native"
    assert [la.tolist() for _, la in pairs(sampled)] == \
        [la.tolist() for _, la in pairs(DataLoader(val, batch_size=4))]


def test_distributed_sampler_over_a_random_split_half(root):
    """DistributedSampler over a random_split half of an ImageFolder (DDP with the tutorials'
    split): read natively, each rank gets the DataLoader's samples (labels, and images within
    a grey level), epoch by epoch, for the sampler's shuffle and drop_last (its positions name
    the Subset's indices)."""
    ds = ImageFolder(root, transform=SMALL)
    train, _ = torch.utils.data.random_split(ds, [N - 6, 6],
                                             generator=torch.Generator().manual_seed(4))
    for shuffle in (False, True):
        for tail in (False, True):
            for rank in range(3):
                def make(cls):
                    return cls(train, batch_size=3, sampler=DistributedSampler(
                        train, num_replicas=3, rank=rank, shuffle=shuffle, drop_last=tail))
                s, d = make(stoker.Loader), make(DataLoader)
                assert s.info()["executor"] == "native"
                for epoch in (0, 1):
                    s.sampler.set_epoch(epoch)
                    d.sampler.set_epoch(epoch)
                    got, want = pairs(s), pairs(d)
                    assert [la.tolist() for _, la in got] == \
                        [la.tolist() for _, la in want], (shuffle, tail, rank, epoch)
                    assert all(psnr01(a, b) > 40 for (a, _), (b, _) in zip(got, want))
                s.close()


def test_distributed_sampler_follows_set_epoch(root):
    """The DataLoader's batches over the same DistributedSampler (issue 24: its order, its split
    and both drop_last values; test_distributed_parity.py checks every combination)."""
    ds = ImageFolder(root, transform=SMALL)
    seen = []
    for rank in range(2):
        sampler = DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=True, seed=7)
        loader = stoker.Loader(ds, batch_size=4, sampler=sampler, num_workers=1)
        assert (loader.rank, loader.world_size, loader.sampler) == (rank, 2, sampler)
        ref = DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=True, seed=7)
        for epoch in (0, 1, 1):  # set_epoch(1) twice: the same order twice, as the sampler's
            loader.sampler.set_epoch(epoch)  # the DDP script's habit
            ref.set_epoch(epoch)
            got = pairs(loader)
            want = pairs(DataLoader(ds, batch_size=4, sampler=ref))
            assert [la.tolist() for _, la in got] == [la.tolist() for _, la in want]
            assert all(psnr01(x, y) > 40 for (x, _), (y, _) in zip(got, want))
            assert sum(len(la) for _, la in got) == math.ceil(N / 2)
            if epoch == 0:
                seen += list(ref)
    assert sorted(set(seen)) == list(range(N))
    # the sampler drops the uneven tail, the loader keeps the partial last batch
    sampler = DistributedSampler(ds, 2, 0, drop_last=True, shuffle=False)
    got = pairs(stoker.Loader(ds, batch_size=4, sampler=sampler))
    assert [len(la) for _, la in got] == [4, 4, 3]


def test_resume_mid_epoch(root):
    ds = ImageFolder(root, transform=TRAIN)
    kw = dict(batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(3),
              num_workers=2)
    full = pairs(stoker.Loader(ds, **kw))
    first = stoker.Loader(ds, **kw)
    it = iter(first)
    head = [next(it), next(it)]
    state = first.state_dict()
    first.close()
    second = stoker.Loader(ds, **kw)
    second.load_state_dict(state)
    rest = pairs(second)
    assert len(head) + len(rest) == len(full)
    for (a, la), (b, lb) in zip(head + rest, full):
        assert torch.equal(a, b) and torch.equal(la, lb)


def test_tuples_from_stokers_own_sources(root):
    loader = stoker.Loader(root, 5, output="tuple", fields=("image", "label"), transforms=SMALL,
                           rank=0, world_size=1)
    images, labels = next(iter(loader))
    assert images.shape == (5, 3, 16, 16) and labels.dtype == torch.int64
    with pytest.raises(ValueError, match="not in the dataset"):
        stoker.Loader(root, 5, output="tuple", fields=("image", "target"), rank=0,
                      world_size=1)


def test_timeout_raises_like_dataloader_and_loses_nothing(root):
    loader = stoker.Loader(ImageFolder(root, transform=SMALL), batch_size=4, num_workers=1,
                           timeout=0.05)
    loader._set_debug_delay(600000)  # held until released below: only the timeout can end it
    it = iter(loader)
    with pytest.raises(RuntimeError, match="timed out after 0.05 seconds"):
        next(it)
    loader._set_debug_delay(0)
    loader._core.set_timeout(0)
    labels = [la.clone() for _, la in it]
    assert torch.cat(labels).tolist() == [t for _, t in loader.dataset.samples]


# ---- threads and close (item 4) ----

def test_second_consumer_thread_is_refused_and_the_first_finishes_its_epoch(root):
    loader = stoker.Loader(root, 2, num_workers=1, rank=0, world_size=1)
    first_batch, go_on = threading.Event(), threading.Event()
    got, errors = [], []

    def first():
        for b in loader:
            got.append(b["index"].tolist())
            first_batch.set()
            go_on.wait(30)

    def second():
        try:
            for b in loader:
                errors.append("second thread got a batch")
        except stoker.StokerStateError as e:
            errors.append(e)

    t1 = threading.Thread(target=first)
    t1.start()
    assert first_batch.wait(30)
    t2 = threading.Thread(target=second)
    t2.start()
    t2.join(30)
    go_on.set()
    t1.join(60)
    assert not t1.is_alive() and not t2.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], stoker.StokerStateError)
    assert "one consumer" in str(errors[0])
    assert sum(got, []) == list(range(N))  # the whole epoch, undisturbed
    loader.close()


def test_close_from_another_thread_raises_in_the_blocked_loop(root):
    """The loop is blocked in next() on a batch held by the test hook (released only by
    close()), so close() lands while it waits whatever the machine's load (a 200 ms batch once
    stood for "blocked": a loop descheduled long enough could end its epoch first; issue 30)."""
    loader = stoker.Loader(ImageFolder(root, transform=SMALL), batch_size=2, num_workers=1)
    loader._set_debug_delay(600000)
    outcome = []

    def consume():
        try:
            for _ in loader:
                outcome.append("batch")
            outcome.append("ended normally")
        except stoker.StokerStateError as e:
            outcome.append(e)

    t = threading.Thread(target=consume)
    t.start()
    while not loader._core.pending and t.is_alive():  # the thread is inside next()
        t.join(0.005)
    loader.close()
    t.join(30)
    assert not t.is_alive()
    assert isinstance(outcome[-1], stoker.StokerStateError) and "closed" in str(outcome[-1])


# ---- lifetimes and sizes (item 6) ----

def test_dataset_outlives_the_loader(root):
    loader = stoker.Loader(root, 4, rank=0, world_size=1)
    ds = loader.dataset
    del loader
    gc.collect()
    assert len(ds) == N and ds[0]["label"] == 0
    loader = stoker.Loader(root, 4, rank=0, world_size=1)
    loader.close()
    with pytest.raises(stoker.StokerStateError, match="take loader.dataset before"):
        loader.dataset


def test_ring_slots_sized_to_the_records_per_rank(root):
    small = stoker.Loader(root, N, rank=0, world_size=1).info()["slot_size"]
    huge = stoker.Loader(root, 5000, rank=0, world_size=1)
    assert huge.info()["slot_size"] == small and huge.info()["batch_size"] == 5000
    assert [len(b["index"]) for b in huge] == [N]
    half = stoker.Loader(root, 5000, rank=1, world_size=2).info()["slot_size"]
    assert half == stoker.Loader(root, math.ceil(N / 2), rank=1, world_size=2).info()["slot_size"]
    assert half < small


# ---- under torchrun (2 ranks) ----

DDP_SCRIPT = r"""
import json, sys
import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler
from torchvision import transforms as T
from torchvision.datasets import ImageFolder
import stoker

root, out = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
ds = ImageFolder(root, transform=T.Compose([T.Resize((16, 16)), T.ToTensor()]))
sampler = DistributedSampler(ds, shuffle=True, seed=11)  # rank and world from torchrun
loader = stoker.Loader(ds, batch_size=4, sampler=sampler, num_workers=1)
assert (loader.rank, loader.world_size) == (rank, world)
epochs = []
for epoch in range(2):
    sampler.set_epoch(epoch)
    labels = torch.cat([labels for images, labels in loader])
    idx = torch.tensor(list(sampler))  # the DataLoader's samples on this rank
    assert labels.tolist() == [ds.samples[i][1] for i in idx.tolist()]
    gathered = [torch.zeros_like(idx) for _ in range(world)]
    dist.all_gather(gathered, idx)
    epochs.append(torch.cat(gathered).tolist())
if rank == 0:
    with open(out, "w") as f:
        json.dump({"world": world, "epochs": epochs, "n": len(ds)}, f)
dist.barrier()
dist.destroy_process_group()
"""


def test_torchrun_two_ranks_with_distributed_sampler(root, tmp_path):
    verdict = tmp_path / "verdict.json"
    torchrun(DDP_SCRIPT, 2, [root, verdict], tmp_path)
    v = json.loads(verdict.read_text())
    assert v["world"] == 2
    for order in v["epochs"]:  # every sample seen, padded by wrapping as DistributedSampler
        assert sorted(set(order)) == list(range(N)) and len(order) == 2 * math.ceil(N / 2)
    assert v["epochs"][0] != v["epochs"][1]  # set_epoch reshuffled

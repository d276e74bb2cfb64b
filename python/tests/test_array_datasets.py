"""torchvision's datasets of images in one array (CIFAR10 / CIFAR100, MNIST / FashionMNIST) read
natively: the images array in a memory file read by the npy source, the transform in C
(python/stoker/_torchcompat.py array_dataset, _memnpy.py).

The data are made here in the datasets' own layouts (CIFAR's pickles, MNIST's idx files), small,
with torchvision's integrity check of CIFAR's download checksums turned off for the test.
"""
import gc
import os
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
import torchvision.transforms as T  # noqa: E402
import torchvision.transforms.functional as F  # noqa: E402
from torch.utils.data import DataLoader, DistributedSampler  # noqa: E402
from torchvision.datasets import CIFAR10, CIFAR100, MNIST, FashionMNIST  # noqa: E402

import stoker  # noqa: E402
from conftest import open_memfds  # noqa: E402

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)
EVAL = T.Compose([T.ToTensor(), T.Normalize(MEAN, STD)])
TRAIN = T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.ToTensor(),
                   T.Normalize(MEAN, STD)])
N_TRAIN, N_TEST = 5 * 60, 70


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("cifar")
    rng = np.random.default_rng(5)
    for folder, names, key, n_classes in (
            ("cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"],
             "labels", 10),
            ("cifar-100-python", ["train", "test"], "fine_labels", 100)):
        os.makedirs(root / folder)
        for name in names:
            n = N_TEST if "test" in name else N_TRAIN // (5 if n_classes == 10 else 1)
            with open(root / folder / name, "wb") as f:
                pickle.dump({"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                             key: rng.integers(0, n_classes, n).tolist()}, f)
        meta, meta_key = ("batches.meta", "label_names") if n_classes == 10 else \
            ("meta", "fine_label_names")
        with open(root / folder / meta, "wb") as f:
            pickle.dump({meta_key: [f"c{i}" for i in range(n_classes)]}, f)
    return str(root)


@pytest.fixture(autouse=True)
def no_checksums(monkeypatch):
    import torchvision.datasets.cifar as cifar
    monkeypatch.setattr(cifar, "check_integrity", lambda *a, **k: True)


def batches(loader):
    return [(x.clone(), y.clone()) for x, y in loader]


def _why(ds):
    """Why stoker does not read `ds` natively (for an assertion's message)."""
    from stoker import _torchcompat
    try:
        _torchcompat.native_dataset(ds)
    except Exception as e:  # noqa: BLE001
        return repr(e)
    return "native_dataset accepts it"


def test_cifar10_eval_transform_gives_the_dataloaders_batches(root):
    """An evaluation transform (ToTensor, Normalize: no op fixes the size, the array's does) on
    CIFAR10's test set: read natively, the DataLoader's batches exactly (pixels and labels), in
    order, with its len and its last partial batch."""
    ds = CIFAR10(root, train=False, transform=EVAL)
    loader = stoker.Loader(ds, batch_size=16, num_workers=2)
    assert loader.info()["executor"] == "native" and loader.dataset is ds
    want = batches(DataLoader(ds, batch_size=16))
    assert len(loader) == len(want) == -(-N_TEST // 16)
    for _ in range(2):  # two epochs
        got = batches(loader)
        assert len(got) == len(want)
        for (a, la), (b, lb) in zip(got, want):
            assert a.dtype == b.dtype == torch.float32 and la.dtype == lb.dtype == torch.int64
            assert torch.equal(la, lb) and torch.equal(a, b)


def test_cifar10_train_transform_is_a_crop_and_flip_of_each_image(root):
    """The training transform (RandomCrop(32, padding=4), RandomHorizontalFlip, ToTensor,
    Normalize) draws stoker's own positions: each output is exactly one of the 162 padded crops
    (flipped or not) torchvision's functional ops give for that image; several placements
    occur; shuffled, every sample arrives once per epoch and the epochs differ."""
    ds = CIFAR10(root, train=True, transform=TRAIN)
    assert len(ds) == N_TRAIN
    loader = stoker.Loader(ds, batch_size=32, shuffle=False, num_workers=2)
    assert loader.info()["executor"] == "native"
    norm = T.Normalize(MEAN, STD)
    placements = set()
    x, y = next(iter(loader))
    for i in range(len(y)):
        padded = F.pad(F.to_tensor(ds.data[i]), 4)
        match = [(top, left, flip) for top in range(9) for left in range(9) for flip in (0, 1)
                 for c in [padded[:, top:top + 32, left:left + 32]]
                 if torch.equal(norm(F.hflip(c) if flip else c), x[i])]
        assert match, f"sample {i} is none of its image's crops"
        placements.add(match[0])
        assert y[i].item() == ds.targets[i]
    assert len(placements) > 5
    shuffled = stoker.Loader(ds, batch_size=32, shuffle=True, seed=3)
    orders = []
    for _ in range(2):
        labels = []
        for x, y in shuffled:
            labels += y.tolist()
        assert sorted(labels) == sorted(ds.targets)
        orders.append(labels)
    assert orders[0] != orders[1]


def test_cifar100_and_a_random_split_read_natively(root):
    """CIFAR100 (the same __getitem__) reads natively; so do random_split's halves of CIFAR10,
    in the Subset's order, and a DistributedSampler over a half gives each rank the
    DataLoader's samples."""
    ds = CIFAR100(root, train=False, transform=EVAL)
    loader = stoker.Loader(ds, batch_size=10)
    assert loader.info()["executor"] == "native"
    assert all(torch.equal(a, b) and torch.equal(la, lb) for (a, la), (b, lb) in
               zip(batches(loader), batches(DataLoader(ds, batch_size=10))))
    full = CIFAR10(root, train=True, transform=EVAL)
    train, val = torch.utils.data.random_split(full, [N_TRAIN - 50, 50],
                                               generator=torch.Generator().manual_seed(2))
    for part in (train, val):
        loader = stoker.Loader(part, batch_size=8)
        assert loader.info()["executor"] == "native" and loader.dataset is part
        got, want = batches(loader), batches(DataLoader(part, batch_size=8))
        assert len(got) == len(want)
        assert all(torch.equal(a, b) and torch.equal(la, lb) for (a, la), (b, lb) in
                   zip(got, want))
    for s, d in distributed_loaders(val, 2, seed=7):
        for epoch in range(2):
            s.sampler.set_epoch(epoch)
            d.sampler.set_epoch(epoch)
            assert [la.tolist() for _, la in s] == [la.tolist() for _, la in d]


def distributed_loaders(part, n_ranks, seed):
    """(stoker.Loader, DataLoader) over `part` with a shuffled DistributedSampler, for each rank;
    stoker's reads natively."""
    for rank in range(n_ranks):
        pair = tuple(cls(part, batch_size=4, sampler=DistributedSampler(
            part, num_replicas=n_ranks, rank=rank, shuffle=True, seed=seed))
            for cls in (stoker.Loader, DataLoader))
        assert pair[0].info()["executor"] == "native"
        yield pair


class Relabelled(CIFAR10):
    def __getitem__(self, i):
        x, y = super().__getitem__(i)
        return x, y + 100


@pytest.mark.parametrize("case", ["target_transform", "override", "lambda", "no-transform",
                                  "gray-data", "no-memfd"])
def test_cifar_stoker_cannot_express_runs_its_getitem(root, case, monkeypatch):
    """A CIFAR10 stoker cannot read natively (a target_transform, an overridden __getitem__, a
    transform op stoker lacks, data that is not a uint8 [N, H, W, 3] array, memory files
    refused) runs its
    __getitem__ as any Python dataset, with the DataLoader's batches; without a transform (PIL
    images) it fails as the DataLoader's collate does."""
    kw = dict(root=root, train=False, transform=EVAL)
    if case == "gray-data":  # replaced by the user: [N, H, W], not CIFAR's [N, H, W, 3]
        ds = CIFAR10(**dict(kw, transform=T.ToTensor()))
        ds.data = np.ascontiguousarray(ds.data[..., 0])
    elif case == "no-memfd":
        def refused(*a, **k):
            raise OSError(38, "Function not implemented")
        monkeypatch.setattr(os, "memfd_create", refused)
        ds = CIFAR10(**kw)
    elif case == "target_transform":
        ds = CIFAR10(target_transform=lambda y: y * 2, **kw)
    elif case == "override":
        ds = Relabelled(**kw)
    elif case == "lambda":
        ds = CIFAR10(**dict(kw, transform=T.Compose([T.ToTensor(), T.Lambda(lambda t: t * 2)])))
    else:
        ds = CIFAR10(**dict(kw, transform=None))
        with pytest.raises(TypeError):
            next(iter(DataLoader(ds, batch_size=4)))
        with pytest.raises(TypeError, match="PIL"):
            next(iter(stoker.Loader(ds, batch_size=4, num_workers=0)))
        return
    loader = stoker.Loader(ds, batch_size=16, num_workers=0)
    assert loader.info()["executor"] != "native"
    got, want = batches(loader), batches(DataLoader(ds, batch_size=16))
    assert len(got) == len(want)
    assert all(torch.equal(a, b) and torch.equal(la, lb) for (a, la), (b, lb) in zip(got, want))


def test_cifar_memory_files_close_with_the_loader(root):
    """The memory files holding a CIFAR loader's arrays are sealed (nothing can write them) and
    close once the loader and its dataset are gone: loaders made one after another (a loader
    per epoch) leave no descriptor open. A change to the dataset's arrays after a loader is
    built does not reach that loader (its copy), and reaches the next one."""
    def memfds():
        return len(open_memfds("CIFAR10"))
    ds = CIFAR10(root, train=False, transform=EVAL)
    gc.collect()
    before = memfds()
    for _ in range(3):
        loader = stoker.Loader(ds, batch_size=16)
        assert memfds() > before  # (the loader's own, and the npy source's descriptors)
        for fd in open_memfds("CIFAR10"):  # sealed: the C side maps them, unchecked
            w = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY)
            try:
                with pytest.raises(PermissionError):
                    os.write(w, b"x")
            finally:
                os.close(w)
        for _ in loader:
            pass
        del loader
        gc.collect()
        assert memfds() == before
    loader = stoker.Loader(ds, batch_size=N_TEST)
    saved = ds.targets
    ds.targets = [0] * N_TEST
    assert next(iter(loader))[1].tolist() == saved
    assert next(iter(stoker.Loader(ds, batch_size=N_TEST)))[1].tolist() == [0] * N_TEST
    ds.targets = saved


N_MNIST = 90


@pytest.fixture(scope="module")
def mnist_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("mnist")
    rng = np.random.default_rng(6)

    def idx(path, arr, magic):
        with open(path, "wb") as f:
            f.write(magic.to_bytes(4, "big"))
            for d in arr.shape:
                f.write(int(d).to_bytes(4, "big"))
            f.write(arr.tobytes())
    for cls in ("MNIST", "FashionMNIST"):
        os.makedirs(root / cls / "raw")
        for part, n in (("train", N_MNIST), ("t10k", 30)):
            idx(root / cls / "raw" / f"{part}-images-idx3-ubyte",
                rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), 2051)
            idx(root / cls / "raw" / f"{part}-labels-idx1-ubyte",
                rng.integers(0, 10, n).astype(np.uint8), 2049)
    return str(root)


def test_mnist_one_channel_gives_the_dataloaders_batches(mnist_root):
    """MNIST and FashionMNIST (one-channel images; ToTensor, Normalize((0.1307,), (0.3081,))):
    read natively, [B, 1, 28, 28] contiguous batches equal to the DataLoader's; with
    Grayscale(num_output_channels=3) in the transform, [B, 3, 28, 28] equal to the DataLoader's
    (Grayscale and RandomGrayscale leave a gray image as it is); a padded RandomCrop gives one
    of each image's crops."""
    norm = T.Normalize((0.1307,), (0.3081,))
    for cls in (MNIST, FashionMNIST):
        for tf, channels in ((T.Compose([T.ToTensor(), norm]), 1),
                             (T.Compose([T.Grayscale(3), T.ToTensor()]), 3),
                             (T.Compose([T.Grayscale(), T.RandomGrayscale(), T.ToTensor()]), 1)):
            ds = cls(mnist_root, train=True, transform=tf)
            loader = stoker.Loader(ds, batch_size=32, num_workers=2)
            assert loader.info()["executor"] == "native"
            got, want = batches(loader), batches(DataLoader(ds, batch_size=32))
            assert len(got) == len(want) == -(-N_MNIST // 32)
            for (a, la), (b, lb) in zip(got, want):
                assert a.shape == b.shape and a.shape[1] == channels and a.is_contiguous()
                assert torch.equal(a, b) and torch.equal(la, lb)
    ds = MNIST(mnist_root, train=False, transform=T.Compose([T.RandomCrop(28, padding=2),
                                                             T.ToTensor()]))
    x, y = next(iter(stoker.Loader(ds, batch_size=30)))
    assert x.shape == (30, 1, 28, 28) and y.tolist() == ds.targets.tolist()
    for i in range(30):
        padded = F.pad(F.to_tensor(ds.data[i].numpy()), 2)
        assert any(torch.equal(padded[:, t:t + 28, u:u + 28], x[i])
                   for t in range(5) for u in range(5)), f"sample {i} is none of its crops"


# ---- torch.utils.data.TensorDataset ----

def tensor_dataset(n=50):
    g = torch.Generator().manual_seed(8)
    return torch.utils.data.TensorDataset(
        torch.arange(n),                                   # int64 rows of shape ()
        torch.randn(n, 5, generator=g),                    # float32 [5]
        torch.randn(n, generator=g).double(),              # float64 rows of shape ()
        torch.randint(0, 2, (n, 2), generator=g).bool(),   # bool [2]
        torch.randn(n, 3, generator=g).bfloat16(),         # bfloat16 [3]
        torch.randint(0, 256, (n, 3, 4), generator=g, dtype=torch.uint8),
        torch.randint(-9, 9, (n,), generator=g, dtype=torch.int16),
        torch.randn(n, 2, generator=g).half(),             # float16 [2]
        torch.randint(-9, 9, (n, 2), generator=g, dtype=torch.int8),
        torch.randint(0, 99, (n,), generator=g, dtype=torch.int32).t())  # int32 rows of shape ()


def kept(loader):
    """Every batch of an epoch, each tensor cloned (the ring's slots are reused)."""
    return [[t.clone() for t in b] for b in loader]


def same_batches(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert type(a) is type(b) is list and len(a) == len(b)
        for x, y in zip(a, b):
            assert x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)


def test_tensor_dataset_gives_the_dataloaders_batches():
    """A TensorDataset (rows of 1-D and n-D tensors of int64, float32, float64, bool, bfloat16,
    uint8, int16, float16, int8, int32) is read natively: the DataLoader's batches exactly (a
    list of tensors of the tensors' dtypes and row shapes, the last batch partial or dropped,
    batch_size 1 by default); shuffled, each row once per epoch, other orders each epoch."""
    ds = tensor_dataset()
    for kw in (dict(batch_size=8), dict(batch_size=8, drop_last=True), dict()):
        loader = stoker.Loader(ds, num_workers=2, **kw)
        assert loader.info()["executor"] == "native"
        assert len(loader) == len(DataLoader(ds, **kw))
        same_batches(kept(loader), list(DataLoader(ds, **kw)))
    shuffled = stoker.Loader(ds, batch_size=8, shuffle=True, seed=4)
    orders = []
    for _ in range(2):
        order = torch.cat([b[0].clone() for b in shuffled]).tolist()
        assert sorted(order) == list(range(50))
        orders.append(order)
    assert orders[0] != orders[1]


def test_tensor_dataset_subsets_and_distributed_sampler():
    """random_split halves of a TensorDataset read natively with the DataLoader's batches; a
    DistributedSampler over a half gives each rank the DataLoader's rows."""
    ds = tensor_dataset()
    train, val = torch.utils.data.random_split(ds, [40, 10],
                                               generator=torch.Generator().manual_seed(1))
    for part in (train, val):
        loader = stoker.Loader(part, batch_size=4)
        assert loader.info()["executor"] == "native"
        same_batches(kept(loader), list(DataLoader(part, batch_size=4)))
    for s, d in distributed_loaders(train, 3, seed=2):
        same_batches(kept(s), list(d))


class Bare(CIFAR10):
    """A CIFAR10 subclass that sets up its own attributes (no data, targets or transform)."""

    def __init__(self):
        pass

    def __len__(self):
        return 3

    def __getitem__(self, i):
        return torch.full((2,), float(i)), i


def test_a_subclass_laid_out_otherwise_runs_its_getitem():
    """A CIFAR10 subclass without the arrays its base sets up (one that overrides __getitem__
    too, and one that does not) is refused natively, by name, and runs its __getitem__."""
    from stoker import _inmemory
    Bare.__getitem__, own = CIFAR10.__getitem__, Bare.__getitem__
    try:
        with pytest.raises(stoker.StokerInvalidError, match="not laid out as a CIFAR10"):
            _inmemory.dataset(Bare())
    finally:
        Bare.__getitem__ = own
    loader = stoker.Loader(Bare(), batch_size=3, num_workers=0)
    assert loader.info()["executor"] != "native"
    assert next(iter(loader))[1].tolist() == [0, 1, 2]


class Shifted(torch.utils.data.TensorDataset):
    def __getitem__(self, i):
        x, y = super().__getitem__(i)
        return x, y + 1


@pytest.mark.parametrize("case", ["requires_grad", "complex", "override", "too-large"])
def test_tensor_dataset_stoker_cannot_copy_runs_its_getitem(case, monkeypatch):
    """A TensorDataset stoker does not read natively (a tensor that requires grad, a dtype the
    npy source lacks, an overridden __getitem__, more bytes than it copies into memory files)
    runs its __getitem__ in Python, with the DataLoader's batches."""
    x, y = torch.randn(20, 3), torch.arange(20)
    if case == "requires_grad":
        ds = torch.utils.data.TensorDataset(x.requires_grad_(), y)
    elif case == "complex":
        ds = torch.utils.data.TensorDataset(x.to(torch.complex64), y)
    elif case == "override":
        ds = Shifted(x, y)
    else:
        from stoker import _inmemory
        monkeypatch.setattr(_inmemory, "TENSORS_MAX", 100)
        ds = torch.utils.data.TensorDataset(x, y)
    loader = stoker.Loader(ds, batch_size=6, num_workers=0)
    assert loader.info()["executor"] != "native"
    got, want = kept(loader), list(DataLoader(ds, batch_size=6))
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert all(torch.equal(u.detach(), v.detach()) for u, v in zip(a, b))


def test_batch_size_none_gives_unbatched_samples():
    """batch_size=None (the DataLoader's unbatched mode), by keyword or by position, gives each
    sample on its own, as the DataLoader does, for a dataset stoker would read natively (it runs
    __getitem__ then); left out, batch_size is 1. Was: batches of one sample, natively."""
    ds = torch.utils.data.TensorDataset(torch.arange(5), torch.arange(5) * 2.0)
    want = list(DataLoader(ds, batch_size=None))
    for loader in (stoker.Loader(ds, batch_size=None), stoker.Loader(ds, None)):
        got = [[t.clone() for t in s] for s in loader]
        assert len(got) == 5
        for a, b in zip(got, want):
            assert all(u.shape == v.shape == () and torch.equal(u, v) for u, v in zip(a, b))
    one = stoker.Loader(ds)
    assert one.info()["executor"] == "native" and next(iter(one))[0].shape == (1,)


# ---- SVHN, STL10 and QMNIST: [N, 3, H, W] RGB arrays, and MNIST's kin with 8-value targets ----

@pytest.fixture(scope="module")
def more_roots(tmp_path_factory):
    """STL10's binary files (96x96, as its X files store them: column-major planes) and
    QMNIST's test files (idx3 images, idx2 int32 targets of 8), small."""
    root = tmp_path_factory.mktemp("more")
    rng = np.random.default_rng(7)
    stl = root / "stl10_binary"
    os.makedirs(stl)
    for part, n in (("train", 20), ("test", 12), ("unlabeled", 4)):
        rng.integers(0, 256, (n, 3, 96, 96), dtype=np.uint8).tofile(stl / f"{part}_X.bin")
        if part != "unlabeled":
            (rng.integers(0, 10, n) + 1).astype(np.uint8).tofile(stl / f"{part}_y.bin")
    (stl / "class_names.txt").write_text("\n".join(f"c{i}" for i in range(10)) + "\n")
    raw = root / "QMNIST" / "raw"
    os.makedirs(raw)
    n = 40
    with open(raw / "qmnist-test-images-idx3-ubyte", "wb") as f:
        f.write((2051).to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in (n, 28, 28)))
        f.write(rng.integers(0, 256, (n, 28, 28), dtype=np.uint8).tobytes())
    targets = rng.integers(0, 10, (n, 8)).astype(">i4")
    with open(raw / "qmnist-test-labels-idx2-int", "wb") as f:
        f.write((0x0C02).to_bytes(4, "big") + n.to_bytes(4, "big") + (8).to_bytes(4, "big"))
        f.write(targets.tobytes())
    return str(root)


def svhn(transform, n=40):
    """An SVHN as its __init__ lays it out (scipy, which reads its .mat files, is not installed
    here): `data` the [N, 3, 32, 32] transposed view of the file's [32, 32, 3, N], `labels`
    int64 with 10 made 0."""
    from torchvision.datasets import SVHN, VisionDataset
    ds = SVHN.__new__(SVHN)
    VisionDataset.__init__(ds, "/nonexistent", transform=transform)
    ds.split = "test"
    mat = np.random.default_rng(8).integers(0, 256, (32, 32, 3, n), dtype=np.uint8)
    ds.data = np.transpose(mat, (3, 2, 0, 1))
    labels = np.random.default_rng(9).integers(1, 11, n).astype(np.int64)
    np.place(labels, labels == 10, 0)
    ds.labels = labels
    return ds


def test_svhn_stl10_qmnist_give_the_dataloaders_batches(more_roots, monkeypatch):
    """SVHN and STL10 ([N, 3, H, W] uint8 arrays: STL10's a transposed view of its file) and
    QMNIST (compat=True: the first of each 8-value target) read natively, with evaluation
    transforms: the DataLoader's batches exactly, within a grey level through a Resize (to a
    fixed size, or to one side: _sized_resize fixes it from the array's)."""
    from torchvision.datasets import QMNIST, STL10
    monkeypatch.setattr(STL10, "_check_integrity", lambda self: True)
    mean3, std3 = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)
    cases = [svhn(T.Compose([T.ToTensor(), T.Normalize(mean3, std3)])),
             svhn(T.Compose([T.CenterCrop(28), T.ToTensor()])),
             STL10(more_roots, split="train", transform=T.Compose([T.ToTensor(),
                                                                   T.Normalize(mean3, std3)])),
             STL10(more_roots, split="test", transform=T.Compose([T.Resize((64, 64)),
                                                                  T.ToTensor()])),
             STL10(more_roots, split="test", transform=T.Compose([T.RandomHorizontalFlip(0),
                                                                  T.Resize(48), T.ToTensor()])),
             STL10(more_roots, split="train+unlabeled", transform=T.ToTensor()),
             QMNIST(more_roots, what="test", transform=T.Compose([T.ToTensor(),
                                                                  T.Normalize((0.5,), (0.25,))]))]
    for ds in cases:
        name = type(ds).__name__
        loader = stoker.Loader(ds, batch_size=8, num_workers=2)
        assert loader.info()["executor"] == "native", (name, _why(ds))
        got, want = batches(loader), batches(DataLoader(ds, batch_size=8))
        assert len(got) == len(want) == -(-len(ds) // 8), name
        for (a, la), (b, lb) in zip(got, want):
            assert a.shape == b.shape and a.dtype == b.dtype, (name, a.shape, b.shape)
            assert la.dtype == lb.dtype == torch.int64 and torch.equal(la, lb), name
            if "Resize" in repr(ds.transform):  # (an antialiased resize: within a grey level)
                assert (a - b).abs().max() <= 1.5 / 255, name
            else:
                assert torch.equal(a, b), name
    # a Resize to one side is made one to the size torchvision computes from the array's
    from stoker._inmemory import _sized_resize
    for (h, w), size, want in (((40, 80), 32, (32, 64)), ((80, 40), [30], (60, 30)),
                               ((96, 96), 64, (64, 64))):
        ops = _sized_resize(T.Compose([T.RandomHorizontalFlip(), T.Resize(size), T.ToTensor()]),
                            h, w)
        assert [type(t).__name__ for t in ops] == ["RandomHorizontalFlip", "Resize", "ToTensor"]
        assert tuple(ops[1].size) == want, (h, w, size)
        assert F.resize(torch.zeros(3, h, w), size).shape[1:] == want  # torchvision's own rule
    crop_first = T.Compose([T.CenterCrop(30), T.Resize(20)])
    assert _sized_resize(crop_first, 40, 80) is crop_first  # (a size-changing op before it)
    # QMNIST with compat=False gives each target's 8 values: its own __getitem__ runs
    ds = QMNIST(more_roots, what="test", compat=False, transform=T.ToTensor())
    loader = stoker.Loader(ds, batch_size=8, num_workers=2)
    assert loader.info()["executor"] != "native"
    got, want = batches(loader), batches(DataLoader(ds, batch_size=8))
    assert all(torch.equal(a, b) and torch.equal(la, lb) for (a, la), (b, lb) in zip(got, want))
    assert want[0][1].shape == (8, 8)

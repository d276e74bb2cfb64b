"""A later loader's dataset, pickled to stoker's fork server, carries its large numpy arrays and
torch tensors through memory files (python/stoker/_memnpy.py Shared): each written once, mapped
copy-on-write by every worker process, instead of pickled into the spec's bytes (0.5 s for
CIFAR10's 150 MB array, ~16 s for 1 GB of tensors, and a private copy in every worker)."""
import gc

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, Dataset  # noqa: E402

import stoker  # noqa: E402
from stoker import _memnpy, _procpool  # noqa: E402
from conftest import open_memfds  # noqa: E402

N = 64


class Held(Dataset):
    """Sample i: rows of a transposed uint8 view (as CIFAR10 holds its images), of a float32
    tensor, of a bool tensor, and of a view of a tensor (pickled as before: it shares its
    base's storage); with `bump`, __getitem__ adds 1 to its own copy's row first."""

    def __init__(self, bump=False):
        rng = np.random.default_rng(3)
        self.images = rng.integers(0, 256, (N, 3, 96, 96), dtype=np.uint8).transpose(0, 2, 3, 1)
        self.x = torch.from_numpy(rng.standard_normal((N, 4096)).astype(np.float32))
        self.mask = torch.from_numpy(rng.integers(0, 2, (N, 1 << 14)).astype(bool))
        self.view = torch.arange(N * 1 << 15, dtype=torch.float32).view(N, -1)[:, :4096]
        self.bump = bump

    def __len__(self):
        return N

    def __getitem__(self, i):
        if self.bump:
            self.x[i] += 1
        return (torch.from_numpy(self.images[i].copy()), self.x[i].clone(),
                self.mask[i].clone(), self.view[i].clone(), i)


@pytest.fixture(scope="module", autouse=True)
def fork_server_first():
    """A loader on worker processes made first: the fork server exists, so the loaders below
    are later loaders, whose dataset is pickled to it."""
    first = stoker.Loader(torch.utils.data.TensorDataset(torch.arange(4)), batch_size=2,
                          num_workers=2, executor="process")
    list(first)
    first.close()


def _memfds():
    return len(open_memfds("stoker-shared"))


def test_a_later_loaders_large_arrays_go_through_memory_files():
    """The spec's pickle holds none of the large arrays' bytes (under 64 KB for ~3.8 MB of
    arrays and tensors, the view aside); the workers' samples equal the DataLoader's, two
    epochs; the memory files close with the loader."""
    gc.collect()
    before = _memfds()
    ds = Held()
    spec = _procpool.WorkerSpec(ds, 2, 0, None, "Held")
    blob = _procpool._dumps_spec(spec)
    assert len(blob) < ds.view.storage().nbytes() + (64 << 10)  # the view's storage, pickled
    assert _memfds() == before + 3  # images, x, mask; not the view
    del spec, blob
    gc.collect()
    assert _memfds() == before
    loader = stoker.Loader(ds, batch_size=8, num_workers=2, executor="process")
    want = list(DataLoader(ds, batch_size=8))
    for _ in range(2):
        got = [[t.clone() for t in b] for b in loader]
        assert len(got) == len(want)
        for a, b in zip(got, want):
            assert all(torch.equal(u, v) for u, v in zip(a, b))
    assert _memfds() > before
    loader.close()
    del loader
    gc.collect()
    assert _memfds() == before


def test_a_workers_writes_stay_its_own():
    """A __getitem__ that writes into the dataset's tensor writes into its worker's copy-on-write
    mapping: the sample sees its write, the training process's tensor does not change."""
    ds = Held(bump=True)
    x = ds.x.clone()
    loader = stoker.Loader(ds, batch_size=8, num_workers=2, executor="process")
    got = torch.cat([b[1].clone() for b in loader])
    loader.close()
    # (the probe's first samples ran in worker 0 once more: +2 there, as before this change)
    assert torch.equal(got[16:], x[16:] + 1)
    assert torch.equal(ds.x, x)


def test_shared_array_round_trip():
    """Shared's reduction and shared_array give back equal arrays and tensors (dtype, shape,
    values, strides of a transposed view), writable; small and object arrays pickle as before."""
    import pickle
    from stoker import _holds
    shared = _memnpy.Shared()
    rng = np.random.default_rng(4)
    things = [rng.integers(0, 9, (40, 3, 100, 100), dtype=np.uint8).transpose(0, 2, 3, 1),
              rng.standard_normal((300, 1000)),
              np.asfortranarray(rng.standard_normal((500, 600))),
              torch.randn(300, 1000).bfloat16(), torch.randint(0, 2, (2000, 600)).bool(),
              np.arange(10), np.array([object()] * 3)]
    back = pickle.loads(_holds.dumps(things, shared))
    for a, b in zip(things[:-1], back[:-1]):
        assert type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape
        if isinstance(a, np.ndarray):
            assert np.array_equal(a, b) and b.flags.writeable
        else:
            assert torch.equal(a, b)
    assert back[0].strides == things[0].strides
    b = back[1]
    b[0, 0] += 1  # its own copy
    assert b[0, 0] != things[1][0, 0]
    assert len(back[-1]) == 3


def test_without_memory_files_the_arrays_pickle_as_before(monkeypatch):
    """Where memfd_create fails (another kernel, a sandbox), the arrays pickle into the spec as
    before, and the loader gives the DataLoader's samples."""
    import os

    def refused(*a, **k):
        raise OSError(38, "Function not implemented")
    monkeypatch.setattr(os, "memfd_create", refused)
    ds = Held()
    blob = _procpool._dumps_spec(_procpool.WorkerSpec(ds, 2, 0, None, "Held"))
    assert len(blob) > ds.x.numel() * 4
    loader = stoker.Loader(ds, batch_size=16, num_workers=2, executor="process")
    got = [[t.clone() for t in b] for b in loader]
    loader.close()
    want = list(DataLoader(ds, batch_size=16))
    assert all(torch.equal(u, v) for a, b in zip(got, want) for u, v in zip(a, b))


class Mapped(Dataset):
    """Rows of a .npy file opened with np.load(mmap_mode="r") (nanoGPT's np.memmap), and of a
    slice of it."""

    def __init__(self, path):
        self.rows = np.load(path, mmap_mode="r")
        self.head = self.rows[:8]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return torch.from_numpy(self.rows[i].copy()), torch.from_numpy(self.head[i % 8].copy())


def test_a_memmap_is_opened_again_not_pickled(tmp_path):
    """A dataset holding an np.memmap pickles it as its file (opened again by the worker, as a
    forked worker shares the mapping), not as its bytes, which numpy's pickle copies whole; a
    slice of one pickles as before. The samples are the DataLoader's."""
    path = str(tmp_path / "rows.npy")
    np.save(path, np.arange(N * 8192, dtype=np.float32).reshape(N, 8192))
    ds = Mapped(path)
    blob = _procpool._dumps_spec(_procpool.WorkerSpec(ds, 2, 0, None, "Mapped"))
    assert len(blob) < (64 << 10) + ds.head.nbytes
    loader = stoker.Loader(ds, batch_size=16, num_workers=2, executor="process")
    got = [[t.clone() for t in b] for b in loader]
    loader.close()
    want = list(DataLoader(ds, batch_size=16))
    assert len(got) == len(want)
    assert all(torch.equal(u, v) for a, b in zip(got, want) for u, v in zip(a, b))

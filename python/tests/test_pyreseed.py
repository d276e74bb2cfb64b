"""Random augmentation from the global generators is the same sample whatever the worker count
and executor choice that can make it exact, and never silently different where it cannot
(issue 24, docs/python.md "Randomness that does not depend on the worker count").

Python's `random`, NumPy's legacy global generator and torch's CPU generator are one per
process: worker processes seed them before every __getitem__ from (seed, epoch, index), so any
num_workers and executor="auto" or "process" give the same samples. Worker threads share them
with each other and with the training loop (NumPy's legacy state cannot be made per thread), so
there the draws race: executor="auto" picks processes when the probe sees a draw, and
executor="thread" warns."""
import random
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import Dataset  # noqa: E402

import stoker  # noqa: E402


class Draws(Dataset):
    """Sample i: one draw from each of the three global generators."""

    def __len__(self):
        return 24

    def __getitem__(self, i):
        return i, random.random(), float(np.random.rand()), float(torch.rand(()))


def samples(loader):
    out = {}
    for i, a, b, c in loader:
        for k in range(len(i)):
            out[int(i[k])] = (float(a[k]), float(b[k]), float(c[k]))
    return out


def test_same_samples_for_1_2_4_workers_and_both_process_choices():
    runs = {}
    for kw in (dict(num_workers=1), dict(num_workers=2), dict(num_workers=4),
               dict(num_workers=4, executor="process", batch_size=5),
               dict(num_workers=0)):
        kw = {"batch_size": 3, **kw}
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no warning: these are exact
            loader = stoker.Loader(Draws(), seed=7, **kw)
        assert loader.info()["executor"] == "process", kw
        runs[str(kw)] = samples(loader)
        loader.close()
    first = next(iter(runs.values()))
    assert len(first) == 24 and len({v for v in first.values()}) == 24
    for k, v in runs.items():
        assert v == first, k


def test_threads_are_not_exact_and_say_so():
    """executor='thread' cannot seed process-wide generators per sample: it warns, and its
    samples are random (all 24 distinct) but not those of the processes."""
    with pytest.warns(RuntimeWarning, match="not reproducible"):
        loader = stoker.Loader(Draws(), batch_size=3, num_workers=2, seed=7, executor="thread")
    got = samples(loader)
    loader.close()
    ref = stoker.Loader(Draws(), batch_size=3, num_workers=2, seed=7)
    want = samples(ref)
    ref.close()
    assert len(got) == 24 and len(set(got.values())) == 24
    assert got != want

"""Random augmentation from the global generators is the same sample whatever the worker count
and executor choice that can make it exact, and never silently different where it cannot
(issue 24, docs/python.md "Randomness that does not depend on the worker count").

Python's `random`, NumPy's legacy global generator and torch's CPU generator are one per
process: worker processes seed them before every __getitem__ from (seed, epoch, index) (or
watch those the probe saw untouched and run a call that drew from one again, seeded), so any
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
    # the three generators give three streams: Python's and NumPy's were seeded alike, so
    # random.random() == np.random.rand() held for every sample (a flip drawn from each agreed)
    assert all(len({a, b, c}) == 3 for a, b, c in first.values())


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


# ---- a worker watches the generators the probe saw untouched instead of seeding them ----

class LateDraws(Dataset):
    """Draws from the three generators only from sample 12 on (past the probe's first samples,
    which then see no draw)."""

    def __len__(self):
        return 24

    def __getitem__(self, i):
        if i < 12:
            return i, 0.0, 0.0, 0.0
        return i, random.random(), float(np.random.rand()), float(torch.rand(()))


def seeded(ds, seed, epoch):
    from stoker import _core, _pyworker
    out = {}
    for i in range(len(ds)):
        _pyworker.seed_all(_core.sample_seed(seed, epoch, i))
        i, a, b, c = ds[i]
        out[i] = (a, b, c)
    return out


@pytest.mark.parametrize("workers", [1, 2])
def test_late_draws_are_seeded_samples_too(workers):
    # the workers watch random and NumPy (the probe saw no draw) and seed torch; the first
    # call that draws from a watched generator is run again with all three seeded: every
    # sample is the one seeded per (seed, epoch, index), in both epochs
    assert_seeded_samples(LateDraws(), seed=5, num_workers=workers, executor="process")


def assert_seeded_samples(ds, **kw):
    """Two epochs of a loader over `ds` give the samples seeded per (seed, epoch, index) by all
    three generators (the global generators' states are kept around the reference run)."""
    state = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    want = [seeded(ds, kw["seed"], e) for e in (0, 1)]
    random.setstate(state[0])
    np.random.set_state(state[1])
    torch.set_rng_state(state[2])
    loader = stoker.Loader(ds, batch_size=4, **kw)
    assert loader.info()["executor"] == "process"
    for e in (0, 1):
        assert samples(loader) == want[e]
    loader.close()


class TorchFirst(Dataset):
    """Draws from torch's generator in every sample (as a torchvision random transform does),
    and from Python's and NumPy's only from sample 12 on."""

    def __len__(self):
        return 24

    def __getitem__(self, i):
        t = float(torch.rand(()))
        if i < 12:
            return i, 0.0, 0.0, t
        return i, random.random(), float(np.random.rand()), t


@pytest.mark.parametrize("workers", [1, 2])
def test_generators_the_probe_saw_unused_are_watched(workers):
    """The probe saw only torch's generator drawn from: the workers seed torch's and watch
    Python's and NumPy's (not seeding them costs nothing a sample: 16 us a sample was theirs),
    and the first call that draws from one of them is run again seeded: every sample is the one
    seeded per (seed, epoch, index) by all three, in both epochs. Was: a probe that saw any
    draw had all three seeded before every sample."""
    from stoker._seedwatch import watchable
    assert watchable({"torch"}) == ("numpy", "random")
    assert watchable({"torch", "numpy"}) == ("random",)
    assert watchable({"torch", "setter"}) == () and watchable(()) == ("numpy", "random")
    assert_seeded_samples(TorchFirst(), seed=9, num_workers=workers)


def test_seedwatch_says_which_call_drew():
    from stoker._seedwatch import NP_KEY, SeedWatch
    state = (random.getstate(), np.random.get_state())
    try:
        w = SeedWatch(True)
        w.before(1)  # the first sample: everything seeded, then watched
        assert w.watching() == ["numpy", "random"]
        assert not w.drew()
        w.before(2)
        np.random.rand()
        assert w.drew() and w.watching() == ["random"]  # NumPy is seeded from now on
        w.before(3)
        a = np.random.rand()
        np.random.seed([3, 0, NP_KEY])
        assert a == np.random.rand()  # seeded as seed_all seeds it
        assert not w.drew()
        w.before(4)
        random.getrandbits(32)
        assert w.drew() and w.watching() == []
        # 624 draws bring the position back: the regenerated key still says so
        w = SeedWatch(True)
        w.before(1)
        w.before(2)
        for _ in range(312):
            np.random.rand()  # two 32-bit words each
        assert w.drew()
        # only the generators named are watched
        w = SeedWatch(("numpy",))
        w.before(1)
        assert w.watching() == ["numpy"]
        # watch=False seeds everything every time
        w = SeedWatch(False)
        w.before(1)
        assert w.watching() == []
    finally:
        random.setstate(state[0])
        np.random.set_state(state[1])


def test_reseed_off_on_threads_draws_no_sample_twice():
    # The probe puts the generators back after the first sample; with reseed=False its kept
    # sample was then delivered and the thread's next sample drew the same numbers again
    # (samples 0 and 1 equal, 3 of 3 runs). A kept sample that drew is loaded again instead.
    loader = stoker.Loader(Draws(), batch_size=4, num_workers=1, executor="thread",
                           reseed=False)
    got = samples(loader)
    loader.close()
    assert len(got) == 24 and len(set(got.values())) == 24

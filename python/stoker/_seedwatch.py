"""Per-sample seeding in a worker process without seeding the generators __getitem__ leaves alone.

Seeding the global generators before every __getitem__ (_pyworker.seed_all: Python's random,
NumPy's global generator, torch's CPU generator) costs a worker process 12-22 us a sample,
most of it random.seed and np.random.seed re-running Mersenne Twister's initialization (624
words each); an h5py sample takes ~90 us (bench/RESULTS.md, issue 24 pyhdf5). Most datasets never
draw from those two. A generator __getitem__ does not draw from needs no seed: the sample is the
same whatever state it is in. So a worker that the probe saw not drawing (init["watch"]) seeds
them once, at its first sample, and then watches them instead of seeding: before each call it
reads each watched generator's position (a few machine words read in place: under 1 us), after
it compares. A call that drew from a watched generator drew from the wrong state: its sample is
thrown away and __getitem__ runs again with every generator seeded (SeedWatch.drew() says so;
the caller re-runs it), and that generator is seeded before every later sample of this worker.
So every delivered sample is the one seeded per (seed, epoch, index), as test_pyreseed.py
checks; the cost is one more call of __getitem__, once per worker and generator, for a dataset
that starts drawing after the probe's samples.

The positions read: NumPy's MT19937 state (its key[0] and pos, at the bit generator's public
ctypes.state_address) and CPython's random.Random object (index and state[0] after the object
header). A draw moves pos/index; 624 draws bring it back with key[0] regenerated. Each reader
is checked when it is made (seed, draw, and compare with getstate()), generators put back as they
were; one that does not read true (another layout, another Python) is never watched: seeded each
sample as before. The caches that skip a draw (NumPy's legacy gauss, random's gauss_next) are
empty after a seed, and a watched generator is never drawn from without being seeded again, so
they stay empty.
"""
import ctypes
import random
import sys

import numpy as np


def _np_reader():
    """() -> (key[0], pos) of NumPy's global MT19937, read in place; None when it does not read
    true."""
    try:
        gen = np.random.mtrand._rand
        bitgen = gen._bit_generator
        if type(bitgen).__name__ != "MT19937":
            return None
        addr = bitgen.ctypes.state_address
        key0 = ctypes.c_uint32.from_address(addr)
        pos = ctypes.c_int.from_address(addr + 624 * 4)

        def read():
            return key0.value, pos.value

        saved = np.random.get_state()
        try:
            for seed in ([1, 2], [3, 4]):
                np.random.seed(seed)
                st = np.random.get_state()
                if read() != (int(st[1][0]), int(st[2])) or st[2] != 624:
                    return None
                np.random.random()
                st = np.random.get_state()
                if read() != (int(st[1][0]), int(st[2])) or st[2] == 624:
                    return None
        finally:
            np.random.set_state(saved)
        return read
    except Exception:  # noqa: BLE001 - another NumPy: not watched
        return None


def _py_reader():
    """() -> (state[0], index) of Python's global random.Random, read in place; None when it
    does not read true."""
    try:
        inst = random._inst
        base = id(inst) + object.__basicsize__
        index = ctypes.c_int.from_address(base)
        word0 = ctypes.c_uint32.from_address(base + 4)

        def read():
            return word0.value, index.value

        saved = random.getstate()
        try:
            for seed in (1, 2):
                random.seed(seed)
                st = random.getstate()[1]
                if read() != (st[0], st[-1]) or st[-1] != 624:
                    return None
                random.random()
                st = random.getstate()[1]
                if read() != (st[0], st[-1]) or st[-1] == 624:
                    return None
        finally:
            random.setstate(saved)
        return read
    except Exception:  # noqa: BLE001 - another Python: not watched
        return None


# ---- the three generators' per-sample seeds (_pyworker.seed_all seeds all three with them) ----

NP_KEY = 0x4E50  # NumPy's seeding key's third word ("NP")


def seed_py(seed):
    random.seed(seed)


def seed_np(seed):
    # (a third key word: with the seed's two alone, NumPy's Mersenne Twister was initialised as
    # random.seed(seed) initialises Python's, so both gave the same numbers for every sample:
    # a flip drawn from random and one drawn from NumPy always agreed)
    np.random.seed([seed & 0xFFFFFFFF, seed >> 32, NP_KEY])


def seed_torch(seed):
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.default_generator.manual_seed(seed)


WATCHABLE = frozenset(("random", "numpy"))  # the generators SeedWatch can watch (torch's: no)


def watchable(drew_from):
    """The generators a worker may watch instead of seeding, from those the probe saw the
    dataset draw from (_pyworker.probe_samples: names among "random", "numpy", "torch", and
    "setter" when __getitem__ set a generator's state itself): the others of "random" and
    "numpy", none for a dataset that sets a state (FakeData seeds and restores torch's: its
    calls are left as seeded as the DataLoader's). A generator the probe did not see used and
    that a later sample draws from is still caught (drew) and seeded from then on."""
    drew_from = frozenset(drew_from)
    return () if "setter" in drew_from else tuple(sorted(WATCHABLE - drew_from))


class SeedWatch:
    """A worker's per-sample seeding (seed_all's result for every delivered sample): before(seed)
    before each __getitem__, then drew(): True when the call drew from a generator that was
    watched instead of seeded (the caller seeds everything, seed_all(seed), and calls again).
    watch: the generators to watch (watchable()'s names; True: "random" and "numpy"); False:
    seed_all before every call, as before."""

    def __init__(self, watch=True):
        # which of ("random", "numpy") to watch: True both, False neither, or their names
        self.watch = WATCHABLE if watch is True else frozenset(watch or ()) & WATCHABLE
        self.armed = False
        self.readers = {}   # name -> read() of the generators watched, not seeded
        self.marks = {}     # name -> read() before the call

    def before(self, seed):
        seed &= (1 << 64) - 1
        if not self.armed:  # the first sample: everything seeded (caches emptied), then watched
            self.armed = True
            for name, make in (("random", _py_reader), ("numpy", _np_reader)):
                if name in self.watch:
                    read = make()
                    if read is not None:
                        self.readers[name] = read
            seed_py(seed)
            seed_np(seed)
        else:
            if "random" not in self.readers:
                seed_py(seed)
            if "numpy" not in self.readers:
                seed_np(seed)
        seed_torch(seed)
        for name, read in self.readers.items():
            self.marks[name] = read()

    def drew(self):
        """Whether the call since before() drew from a watched generator (which is seeded
        before every call from now on)."""
        moved = [name for name, read in self.readers.items() if read() != self.marks[name]]
        for name in moved:
            del self.readers[name]
        return bool(moved)

    def watching(self):
        return sorted(self.readers)

"""batch_size=None with a sampler that yields lists of indices: each list handed whole to the
dataset's __getitem__, as the DataLoader hands it.

That is the DataLoader's idiom for samples too small to fetch one at a time (a BatchSampler as
the `sampler`, a `__getitem__` that indexes its tensors with the whole list) and for batch-wise
work such as tokenizing a list of strings at once. stoker's order holds integer positions, so
each list becomes one sample of the unbatched loader: an epoch's order holds the positions of
its lists, and ListFetch, the dataset the executors call, hands position p's list to the
user's dataset.

The sampler is iterated once per epoch in the training process (CustomOrder, as the DataLoader
iterates it); each epoch's lists are a *generation* with a tag (0..TAGS-1, in turn), and the
epoch's positions are p + n * tag (n the first epoch's list count), so
- a worker still loading the previous epoch's read-ahead reads that epoch's lists, not the
  next one's, and
- a new epoch's order never equals the previous one (the C loader would take an equal order for
  the same epoch and keep the batches it prepared).
Worker threads read the generations from memory (the last two are kept). Worker processes read
them from files the training process writes, one per tag, atomically (a new inode each time), in
a directory of its own under /dev/shm (else the temporary directory), removed when the loader
goes (and, for a training process killed first, by the next one that makes such a directory);
there each list arrives as a list of Python ints.
"""
import os
import shutil
import tempfile
import weakref

import numpy as np

from . import _core

TAGS = 8  # generations in turn: a worker is never that many epochs behind


def index_list(x):
    """Whether a sampler's item is a list of indices (a batch to fetch), not one index."""
    if isinstance(x, (str, bytes)):
        return False
    if isinstance(x, (list, tuple, range)):
        return True
    return getattr(x, "ndim", None) == 1  # a 1-d numpy array or tensor (a 0-d one is one index)


def _remove(path, pid):
    if os.getpid() == pid:  # (not in a forked worker, which inherits this finalizer)
        shutil.rmtree(path, ignore_errors=True)


def _remove_orphans(parent):
    """The directories of training processes that are gone (killed before they removed them)."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        part = name.split("-")
        if len(part) != 4 or part[:2] != ["stoker", "lists"] or not part[2].isdigit():
            continue
        try:
            os.kill(int(part[2]), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
        except OSError:  # (alive, another user's)
            pass


def users(dataset):
    """The user's dataset: inside a ListFetch (a sampler of index lists), else `dataset`."""
    return dataset.dataset if isinstance(dataset, ListFetch) else dataset


class ListFetch:
    """The dataset the executors call for a sampler of index lists (see the module's text)."""

    def __init__(self, n, what):
        self.dataset = None  # the user's (PyLoader sets it)
        self.n, self.what = n, what
        self.gens = {}       # tag -> the sampler's items (the last two generations)
        self.tag = TAGS - 1
        self.files = None    # the directory worker processes read generations from
        self._read = {}      # (a worker process) tag -> (inode, offsets, flat indices)

    def __len__(self):
        return TAGS * self.n

    def __getstate__(self):  # a worker process's copy: the files, not the generations
        return {"dataset": self.dataset, "n": self.n, "what": self.what, "files": self.files}

    def __setstate__(self, state):
        self.__dict__.update(state, gens={}, tag=None, _read={})

    def __getitem__(self, i):
        tag, p = divmod(i, self.n)
        items = self.gens.get(tag)
        idx = items[p] if items is not None else self._from_file(tag, p)
        try:
            return self.dataset[idx]
        except Exception as e:  # (the loader's error names position i: say which list it was)
            try:
                shown = ", ".join(str(int(v)) for v in list(idx)[:8])
                shown += ", ..." if len(idx) > 8 else ""
            except Exception:  # noqa: BLE001 - items that are not integers: shown as given
                shown = repr(idx)[:200]
            e.add_note(f"stoker.Loader: __getitem__ was given the sampler's list {p} of the "
                       f"epoch: [{shown}]")
            raise

    def _from_file(self, tag, p):
        path = os.path.join(self.files, f"{tag}.npy")
        ino = os.stat(path).st_ino
        got = self._read.get(tag)
        if got is None or got[0] != ino:
            a = np.load(path)
            k = int(a[0])
            got = (ino, a[1:k + 2], a[k + 2:])
            self._read[tag] = got
        off = got[1]
        return got[2][off[p]:off[p + 1]].tolist()

    def publish(self, items):
        """An epoch's lists -> the order's positions for them (written for worker processes
        first, when they read them)."""
        if not items:
            raise _core.StokerInvalidError(f"{self.what} gave no lists: an epoch needs at least "
                                           f"one sample")
        if len(items) > self.n or not all(index_list(b) for b in items):
            raise _core.StokerInvalidError(
                f"{self.what} yielded lists of indices in its first epoch ({self.n} of them) and "
                f"now {len(items)} items, not all lists: batch_size=None fetches the same number "
                f"of lists each epoch")
        self.tag = (self.tag + 1) % TAGS
        self.gens.pop((self.tag - 2) % TAGS, None)
        self.gens[self.tag] = items
        if self.files is not None:
            self._write(self.tag)
        return np.arange(len(items), dtype=np.uint64) + np.uint64(self.n * self.tag)

    def for_processes(self):
        """Worker processes will read the generations: a directory for them, with the ones made
        so far. Returns the directory."""
        if self.files is None:
            shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
            _remove_orphans(shm or tempfile.gettempdir())
            self.files = tempfile.mkdtemp(prefix=f"stoker-lists-{os.getpid()}-", dir=shm)
            weakref.finalize(self, _remove, self.files, os.getpid())
            for tag in self.gens:
                self._write(tag)
        return self.files

    def drop_files(self):
        """No worker process reads the generations (threads were chosen, or the loader closed):
        the directory goes, and no more files are written."""
        if self.files is not None:
            _remove(self.files, os.getpid())
            self.files = None

    def _write(self, tag):
        items = self.gens[tag]
        try:
            flat = [[int(v) for v in b] for b in items]
        except (TypeError, ValueError) as e:
            raise _core.StokerInvalidError(f"{self.what}: a list holds something that is not an "
                                           f"index ({e}); worker processes get lists of ints")
        off = np.zeros(len(flat) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in flat], out=off[1:])
        a = np.concatenate([np.array([len(flat)], dtype=np.int64), off,
                            np.fromiter((v for b in flat for v in b), dtype=np.int64,
                                        count=int(off[-1]))])
        tmp = os.path.join(self.files, f".{tag}.tmp.npy")
        np.save(tmp, a)
        os.replace(tmp, os.path.join(self.files, f"{tag}.npy"))

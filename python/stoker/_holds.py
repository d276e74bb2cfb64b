"""What a Python dataset holds: the objects below it, and the open files among them.

One walker (`reachable`) finds the objects a dataset holds through its attributes and the first
items of its lists, tuples and dicts; the loader asks it what cannot cross a fork (an open h5py
or lmdb handle: _pydataset.fork_unsafe), which attributes stoker's own calls of __getitem__
opened, and which open files the dataset reads.

An open file the dataset reads (`self.f = open(path, "rb")` in __init__, then a seek and a read
in __getitem__) has one position. Threads share it, and so do processes forked with it (the
DataLoader's workers: a fork shares the open file description), so a seek and a read from two
workers at once read each other's bytes, silently. Each stoker worker process therefore reads
through a position of its own: a file the worker inherited by fork is opened again under the
same descriptor number (`own_positions`), and one pickled to it is opened again by its path at
its position (`dumps`). Only files opened read-only on regular files are touched; any other
(written, a pipe, a socket) is left as it is (and, pickled, fails as before).
"""
import copyreg
import fcntl
import io
import os
import pickle
import stat
import sys
import types

WALK_DEPTH = 3  # how deep below the dataset objects are looked at (Subset -> dataset -> file)


def leaf(v):
    """Values the walk does not look into (nor count as objects)."""
    if v is None or isinstance(v, (str, bytes, int, float)):
        return True
    np = sys.modules.get("numpy")
    torch = sys.modules.get("torch")
    return (np is not None and isinstance(v, np.ndarray)) or \
        (torch is not None and isinstance(v, torch.Tensor))


def reachable(obj, depth, path="dataset", seen=None):
    """(path, object) for `obj` and each object below it through attributes and the first 16
    items of lists, tuples and dicts, to `depth` levels, each once, an object before those below
    it (a caller that stops at one never walks below it)."""
    seen = set() if seen is None else seen
    if leaf(obj) or id(obj) in seen:
        return
    seen.add(id(obj))
    yield path, obj
    if depth <= 0:
        return
    attrs = getattr(obj, "__dict__", None)
    items = [(f".{k}", v) for k, v in attrs.items()] if isinstance(attrs, dict) else []
    if isinstance(obj, (list, tuple)):
        items = [(f"[{i}]", v) for i, v in enumerate(obj[:16])]
    elif isinstance(obj, dict):
        items = [(f"[{k!r}]", v) for k, v in list(obj.items())[:16]]
    for k, v in items:
        yield from reachable(v, depth - 1, path + k, seen)


# ---- open files ----

_FILE_TYPES = (io.FileIO, io.BufferedReader, io.TextIOWrapper)


def read_only_file(obj):
    """The descriptor of an open Python file object opened read-only on a regular file, else
    None."""
    if not isinstance(obj, _FILE_TYPES):
        return None
    try:
        if obj.closed:
            return None
        fd = obj.fileno()
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDONLY:
            return None
    except (OSError, ValueError, io.UnsupportedOperation):
        return None
    return fd


def read_files(dataset):
    """(path in the dataset, file's name, whether its reads are locked) of each read-only file
    the dataset holds; a zipfile.ZipFile's file is read under the ZipFile's lock."""
    zipfile = sys.modules.get("zipfile")
    found, locked = [], set()
    for path, obj in reachable(dataset, WALK_DEPTH):
        if zipfile is not None and isinstance(obj, zipfile.ZipFile):
            locked.add(id(getattr(obj, "fp", None)))
        if read_only_file(obj) is not None:
            found.append((path, getattr(obj, "name", "?"), id(obj) in locked))
    return found


def own_positions(dataset):
    """In a worker process: each read-only file the dataset holds, inherited by fork (sharing
    its position with the training process and the other workers), opened again under the same
    descriptor number, at the position it had. Returns how many."""
    n = 0
    for _, obj in reachable(dataset, WALK_DEPTH):
        fd = read_only_file(obj)
        if fd is None:
            continue
        try:
            fresh = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue  # (no /proc: left shared)
        try:
            os.lseek(fresh, os.lseek(fd, 0, os.SEEK_CUR), os.SEEK_SET)
            inheritable = os.get_inheritable(fd)
            os.dup2(fresh, fd, inheritable)
            n += 1
        except OSError:
            pass
        finally:
            os.close(fresh)
    return n


def own_files(copy):
    """In a shallow copy of a dataset (an IterableDataset's worker thread's replica): each
    attribute holding a read-only file gets a file of its own, opened again by path at the
    same position (files deeper down stay shared with the dataset). Returns the files opened
    (the copy's owner closes them)."""
    attrs = getattr(copy, "__dict__", None)
    opened = []
    if not isinstance(attrs, dict):
        return opened
    for k, v in list(attrs.items()):
        if read_only_file(v) is not None:
            try:
                fn, args = _reduce_file(v)
                attrs[k] = fn(*args)
            except (OSError, TypeError):
                continue
            opened.append(attrs[k])
    return opened


def _path_of(f, fd):
    """The open file's path now (it may have been opened relative to another directory, or
    renamed since), else its name."""
    try:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if not path.endswith(" (deleted)"):
            return path
    except OSError:
        pass
    return f.name


def _reopen(path, kind, encoding, errors, pos):
    if kind == "text":
        f = open(path, "r", encoding=encoding, errors=errors)
    else:
        f = open(path, "rb", buffering=0 if kind == "raw" else -1)
    f.seek(pos)
    return f


def _reopen_zip(path):
    import zipfile
    return zipfile.ZipFile(path, "r")


def _reduce_zip(z):
    fd = read_only_file(getattr(z, "fp", None))
    if fd is None or z.mode != "r" or not isinstance(z.filename, (str, bytes, os.PathLike)):
        raise TypeError("cannot pickle 'ZipFile' object (only one opened by path for reading, "
                        "which stoker opens again in the worker)")
    return _reopen_zip, (_path_of(z.fp, fd),)


def _reduce_file(f):
    fd = read_only_file(f)
    name = getattr(f, "name", None)
    if fd is None or not isinstance(name, (str, bytes, os.PathLike)):
        raise TypeError(f"cannot pickle {type(f).__name__!r} object (only a file opened "
                        f"read-only by path, which stoker opens again in the worker)")
    text = isinstance(f, io.TextIOWrapper)
    kind = "text" if text else "raw" if isinstance(f, io.FileIO) else "buffered"
    return _reopen, (_path_of(f, fd), kind, f.encoding if text else None,
                     f.errors if text else None, f.tell())


_TABLE = copyreg.dispatch_table.copy()
_TABLE.update({t: _reduce_file for t in _FILE_TYPES})


def dispatch_table():
    """copyreg's dispatch table, with read-only files pickled by path and position (and a
    zipfile.ZipFile opened for reading by its path, once zipfile is imported)."""
    zipfile = sys.modules.get("zipfile")
    if zipfile is not None and zipfile.ZipFile not in _TABLE:
        _TABLE[zipfile.ZipFile] = _reduce_zip
    return _TABLE


class _Naming(pickle.Pickler):
    """A pickler that notes each class and function it pickles by name (in `named`)."""

    def __init__(self, file, named):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.named = named

    def reducer_override(self, obj):
        if isinstance(obj, (type, types.FunctionType)):
            self.named.append(obj)
        return NotImplemented


def pickler(file, shared=None, named=None):
    """A pickler (the highest protocol) with dispatch_table(), and with `shared` (a
    _memnpy.Shared) large numpy arrays and torch tensors through its memory files; with `named`
    (a list), the classes and functions it pickles by name are appended to it."""
    p = pickle.Pickler(file, protocol=pickle.HIGHEST_PROTOCOL) if named is None else \
        _Naming(file, named)
    p.dispatch_table = dispatch_table()
    if shared is not None:
        p.dispatch_table = dict(p.dispatch_table)
        p.dispatch_table.update(shared.table())
    return p


def dumps(obj, shared=None, named=None):
    """pickle.dumps(obj) with read-only files pickled by path and position (and, with `shared`,
    large arrays through memory files; with `named`, the classes and functions it names)."""
    f = io.BytesIO()
    pickler(f, shared, named).dump(obj)
    return f.getvalue()

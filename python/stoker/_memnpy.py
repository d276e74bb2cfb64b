"""Arrays held in the training process, handed to another reader through memory files
(memfds): to the C `npy` source as `.npy` files sealed against any change, named by their
/proc/self/fd paths (MemFiles), and to worker processes, which a later loader's dataset reaches
pickled, as raw files they map copy-on-write (Shared).

torchvision's CIFAR10/CIFAR100 keep their images as one uint8 array in memory; stoker's C
workers read rows of `.npy` files in place (src/source/npy). A memory file lets them read the
dataset's arrays without a file on disk and without Python per sample: the copy costs one pass
over the array (~0.1 s for CIFAR10's 150 MB) when the loader is built, and the file is closed
when the stoker Dataset reading it is collected. The file holds a copy, so what the training
process does to its arrays afterwards does not reach a loader already built (as the
DataLoader's worker processes, forked at the epoch's start, see the arrays as they were then).
"""
import fcntl
import mmap
import os
import pickle
import sys
import weakref

import numpy as np


def _close(fds):
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    fds.clear()


class MemFiles:
    """Memory files of `.npy` arrays: path(name, array) writes one and returns its path;
    keep_with(obj) closes them all once obj is collected (or at close())."""

    def __init__(self):
        self.fds = []
        self._fin = None

    def path(self, name, array):
        """Write `array` (C order) as a `.npy` into a new memory file named `name` (what
        /proc/<pid>/fd shows); its path for the npy source."""
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        self.fds.append(fd)
        path = f"/proc/self/fd/{fd}"
        with open(os.dup(fd), "wb", closefd=True) as f:
            np.save(f, np.ascontiguousarray(array), allow_pickle=False)
        # Sealed, it can never change: the C side maps it and reads rows with no system call
        # and no check that it is still the version opened (src/io/stk_mapped.h).
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK |
                    fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
        return path

    def keep_with(self, obj):
        self._fin = weakref.finalize(obj, _close, self.fds)  # (the list, with later files)
        return obj

    def close(self):
        if self._fin is not None:
            self._fin()
        else:
            _close(self.fds)


# ---- large arrays pickled to worker processes ----

# An array or tensor at least this large, pickled to a worker process (a later loader's dataset,
# sent to stoker's fork server), goes through a memory file instead of the pickle's bytes.
SHARE_MIN = 1 << 20


class Shared:
    """The memory files of one loader's pickled spec: each large numpy array or torch tensor
    the spec holds is written once into a memfd, and the pickle names it by the training
    process's /proc/<pid>/fd path. A worker maps it copy-on-write (shared pages, its own
    writes private, as with a pickled copy), so N workers hold one copy of the bytes, and
    pickling a 1 GB tensor costs a memory copy instead of 11-17 s (bench/RESULTS.md, issue 24).
    The files close when this object is collected (with the loader's spec)."""

    def __init__(self):
        self.files = MemFiles()
        self.files.keep_with(self)
        self.done = {}  # id(array) -> (array, reduce value): each array written once

    def table(self):
        """Dispatch-table entries for numpy arrays, numpy memmaps and torch tensors (exact
        types)."""
        out = {np.ndarray: self._reduce_array, np.memmap: _reduce_memmap}
        torch = sys.modules.get("torch")
        if torch is not None:
            out[torch.Tensor] = self._reduce_tensor
        return out

    def _write(self, x, raw):
        got = self.done.get(id(x))
        if got is not None and got[0] is x:
            return got[1]
        try:
            fd = os.memfd_create("stoker-shared", os.MFD_CLOEXEC)
        except OSError:
            return None  # (no memfd: pickled as before)
        self.files.fds.append(fd)
        value = f"/proc/{os.getpid()}/fd/{fd}"
        if not os.path.exists(value):
            return None  # (no /proc: the workers could not open it)
        with open(os.dup(fd), "wb", closefd=True) as f:
            f.write(raw)
        self.done[id(x)] = (x, value)
        return value

    def _reduce_array(self, a):
        if a.nbytes < SHARE_MIN or a.dtype.hasobject:
            return a.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
        # A transposed view of a C-contiguous block (CIFAR10's [N, H, W, 3] over [N, 3, H, W])
        # is written as that block, without the strided copy, and transposed back there.
        order = sorted(range(a.ndim), key=lambda k: -a.strides[k])
        block = a.transpose(order)
        if not block.flags.c_contiguous:
            block, order = np.ascontiguousarray(a), list(range(a.ndim))
        back = tuple(order.index(k) for k in range(a.ndim))
        path = self._write(a, memoryview(block).cast("B"))
        if path is None:
            return a.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
        return shared_array, (path, a.dtype, block.shape, None, back)

    def _reduce_tensor(self, t):
        torch = sys.modules["torch"]
        if t.device.type != "cpu" or t.layout != torch.strided or t.requires_grad or \
                t.is_quantized or not t.is_contiguous() or t.storage_offset() != 0 or \
                t.element_size() * t.numel() < SHARE_MIN or \
                _storage_bytes(t) != t.element_size() * t.numel():
            return t.__reduce_ex__(pickle.HIGHEST_PROTOCOL)  # (views keep their storage's)
        path = self._write(t, memoryview(t.view(torch.uint8).numpy()).cast("B"))
        if path is None:
            return t.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
        return shared_array, (path, np.dtype(np.uint8), tuple(t.shape), str(t.dtype))


def _reduce_memmap(a):
    """A numpy memmap (np.load(..., mmap_mode=...), np.memmap(path)) as its file, opened again
    in the worker, as a forked worker shares the mapping: never its bytes, which numpy's own
    pickle copies whole (a nanoGPT-style token file of gigabytes). A view of one (its data not
    at the mapping's offset) pickles as before; "w+" opens again as "r+" (not truncated)."""
    import mmap as _mmap
    if not isinstance(a.base, _mmap.mmap) or not a.filename or \
            not (a.flags.c_contiguous or a.flags.f_contiguous):
        return np.ndarray.__reduce_ex__(a, pickle.HIGHEST_PROTOCOL)
    mode = "r+" if a.mode == "w+" else a.mode
    order = "C" if a.flags.c_contiguous else "F"
    return np.memmap, (a.filename, a.dtype, mode, a.offset, a.shape, order)


def _storage_bytes(t):
    """The bytes of the storage under tensor t (a view's is its base's)."""
    st = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    return st.nbytes()


def shared_array(path, dtype, shape, tensor_dtype, axes=None):
    """A worker's side of Shared: the array (or, with tensor_dtype, the torch tensor) in the
    memory file at `path`, mapped copy-on-write (an array transposed by `axes`)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        m = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    if tensor_dtype is None:
        count = int(np.prod(shape, dtype=np.int64))
        a = np.frombuffer(m, dtype=dtype, count=count).reshape(shape)
        return a.transpose(axes) if axes is not None else a
    import torch
    t = torch.frombuffer(m, dtype=torch.uint8)
    return t.view(getattr(torch, tensor_dtype.replace("torch.", ""))).reshape(shape)

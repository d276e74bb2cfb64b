"""Arrays held in the training process, read by the C `npy` source as files: each array is
written once, as a `.npy`, into a memory file (memfd) sealed against any change, and named by its
/proc/self/fd path.

torchvision's CIFAR10/CIFAR100 keep their images as one uint8 array in memory; stoker's C
workers read rows of `.npy` files in place (src/source/npy). A memory file lets them read the
dataset's arrays without a file on disk and without Python per sample: the copy costs one pass
over the array (~0.1 s for CIFAR10's 150 MB) when the loader is built, and the file is closed
when the stoker Dataset reading it is collected. The file holds a copy, so what the training
process does to its arrays afterwards does not reach a loader already built (as the
DataLoader's worker processes, forked at the epoch's start, see the arrays as they were then).
"""
import fcntl
import os
import weakref

import numpy as np


def _close(fds):
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


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
        self._fin = weakref.finalize(obj, _close, list(self.fds))
        return obj

    def close(self):
        if self._fin is not None:
            self._fin()
        else:
            _close(self.fds)
        self.fds = []

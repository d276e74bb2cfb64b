"""stoker.Batch: one batch of a Loader, a dict of zero-copy views of a ring slot.

Split from loader.py: what a batch is (its fields, detach/record_stream, bytes access, the
device view handed to torch.as_tensor) apart from how the loader produces it.
"""
import numpy as np

__all__ = ["Batch"]

def _copy(v):
    """A copy of a batch value in fresh memory (on the same device)."""
    if isinstance(v, np.ndarray):
        return v.copy()
    return v.clone()


# __cuda_array_interface__ type strings of the dtypes a device batch can hold (bfloat16 has
# none: it travels as int16 and is viewed as bfloat16).
_CAI_TYPES = {"uint8": "|u1", "int8": "|i1", "int16": "<i2", "int32": "<i4", "int64": "<i8",
              "float16": "<f2", "float32": "<f4", "float64": "<f8", "bfloat16": "<i2"}


class _DeviceView:
    """One tensor of a batch in the loader's device ring, as a __cuda_array_interface__ for
    torch.as_tensor (zero-copy). It holds the C batch: the ring slot and its device buffer are
    released when the last tensor viewing it dies (recorded on the stream the batch was made
    ready for, and on those given to Batch.record_stream, so the buffer is not overwritten
    before their work on it is done). torch did not allocate this memory, so torch's
    tensor.record_stream does nothing for it."""

    __slots__ = ("__cuda_array_interface__", "_batch")

    def __init__(self, batch, address, shape, dtype):
        self._batch = batch
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": _CAI_TYPES[dtype],
                                         "data": (address, False), "strides": None,
                                         "version": 2}


class Batch(dict):
    """One batch: a dict of tensors (or numpy arrays) that view a slot of the loader's ring.

    ``epoch`` and ``number`` (the batch's number within its epoch) tell where it came from.
    ``detach()`` copies every tensor into its own memory and drops the batch's views of the
    ring, so the slot can be reused while the batch lives on (the loader does this by itself,
    with a warning, when a training loop holds on to too many batches). ``bytes(name)`` gives
    a bytes field as a list of ``bytes`` objects. ``record_stream(s)`` declares that a batch
    on the GPU is also read on CUDA stream ``s``.
    """

    __slots__ = ("epoch", "number", "_attached", "_raw", "__weakref__")

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.epoch = self.number = None
        self._attached = False
        self._raw = None  # weakref to the C batch of a batch in the device ring

    def detach(self):
        """Copy the tensors out of the ring (in place) and return self."""
        if self._attached:
            for k, v in list(self.items()):
                self[k] = _copy(v)
            self._attached = False
            self._raw = None
        return self

    def record_stream(self, stream):
        """The batch's tensors are also read on CUDA stream `stream` (a torch.cuda.Stream, or
        a CUstream handle as an int): the batch's device buffer is reused only after the work
        queued on `stream` before the batch is released (when its last tensor dies), on the
        device, without a host sync. Call it instead of ``tensor.record_stream(stream)``, which
        does nothing for these tensors: they view stoker's device ring, memory torch did not
        allocate, and torch skips that. Like torch's, it does not order `stream` after the
        copy: make `stream` wait for the current stream first (``stream.wait_stream(...)``).
        A batch can be read on at most 4 streams, counting the current stream it was made
        ready for (more raise StokerLimitError); a stream given twice counts once.

        A no-op for host batches, after ``detach()`` and when stoker fell back to
        ``.to(device)``: those tensors are torch's own, for which torch's
        ``tensor.record_stream`` works."""
        raw = self._raw() if self._raw is not None else None
        if raw is None:
            return
        handle = getattr(stream, "cuda_stream", stream)
        if isinstance(handle, bool) or not isinstance(handle, (int, np.integer)):
            raise TypeError(f"record_stream() takes a torch.cuda.Stream or a CUstream handle "
                            f"(int), not {type(stream).__name__}")
        raw.device_use(int(handle))

    @property
    def attached(self):
        """Whether the tensors still view the ring (False after detach())."""
        return self._attached

    def bytes(self, name):
        """Bytes field `name` as a list of bytes objects (one per sample)."""
        data, lengths = _host(self[name]), _host(self[name + "_lengths"])
        return [data[i, :lengths[i]].tobytes() for i in range(len(lengths))]

    def __repr__(self):
        parts = []
        for k, v in self.items():
            shape = tuple(getattr(v, "shape", ()))
            parts.append(f"{k}: {str(getattr(v, 'dtype', type(v).__name__))} {list(shape)}")
        return f"<stoker.Batch epoch={self.epoch} number={self.number} {{{', '.join(parts)}}}>"


def _host(x):
    """A tensor or array as a host numpy array (a device batch's bytes fields live on the GPU:
    copied to the host first, as torch's .numpy() refuses device tensors)."""
    if hasattr(x, "numpy"):
        dev = getattr(x, "device", None)
        if dev is not None and getattr(dev, "type", "cpu") != "cpu":
            x = x.cpu()
        return x.numpy()
    return np.asarray(x)

"""A Python dataset's exceptions carried from a worker to the training loop, as the DataLoader
carries them: the exception's type and its formatted traceback travel (pickled from a worker
process), and the consumer raises a new exception of that type whose message says where it
happened ("Caught ValueError in stoker worker process 1 while loading sample 17 (epoch 0).")
followed by the worker's traceback. It is torch's own ExceptionWrapper when torch is loaded, so
a KeyError, an exception that cannot be built from one message (then RuntimeError) and the
rest behave exactly as with the DataLoader.
"""
import pickle
import sys
import traceback

from . import _core


class StokerWorkerError(_core.StokerIOError, RuntimeError):
    """A worker process was lost: killed by a signal or the OOM killer, exited, past `timeout=`
    in __getitem__, or not started in time; or the constructor's first samples, run on a thread
    of the training process, past `timeout=`. The message names the worker, the sample and how.
    A StokerIOError (what stoker raised before) and a RuntimeError (what the DataLoader raises
    when a worker exits unexpectedly), so code written for either catches it."""


class _Wrapper:
    """torch._utils.ExceptionWrapper's behaviour, for when torch is not loaded."""

    def __init__(self, exc_info=None, where="in background"):
        if exc_info is None:
            exc_info = sys.exc_info()
        self.exc_type = exc_info[0]
        self.exc_msg = "".join(traceback.format_exception(*exc_info))
        self.where = where

    def reraise(self):
        msg = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.exc_msg}"
        if self.exc_type == KeyError:
            msg = _KeyErrorMessage(msg)
        try:
            exception = self.exc_type(msg)
        except TypeError:
            raise RuntimeError(msg) from None
        raise exception


class _KeyErrorMessage(str):
    def __repr__(self):
        return self


def _wrapper_class():
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            from torch._utils import ExceptionWrapper
            return ExceptionWrapper
        except ImportError:
            pass
    return _Wrapper


def wrapper(where, exc_info=None):
    """The wrapper of the exception being handled (or of exc_info's)."""
    return _wrapper_class()(exc_info or sys.exc_info(), where)


HERE = "in the training thread (no worker)"  # where a sample ran at num_workers=0, for errors


def original(where, exc_info=None):
    """The exception being handled (or exc_info's) itself, for a sample loaded in the training
    thread (num_workers=0): the DataLoader's main process raises __getitem__'s exception
    unchanged, so `except MyError as e` and e's attributes work (a wrapper rebuilt it from its
    message: another type, or RuntimeError, for an exception taking two arguments). A note
    names the sample."""
    exc = (exc_info or sys.exc_info())[1]
    note = f"(stoker: {where})"
    if note not in getattr(exc, "__notes__", ()):
        exc.add_note(note)
    return exc


def caught(where, exc_info=None):
    """What the consumer raises for the exception being handled (or exc_info's), caught where
    `where` says: in the training thread (it starts with HERE) the exception itself
    (original()), else the DataLoader's wrapper (wrapper())."""
    if where.startswith(HERE):
        return original(where, exc_info)
    return wrapper(where, exc_info)


def wrap_exception(where):
    """(text, pickled wrapper) of the exception being handled: "ValueError: message" for the C
    error message, and the wrapper for the consumer. An exception type that cannot be pickled
    (a class local to a function) travels as RuntimeError with the same message."""
    exc_type, exc, _ = sys.exc_info()
    text = f"{exc_type.__name__}: {exc}"
    w = wrapper(where)
    try:
        blob = pickle.dumps(w, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001
        w.exc_msg = f"{exc_type.__module__}.{exc_type.__qualname__} (not picklable)\n" + w.exc_msg
        w.exc_type = RuntimeError
        blob = pickle.dumps(w, protocol=pickle.HIGHEST_PROTOCOL)
    return text, blob


def _exception(w):
    """The exception ExceptionWrapper.reraise() would raise (RuntimeError when the type cannot
    be built from one message), built here rather than raised there: reraise() keeps the
    exception in a local of the raising frame, a reference cycle that would keep the training
    loop's frames (and the ring slots of the batches they hold) alive until the collector
    runs."""
    msg = f"Caught {w.exc_type.__name__} {w.where}.\nOriginal {w.exc_msg}"
    if w.exc_type == KeyError:
        msg = _KeyErrorMessage(msg)
    elif getattr(w.exc_type, "message", None):
        try:
            return w.exc_type(message=msg)
        except TypeError:
            return RuntimeError(msg)
    try:
        return w.exc_type(msg)
    except TypeError:
        return RuntimeError(msg)


def reraise(w):
    """Raise the wrapped exception (w: a wrapper, or its pickle), as the DataLoader does; an
    exception itself (original()) as it is. The caller passes a list holding it, which this
    empties: a frame holding the exception its traceback holds is a reference cycle that keeps
    the training loop's frames (and the ring slots of their batches) alive until the collector
    runs."""
    if isinstance(w, list):
        w = w.pop()
    if isinstance(w, BaseException):
        try:
            raise w
        finally:
            w = None
    if isinstance(w, (bytes, bytearray)):
        w = pickle.loads(w)
    raise _exception(w) from None

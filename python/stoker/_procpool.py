"""Worker processes for Python datasets: stoker's fork server and the worker's loop.

The process executor's C half (python/stoker/_ext/_procpool.c) sends each worker tickets over a
Unix socket; this module is what runs in the processes.

The fork server. Worker processes are never forked by the loader's own (multithreaded)
process: a fork of a process whose other threads hold locks (a decoder's, OpenMP's, the
allocator's, a Python lock) gives children that block on them forever, the DataLoader's futex
hang. Their parent is stoker's *fork server*, one per process: a fork of the training process
taken the first time a Python dataset may need workers, while that process is still
single-threaded (that loader's dataset is inherited, nothing pickled, start-up in
milliseconds), or, when the process already runs other threads then, a fresh interpreter
(prepared as multiprocessing's spawn prepares one, so classes of a guarded main script load).
Each loader registers with it (SERVE: its control socket, and its spec: the inherited one, or
pickled), and the C side asks on that control socket: SPAWN (fork a worker on the socket sent
with the request; answer: its pid) and REAP (wait for a pid; answer: its wait status). A
control socket that ends (the loader closed) takes its workers with it (SIGKILL); the fork
server ends with the training process (its socket ends), a worker when its socket ends.
multiprocessing_context="spawn" starts a spawned server of the same kind for one loader.

The worker. Started like a DataLoader worker (SIGINT ignored: Ctrl-C is the training loop's;
torch at one thread; random/torch/NumPy seeded from base_seed + id as the DataLoader seeds them;
get_worker_info() set; worker_init_fn(id) called) and saying so (ST_READY: the parent's
timeout= for a sample starts only at a ready worker), it then answers tickets: take the ring's
memfd when sent (OP_ARENA), take the layout once (OP_INIT), and for each OP_TICKET seed the
global generators from the sample's seed (unless reseed=False; those the probe saw untouched
are watched instead, and a call that drew from one runs again seeded: _seedwatch.py), run
__getitem__, write each fixed leaf at its offset in the ring (pwrite into the memfd: the ring is
not mapped in the worker, so its pages do not count in the worker's resident memory) and reply
(status, Python time, mask, and the pickled object leaves when there are any); an
OP_TICKET_HELD's reply (no timeout=) is held back while more tickets wait, the sample's seed
written into its row first. The tickets are taken, and a sample whose leaves are tensors and
numbers (Layout.fast_plan) is written and answered, by _core.WorkerPipe (_ext/_ticketloop.c)
without Python between samples; anything else comes back here (_answer). An exception is replied as the
DataLoader's ExceptionWrapper (pickled), with its text.
"""
import atexit
import io
import mmap
import os
import pickle
import random
import signal
import socket
import struct
import sys
import threading
import time
import traceback
import warnings
import weakref

import numpy as np

from . import _core, _holds, _listfetch, _memnpy, _pyworker, _pyworker_server as _server
from ._seedwatch import SeedWatch
from ._pyworker_server import (CTL, CTL_REAP, CTL_REPLY, CTL_SPAWN, FS_KEEP, FS_REQ,  # noqa: F401
                               HDR, OP_SPEC, WANTS_SPEC, _recv_exact, _Served, _server_loop)

REPLY = struct.Struct("<IIQQQ")   # status, payload length, python_ns, mask, cpu_ns: 32 bytes
OP_INIT, OP_ARENA, OP_TICKET, OP_PROBE = 1, 2, 3, 4
RENEWED = b"stoker-renewed"  # a worker's answer that it took a changed dataset (_renew): no
# sample's reply carries it, so the parent knows the answer is that one
# a ticket whose reply may be held back while more tickets wait (no timeout=); its last offset is
# its row's object key, where the sample's seed goes once its leaves are written (_ticketloop.c)
OP_TICKET_HELD = 6
ST_OK, ST_ERROR, ST_STARTED = 0, 1, 2  # ST_STARTED: the probe began a sample (index in python_ns)
ST_READY = 3  # a map-style worker finished starting (set-up, worker_init_fn): sent once, first

# A new worker process's start-up (its fork, set-up and worker_init_fn, up to ST_READY) is not
# part of any sample's timeout=; with timeout= set it has a limit of its own, this many seconds
# (or timeout=, if longer): a worker_init_fn that never returns is then a named error, not a
# hang. None: no limit (the tests that hold a worker's start-up on an event).
STARTUP_LIMIT_S = 60.0


def startup_limit(timeout):
    """Seconds a new worker process may take to start (0: no limit): none without timeout=
    (as the DataLoader, which waits for its workers as long as it waits for a batch), else
    max(STARTUP_LIMIT_S, timeout)."""
    if not timeout or STARTUP_LIMIT_S is None:
        return 0.0
    return float(max(STARTUP_LIMIT_S, timeout))


class WorkerSpec:
    """What every worker needs from the start: the dataset, the worker count, the DataLoader-
    style base seed, worker_init_fn, and the dataset's name for messages."""

    def __init__(self, dataset, n_workers, base_seed, worker_init_fn, name):
        self.dataset, self.n_workers, self.base_seed = dataset, n_workers, base_seed
        self.worker_init_fn, self.name = worker_init_fn, name


def thread_count():
    """Threads of this process (1 = safe to fork)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


# ---- the servers ----

class Server:
    """A loader's worker server: its pid, the control socket (handed to the C pool) and how it
    was started: "fork" (a fork of this process, the dataset inherited), "forkserver" (forked by
    stoker's fork server, the dataset pickled to it) or "spawn" (a fresh interpreter)."""

    def __init__(self, pid, ctl, method, ready_owed=False):
        self.pid, self.ctl, self.method = pid, ctl, method
        self.ready_owed = ready_owed  # its answer whether it took the spec: the C pool reads it

    def wait(self, timeout=5.0):
        """After the control socket was closed: a spawned server exits (joined here); the fork
        server goes on serving the process's other loaders."""
        proc = getattr(self, "proc", None)
        if proc is not None:
            proc.join(timeout)
            if proc.is_alive():
                proc.kill()
                proc.join()
        self.pid = None


class ForkServer:
    """stoker's fork server, one per process: a single-threaded process that forks each Python
    dataset loader's worker server. It is a fork of this process taken while it was still
    single-threaded (so it also holds, unpickled, the dataset of the loader that started it),
    or, when this process already ran other threads at that point, a fresh interpreter. It exits
    when this process closes its socket (at exit)."""

    def __init__(self, pid, sock, how):
        self.pid, self.sock, self.how = pid, sock, how
        self.lock = threading.Lock()
        self.main_prep = True  # (a fresh interpreter: whether it imports the main script)
        self.known = _known_now()  # what this process's classes and modules were at its start
        self.servers = weakref.WeakSet()  # the worker servers it forked, while their loaders live
        self.served = False  # whether it forked one (it then goes lean after its last worker)

    def stale(self, named):
        """Why the classes and functions a spec names (`named`, _holds.dumps') would be other
        code in this fork server than in this process, or None. The DataLoader forks its workers
        at each iter(), so they run the code as it is; stoker's fork server holds what it started
        with, so a class redefined in a notebook cell since, or a module edited and reloaded,
        ran the old code in the workers (from the first batch after the probe's)."""
        main = sys.modules.get("__main__")
        ids, started, top = self.known
        lean = self.how != "fork" or self.is_lean
        seen_modules = set()
        for obj in {id(o): o for o in named}.values():
            mod, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
            name = qual.split(".")[0]
            if mod == "__main__":
                if lean and self.main_prep and name not in top:  # (it imports the script again)
                    return (f"{qual} is defined in the main program but not at the top of its "
                            f"script file (a cell run by exec, or code typed in), so stoker's "
                            f"fork server, a fresh interpreter that imports the script again, "
                            f"does not have it")
                if not lean and ids.get(name) != id(getattr(main, name, None)):
                    return (f"{qual} was defined or redefined in the main program after "
                            f"stoker's fork server started (a later notebook cell), so worker "
                            f"processes forked from it would run its old code (or none)")
                continue
            if mod in seen_modules:
                continue
            seen_modules.add(mod)
            path = getattr(sys.modules.get(mod), "__file__", None)
            try:
                changed = path is not None and os.path.getmtime(path) > started
            except OSError:
                changed = False
            if changed:
                return (f"module {mod} ({path}) changed after stoker's fork server started "
                        f"(edited, and reloaded here?), so worker processes forked from it "
                        f"could run its old code")
        return None

    def forget(self, token):
        """Drop the spec inherited under `token` (no worker server will be asked for)."""
        with self.lock:
            self.sock.sendall(FS_REQ.pack(token, 0, 0))
            _recv_exact(self.sock, CTL_REPLY.size)

    @property
    def is_lean(self):
        """Whether the fork server runs as a lean interpreter now (it goes lean by itself after
        a loader's last worker: _pyworker_server.py)."""
        try:
            with open(f"/proc/{self.pid}/cmdline", "rb") as f:
                return b"stoker_fork_server" in f.read()
        except OSError:
            return False

    def serve(self, token=0, blob=b"", keep=False, wait=True):
        """Serve one more loader (the spec registered under `token` before this fork server was
        forked, or pickled in `blob`; keep: the loader's copy of it does not pickle, so the fork
        server must keep its own): its control socket, and the server's pid. wait=False: the
        server's answer whether it took the spec (after unpickling it, which may import torch)
        is left on the control socket for the loader's C pool (ProcPool(ready_owed=True))."""
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with self.lock:
                socket.send_fds(self.sock, [FS_REQ.pack(token, len(blob), FS_KEEP if keep else 0)
                                            + blob], [b.fileno()])
                pid, err = CTL_REPLY.unpack(_recv_exact(self.sock, CTL_REPLY.size))
        except (OSError, EOFError) as e:
            a.close()
            raise OSError(f"stoker's fork server (pid {self.pid}) is gone: {e}") from None
        finally:
            b.close()
        if pid <= 0:
            a.close()
            raise OSError(err, f"stoker's fork server could not fork: {os.strerror(err)}")
        if wait:
            self.take_ready(a)
        return pid, a

    def take_ready(self, a):
        """The new server's answer on its control socket `a` whether it could take the spec:
        TypeError (and `a` closed) when it could not."""
        try:
            n = struct.unpack("<I", _recv_exact(a, 4))[0]
            text = bytes(_recv_exact(a, n)).decode("utf-8", "replace") if n else ""
        except (OSError, EOFError):
            text = "it exited before it was ready"
        if text:
            a.close()
            if self.how == "spawn":
                text += (" (stoker's fork server is a fresh interpreter, because this process "
                         "already ran other threads when it first needed worker processes; it "
                         "has only what can be imported, not classes defined in the main script: "
                         "define the dataset in a module, create the first loader before the "
                         "process starts threads, or use executor='thread')")
            raise TypeError(f"the worker processes could not be started: {text}")


_FS = None
_FS_LOCK = threading.Lock()
_SPECS = _server.SPECS  # token -> spec, inherited by a fork server forked with it
_TOKENS = iter(range(1, 1 << 30))


def _fork_server():
    """The process's fork server, or None when it has none and this process already runs
    other threads (forking now could copy a lock another thread holds)."""
    global _FS
    fs = _FS
    if fs is None:
        return None
    proc = getattr(fs, "proc", None)
    try:
        gone = proc.poll() is not None if proc is not None else \
            os.waitpid(fs.pid, os.WNOHANG)[0] != 0
    except ChildProcessError:
        gone = True
    if gone:
        fs.sock.close()
        _FS = None
        return None
    return fs


class Pending:
    """A loader's worker server, prepared but not started: the fork server that will fork it
    and the spec (a token for the copy the fork server inherited, else the pickled spec)."""

    def __init__(self, spec, method, fs=None, token=0):
        self.spec, self.method, self.fs, self.token = spec, method, fs, token
        self.blob = None  # the spec pickled (unpicklable()), for start()

    def unpicklable(self):
        """None when the worker server will get the spec: inherited by the fork server, or
        pickled now (kept for start()); else why it cannot."""
        if self.token:
            return None
        named = []
        try:
            self.blob = pickle_spec(self.spec, named)
        except TypeError as e:
            cause = e.__cause__
            return (f"its dataset or worker_init_fn does not pickle ({type(cause).__name__}: "
                    f"{cause}), which worker processes started by stoker's fork server need when "
                    f"the fork server was started before the dataset existed (by an earlier "
                    f"loader, or as a fresh interpreter because this process ran threads): "
                    f"define the functions it holds at module level (not lambdas or local "
                    f"functions), open files lazily, or create this loader first")
        if self.fs is not None and self.fs.how == "spawn" and not self.fs.main_prep and \
                b"__main__" in self.blob:
            return (f"{_main_defined(self.spec)} defined in the main program (a notebook cell, "
                    f"python -c, or a script without an `if __name__ == \"__main__\":` guard), "
                    f"which stoker's fork server cannot import: it is a fresh interpreter here, "
                    f"because this process already ran other threads when it first needed worker "
                    f"processes (a notebook kernel's, a library's; forking a process that runs "
                    f"threads can deadlock). Define the dataset in a module (a .py file beside "
                    f"the notebook) and import it, or guard the script's work with "
                    f"`if __name__ == \"__main__\":`")
        return self.fs.stale(named) if self.fs is not None else None

    def start(self, probed_here=False):
        """The worker server (forked by the fork server now, or spawned). probed_here: the
        first samples ran in this process, so its copy of the dataset may hold what they opened
        (an h5py file, say) and no longer pickle; the fork server's copy, which the workers get,
        does not: then the fork server keeps it (it stays a fork), since a worker restarted by a
        lean one gets this process's copy, pickled then (spec_sender)."""
        if self.method == "spawn":
            return _spawn_server(self.spec, self.blob)
        blob = b"" if self.token else self.blob
        if not self.token and not blob:  # (executor="process": unpicklable() was not asked)
            named = []
            blob = pickle_spec(self.spec, named)
            why = self.fs.stale(named)
            if why is not None:
                raise TypeError(f"the worker processes cannot run this dataset: {why}; or use "
                                f"executor='thread'")
        keep = bool(self.token and probed_here and self.fs.how == "fork" and
                    not _server._check(self.spec)[0])
        # a fork of this process (lean by now, or not) answers whether it took the spec on the
        # pool's control socket, read by the C pool before its first SPAWN answer: a later
        # loader's constructor does not wait while a lean server imports torch to unpickle it.
        # A fresh interpreter's answer is read here, so that its error can say why it failed.
        wait = self.fs.how != "fork"
        pid, ctl = self.fs.serve(self.token, blob, keep, wait=wait)
        self.token = 0  # the worker server took it
        server = Server(pid, ctl, "fork" if not blob else "forkserver", ready_owed=not wait)
        self.fs.servers.add(server)
        self.fs.served = True
        return server

    def pool_options(self, renewed=None):
        """ProcPool's keywords for this loader's pool: `respec`, which sends the spec to a
        worker forked without it (by a lean fork server, or any restart after fresh_restarts();
        `renewed`: spec_sender's), and `lean`, whether the fork server may go lean after the
        pool's last worker (a fork of this process)."""
        if self.fs is None:
            return {}
        return {"respec": spec_sender(self.spec, renewed), "lean": self.fs.how == "fork"}

    def forget(self):
        """The server will not be needed (threads were chosen): the fork server drops its copy
        of the spec."""
        if self.token and self.fs is not None:
            try:
                self.fs.forget(self.token)
            except OSError:
                pass
        self.token = 0


def warn_threads_instead(name, why):
    """The warning of a loader whose dataset goes to worker threads where it was to go to worker
    processes (`why`: Pending.unpicklable()'s text), pointing at the loader's construction."""
    warnings.warn(f"stoker.Loader: {name} runs on worker threads, not worker processes: {why}",
                  RuntimeWarning, stacklevel=3)


def cheap_to_prepare(method):
    """Whether prepare_server(method) costs little now: multiprocessing's spawn (started later),
    a fork of this process (single-threaded), or a fork server it has; not a fresh interpreter
    (~0.9 s importing torch)."""
    return method == "spawn" or _FS is not None or thread_count() == 1


def prepare_server(spec, method):
    """Get ready to start a loader's worker server. method "fork": through stoker's fork server,
    forked now if this process has none yet, while it is single-threaded (it then holds the
    dataset as it is now, unpickled: what __getitem__ does to it in this process afterwards
    does not reach the workers), else a fresh interpreter started as the fork server (the spec
    is pickled to it later); "spawn": multiprocessing's spawn at start() (the main module is
    imported again, as with the DataLoader's spawn)."""
    global _FS
    if method == "spawn":
        return Pending(spec, "spawn")
    with _FS_LOCK:
        _reap_ended()
        fs = _fork_server()
        token = 0
        if fs is not None and fs.how == "fork" and fs.served and thread_count() == 1:
            # A server that forked a loader's workers goes lean (now, or in a moment): it would
            # unpickle this spec importing torch and the dataset's modules again (about a second
            # for each later loader of a torchvision dataset); a fork of this process has them.
            # The old one stays for its loaders' restarts until they end.
            _retire(fs)
            fs = _FS = None
        if fs is None:
            if thread_count() == 1:
                token = next(_TOKENS)
                _SPECS[token] = spec
                try:
                    _FS = fs = _start_fork_server()
                finally:
                    _SPECS.pop(token, None)
            else:
                _FS = fs = _start_fresh_fork_server()
            atexit.register(_close_fork_server, fs, os.getpid())
    return Pending(spec, "fork", fs, token)


_RETIRED = []  # fork servers replaced by a fresh fork of this process, kept for their loaders
_ENDED = []    # pids of retired fork servers told to end, not yet reaped


def _retire(fs):
    """Keep `fs` while a loader it forked a worker server for lives; end those no loader needs
    (their socket closed: they exit) and reap those that have exited."""
    _RETIRED.append(fs)
    for old in list(_RETIRED):
        if len(old.servers):
            continue
        _RETIRED.remove(old)
        try:
            old.sock.close()
        except OSError:
            pass
        _ENDED.append(old.pid)
    _reap_ended()


def _reap_ended():
    for pid in list(_ENDED):
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == 0:
                continue  # still exiting: reaped at a later call
        except ChildProcessError:
            pass
        _ENDED.remove(pid)


def start_server(pending):
    """pending.start() (a prepare_server), its answer whether it took the spec read here (the
    caller speaks to it in Python: an IterableDataset's channels)."""
    server = pending.start()
    if server.ready_owed:
        server.ready_owed = False
        pending.fs.take_ready(server.ctl)
    return server


def spec_sender(spec, renewed=None):
    """send(fd): `spec` pickled now and sent on a new worker's socket `fd` (OP_SPEC), for a
    worker that a lean fork server forked without it (it asks: WANTS_SPEC). Called by the C pool
    (with the GIL, on a loader thread) when it restarts a worker; the pickle is not kept. The
    training loop may change the dataset meanwhile ("dictionary changed size during
    iteration"): pickled again then, up to 3 times. Once `renewed` (a list of one item) holds
    (spec, blob), the renewal the workers took when the training loop changed the dataset, a
    restarted worker gets that blob, the dataset as the others have it (the spec, kept alive
    beside it, keeps the blob's memory files: _dumps_spec)."""
    def pickled():
        for attempt in range(3):
            try:
                return _dumps_spec(spec)
            except RuntimeError:
                if attempt == 2:
                    raise
            except Exception as e:
                raise TypeError(f"a worker process restarted by stoker's lean fork server gets "
                                f"the dataset and worker_init_fn pickled by this process, and "
                                f"pickling them failed: {type(e).__name__}: {e}. Open files and "
                                f"handles lazily in __getitem__ (in the worker), not in this "
                                f"process") from e

    def send(fd):
        blob = renewed[0][1] if renewed is not None and renewed[0] is not None else pickled()
        with socket.socket(fileno=os.dup(fd)) as s:
            s.sendall(HDR.pack(OP_SPEC, 0, len(blob), 0, 0, 0))
            s.sendall(blob)
    return send


_SHARED = weakref.WeakKeyDictionary()  # spec -> _memnpy.Shared: its large arrays' memory files


def _dumps_spec(spec, named=None):
    """The spec pickled for a worker server or a worker, its large arrays and tensors through
    memory files that live as long as the spec (the loader): written once, shared by every
    worker (_memnpy.Shared). `named`: a list that gets the classes and functions it names."""
    shared = _SHARED.get(spec)
    if shared is None:
        shared = _SHARED[spec] = _memnpy.Shared()
    return _holds.dumps(spec, shared, named)


def _main_defined(spec):
    """What of the spec the main program defines, named for an error: the dataset's class,
    worker_init_fn, else what the dataset holds."""
    names = [f"{what} {obj.__qualname__}" for what, obj in (
        ("its dataset class", type(_listfetch.users(spec.dataset))),
        ("its worker_init_fn", spec.worker_init_fn))
        if obj is not None and getattr(obj, "__module__", None) == "__main__"]
    return (" and ".join(names) + (" are" if len(names) > 1 else " is")) if names else \
        "a class or function its dataset holds is"


def pickle_spec(spec, named=None):
    """The spec pickled for the worker processes; a TypeError (its cause the pickling error)
    that says what to do when it does not pickle. `named`: as _dumps_spec's."""
    try:
        return _dumps_spec(spec, named)
    except Exception as e:
        text = str(e)
        # (a lambda or a local function is told to move to module level: "open lazily" was
        # off target for it)
        fix = ("define the functions it holds at module level (not lambdas or functions local "
               "to another)" if "<lambda>" in text or "<locals>" in text else
               "open files and handles lazily in __getitem__")
        raise TypeError(f"the worker processes are started by stoker's fork server, which "
                        f"needs the dataset and worker_init_fn pickled (it was started before "
                        f"this dataset existed), and pickling failed: {type(e).__name__}: {e}. "
                        f"To run it on worker processes, {fix}; or use executor='thread'") from e


def _close_fork_server(fs, pid):
    """At exit (after the loaders' own exit hooks, registered later): close the fork server's
    socket, which ends it, and reap a fresh-interpreter one, rather than leave both to the
    interpreter's teardown (a ResourceWarning for each). Not in a forked child."""
    if os.getpid() != pid:
        return
    try:
        fs.sock.close()
    except OSError:
        pass
    proc = getattr(fs, "proc", None)
    if proc is not None:
        try:
            proc.wait(timeout=2)
        except Exception:  # noqa: BLE001 - still running: the interpreter's teardown warns
            pass


def _known_now():
    """(ids of __main__'s classes and functions, the time, the top-level names of the main
    script's file) as a fork server started now has them (ForkServer.stale)."""
    import types
    main = sys.modules.get("__main__")
    ids = {k: id(v) for k, v in vars(main).items()
           if isinstance(v, (type, types.FunctionType))} if main is not None else {}
    top = set()
    path = getattr(main, "__file__", None)
    try:
        import ast
        with open(path, encoding="utf-8", errors="replace") as f:
            for node in ast.parse(f.read()).body:
                if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    top.add(node.name)
    except (OSError, TypeError, SyntaxError, ValueError):
        pass
    return ids, time.time(), top


def _start_fork_server():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # (before anything a Ctrl-C could cut)
        code = 0
        try:
            a.close()
            _server.fork_server_start(_main_preparation())
            _fork_server_main(b)
        except BaseException:  # noqa: BLE001 - report and leave without Python's exit path
            traceback.print_exc()
            code = 1
        finally:
            os._exit(code)
    b.close()
    return ForkServer(pid, a, "fork")


def _start_fresh_fork_server():
    """A fork server in a fresh interpreter (this process runs other threads already)."""
    import subprocess
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    preload = [m for m in ("numpy", "torch") if m in sys.modules]
    code = ("import sys, socket; sys.path[:0] = %r; [__import__(m) for m in %r]; "
            "from stoker._procpool import _fresh_fork_server_main; "
            "_fresh_fork_server_main(socket.socket(fileno=%d))" % (sys.path, preload,
                                                                   b.fileno()))
    # (a session of its own: a Ctrl-C at the terminal, which signals the whole foreground
    # process group, reached it while it imported torch and ended it, so later loaders found it
    # gone; it ends when this process closes its socket, as before)
    proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=[b.fileno()],
                            close_fds=True, start_new_session=True)
    b.close()
    prep = _main_preparation()
    a.sendall(struct.pack("<I", len(prep)) + prep)
    fs = ForkServer(proc.pid, a, "spawn")
    fs.proc = proc
    fs.main_prep = bool(prep)  # whether it imports the main script (its classes unpickle)
    return fs


def _guards_main(src):
    """Whether the script `src` has an `if __name__ == "__main__":` (either way round) among its
    top-level statements. Mentioning both names is not enough (logging.getLogger(__name__) and
    "__main__" in a comment: importing that script again ran its whole body)."""
    if "__name__" not in src or "__main__" not in src:
        return False
    import ast
    try:
        body = ast.parse(src).body
    except (SyntaxError, ValueError):
        return False
    for node in body:
        t = node.test if isinstance(node, ast.If) else None
        if isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq):
            sides = (t.left, t.comparators[0])
            if any(isinstance(x, ast.Name) and x.id == "__name__" for x in sides) and \
                    any(isinstance(x, ast.Constant) and x.value == "__main__" for x in sides):
                return True
    return False


def _main_preparation():
    """multiprocessing's spawn preparation (sys.path, cwd, the main module imported again as
    __mp_main__), pickled, so that classes defined in the main script unpickle in a fresh
    fork server; only when the main script guards its work with `if __name__ == "__main__"`
    (importing an unguarded script again would run it), else b""."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            src = f.read()
    except (OSError, TypeError):
        return b""
    if not _guards_main(src):
        return b""
    try:
        import multiprocessing.spawn as mspawn
        prep = mspawn.get_preparation_data("stoker-fork-server")
        prep.pop("authkey", None)  # (refuses to be pickled; the fork server needs none)
        return pickle.dumps(prep, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - then classes of the main script do not unpickle
        return b""


def _fresh_fork_server_main(sock):
    """A fork server in a fresh interpreter: take the main script's preparation (if any),
    then serve."""
    n = struct.unpack("<I", _recv_exact(sock, 4))[0]
    if n:
        _server._PREP = bytes(_recv_exact(sock, n))
    _server._prepare_main()
    _fork_server_main(sock)


def _spawn_server(spec, blob=None):
    import multiprocessing
    blob = blob or pickle_spec(spec)
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ctx = multiprocessing.get_context("spawn")
    proc = ctx.Process(target=_spawned_server, args=(b, blob), daemon=True,
                       name="stoker-worker-server")
    proc.start()
    b.close()
    n = struct.unpack("<I", _recv_exact(a, 4))[0]
    if n:
        text = bytes(_recv_exact(a, n)).decode("utf-8", "replace")
        a.close()
        raise TypeError(f"the worker processes could not be started: {text}")
    server = Server(proc.pid, a, "spawn")
    server.proc = proc
    return server


def _spawned_server(ctl, blob):
    _ready_then_serve(ctl, lambda: pickle.loads(blob))


def _ready_then_serve(ctl, get_spec):
    """Take the spec (unpickle it), tell the parent whether that worked, then serve."""
    try:
        spec = get_spec()
    except BaseException as e:  # noqa: BLE001 - told to the parent
        text = f"{type(e).__name__}: {e}".encode("utf-8", "replace")[:2000]
        ctl.sendall(struct.pack("<I", len(text)) + text)
        return
    ctl.sendall(struct.pack("<I", 0))
    _serve(ctl, spec)


def _fork_server_main(sock):
    """The fork server: serve every loader of its parent (SERVE: take a loader's spec and its
    control socket; then fork and reap that loader's workers), until the parent closes `sock`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _server_loop(sock, [])


def _serve(ctl, spec):
    """A spawned server's loop: one loader (its control socket and spec)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _server_loop(None, [_Served(ctl, spec)])


# ---- the worker ----

def _worker_start(wid, spec):
    """Set the worker up as a DataLoader worker is set up, worker_init_fn last: its error reply
    (reported with every ticket), or None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _holds.own_positions(spec.dataset)  # files inherited by fork: a position of its own
    seed = (spec.base_seed + wid) & ((1 << 64) - 1)
    torch = sys.modules.get("torch")
    random.seed(seed)
    if torch is not None:
        torch.set_num_threads(1)
        torch.manual_seed(seed)
        try:
            from torch.utils.data._utils import worker as tw
            np.random.seed(tw._generate_state(spec.base_seed, wid))
            if spec.n_workers > 0:  # (num_workers=0: loads as the main process would)
                tw._worker_info = _pyworker.worker_info(wid, spec.n_workers, seed, spec.dataset)
        except (ImportError, AttributeError):
            np.random.seed(seed & 0xFFFFFFFF)
    else:
        np.random.seed(seed & 0xFFFFFFFF)
    if spec.worker_init_fn is not None:
        try:
            spec.worker_init_fn(wid)
        except Exception:  # noqa: BLE001 - reported with every ticket
            return error_reply(f"in stoker worker process {wid} (worker_init_fn)")
    return None


def own_storage(obj):
    """obj with every tensor or array that is a view into a larger buffer replaced by a copy of
    its own elements (dicts, lists, tuples and namedtuples walked), for pickling: a pickled view
    carries its whole storage (a dataset's `self.images[i]` pickles all of `self.images`, 36 MB
    for bench_pydataset.py's tensor224, where the sample is 0.6 MB)."""
    if isinstance(obj, dict):
        return type(obj)((k, own_storage(v)) for k, v in obj.items()) \
            if type(obj) is dict else obj
    if isinstance(obj, (list, tuple)):
        items = [own_storage(v) for v in obj]
        if all(a is b for a, b in zip(items, obj)):
            return obj
        if type(obj) is list:
            return items
        if type(obj) is tuple:
            return tuple(items)
        if hasattr(obj, "_fields"):  # a namedtuple
            return type(obj)(*items)
        return obj
    if isinstance(obj, np.ndarray):
        return obj.copy() if obj.base is not None and obj.nbytes < _nbytes(obj.base) else obj
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        try:
            storage = obj.untyped_storage() if hasattr(obj, "untyped_storage") else \
                obj.storage()
            whole = storage.nbytes()
        except (RuntimeError, NotImplementedError):  # no storage of its own to measure
            return obj
        return obj.clone() if obj.nelement() * obj.element_size() < whole else obj
    return obj


def _nbytes(base):
    return getattr(base, "nbytes", 0) if not isinstance(base, (bytes, bytearray)) else len(base)


def error_reply(where):
    """(text, pickled wrapper) of the exception being handled, as the DataLoader wraps it."""
    from ._errors import wrap_exception
    return wrap_exception(where)


def worker_main(fd, wid, spec):
    sock = socket.socket(fileno=fd)
    try:
        _worker_main(sock, wid, spec)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the loader went away while this worker answered: nothing to report
    finally:
        sock.close()


def _worker_main(sock, wid, spec):
    init_error = _worker_start(wid, spec)
    loop = getattr(spec, "worker_loop", None)  # an IterableDataset's (_pyiterable.IterSpec)
    if loop is not None:
        if init_error is not None:
            raise SystemExit(f"worker_init_fn failed in worker process {wid}: {init_error[0]}")
        return loop(sock, wid)
    sock.sendall(REPLY.pack(ST_READY, 0, 0, 0, 0))  # started: the parent's timeout= runs now
    dataset = spec.dataset
    getitem = dataset.__getitem__
    global _PIPE
    pipe = _PIPE = _core.WorkerPipe(sock.fileno())  # (reads the socket from now on)
    arena = None
    layout = plan = None
    reseed = True
    seeds = SeedWatch(False)
    while True:
        ready = init_error is None and layout is not None and arena is not None
        try:
            r = pipe.run(getitem if ready else None, plan, seeds.before if reseed else None,
                         seeds.drew if reseed else None)
        except BaseException:  # noqa: BLE001 - __getitem__'s, for the consumer, with its index
            if not pipe.call_failed():
                raise
            op, index, epoch, seed, offs, stamp, py_ns, cpu_ns = pipe.ticket()
            if not (reseed and seeds.drew()):  # (it may have raised because of what it drew)
                _send_error(pipe, _getitem_error(wid, index, epoch), py_ns, cpu_ns)
                continue
            r = (RUN_AGAIN, op, index, epoch, seed, offs, stamp, None, py_ns, cpu_ns)
        if r is None:
            return  # the socket ended: the loader went away
        if r[0] == RUN_OP:
            op, n, a, b, c, d = r[1:]
            if op == OP_ARENA:
                fds = pipe.take_fds()
                if not fds:
                    return
                if arena is not None:
                    pipe.set_arena(-1, 0)
                    arena.close()
                arena = _Arena(fds[0], a)
                pipe.set_arena(fds[0], a)
                for f in fds[1:]:
                    os.close(f)
            elif op == OP_INIT:
                init = pickle.loads(pipe.recv(a))
                layout, reseed = init["layout"], init["reseed"]
                plan = layout.fast_plan()
                seeds = SeedWatch(init.get("watch", False))
            elif op == OP_PROBE:  # the first samples, measured here (as in a worker), or the
                request = pickle.loads(pipe.recv(a))  # dataset the training loop changed
                if "spec" in request:
                    got = _renew(pipe, request["spec"], wid)
                    if got is not None:
                        spec, init_error = got
                        dataset = spec.dataset
                        getitem = dataset.__getitem__
                else:
                    _probe(pipe, dataset, request, wid, init_error)
            else:
                return
            continue
        op, index, epoch, seed, offs, stamp = r[1:7]
        if init_error is not None:
            _send_error(pipe, init_error, 0, 0)
            continue
        if r[0] == RUN_TICKET:  # (no layout or ring yet: not sent by this loader)
            return
        sample, py_ns, cpu_ns = r[7:]
        if r[0] == RUN_AGAIN:  # it drew from a generator that was watched, not seeded: again,
            t0, c0 = time.perf_counter_ns(), time.thread_time_ns()  # seeded
            try:
                _pyworker.seed_all(seed)
                sample = getitem(index)
            except BaseException:  # noqa: BLE001 - as above
                _send_error(pipe, _getitem_error(wid, index, epoch),
                            py_ns + time.perf_counter_ns() - t0,
                            cpu_ns + time.thread_time_ns() - c0)
                continue
            py_ns += time.perf_counter_ns() - t0
            cpu_ns += time.thread_time_ns() - c0
        _answer(pipe, arena, layout, wid, index, epoch, seed, offs, stamp, sample, py_ns, cpu_ns)


RUN_OP, RUN_TICKET, RUN_SAMPLE, RUN_AGAIN = 0, 1, 2, 3  # what WorkerPipe.run came back with
_PIPE = None  # a worker process's WorkerPipe


def waiting_bytes():
    """In a worker process: the bytes of the loader's requests that wait for it (tickets queued
    behind the sample it runs, read or still in its socket); 0 elsewhere."""
    return _PIPE.waiting_bytes() if _PIPE is not None else 0


def _getitem_error(wid, index, epoch):
    # (a KeyboardInterrupt the dataset raises too: SIGINT is ignored here, so it is the dataset's
    # own, raised at next() as at num_workers=0)
    return error_reply(f"in stoker worker process {wid} while loading sample {index} "
                       f"(epoch {epoch})")


def _pil_image(cls, state, filename):
    """A PIL image as pickled by _dumps_objects: PIL's own state, and the file name PIL's pickle
    leaves out (a collate_fn reading im.filename, as for a lazily opened Image.open(path))."""
    image = cls.__new__(cls)
    image.__setstate__(state)
    image.filename = filename
    return image


class _ObjectPickler(pickle.Pickler):
    image_type = None  # PIL.Image.Image

    def reducer_override(self, obj):
        if isinstance(obj, self.image_type) and getattr(obj, "filename", None):
            return _pil_image, (type(obj), obj.__getstate__(), obj.filename)
        return NotImplemented


def _dumps_objects(value):
    """pickle.dumps(value) for a worker's reply (a sample's object leaves, the probe's samples),
    keeping a PIL image's filename, which the DataLoader's collate_fn sees in its worker."""
    pil = sys.modules.get("PIL.Image")
    if pil is None:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    f = io.BytesIO()
    p = _ObjectPickler(f, protocol=pickle.HIGHEST_PROTOCOL)
    p.image_type = pil.Image
    p.dump(value)
    return f.getvalue()


def _answer(pipe, arena, layout, wid, index, epoch, seed, offs, stamp, sample, py_ns, cpu_ns):
    """A sample WorkerPipe.run left to Python: its fixed leaves into the ring, its object leaves
    (and those that did not fit) pickled into the reply; held back as run() holds one."""
    try:
        bufs, objects, extras, mask = layout.flatten(sample)
        if bufs is not None:
            for i, buf in enumerate(bufs):
                if buf is not None:
                    arena.write(offs[i], buf)
        payload = b""
        if objects or mask:
            payload = _dumps_objects((objects, extras))
    except Exception:  # noqa: BLE001 - an unpicklable object leaf, say
        err = error_reply(f"in stoker worker process {wid} while sending sample {index} "
                          f"(epoch {epoch})")
        _send_error(pipe, err, py_ns, cpu_ns)
        return
    reply = REPLY.pack(ST_OK, len(payload), py_ns, mask, cpu_ns) + payload
    if stamp is not None and not payload:
        arena.write(stamp, struct.pack("<Q", seed))  # done: the parent knows if we die
        pipe.hold(reply)
    else:
        pipe.send(reply)


def _renew(pipe, blob, wid):
    """OP_PROBE with a spec: the dataset the training loop changed between epochs, taken in
    place of this worker's copy as a new worker would take it (_worker_start: seeded,
    get_worker_info(), worker_init_fn): (spec, worker_init_fn's error or None), or None when it
    could not be loaded (the copy stays; the parent raises the error sent, at iter())."""
    try:
        spec = pickle.loads(blob)
        init_error = _worker_start(wid, spec)
    except Exception:  # noqa: BLE001 - for the parent
        _send_error(pipe, error_reply(f"in stoker worker process {wid} while loading the "
                                      f"dataset the training loop changed"), 0, 0)
        return None
    pipe.send(REPLY.pack(ST_OK, len(RENEWED), 0, 0, 0) + RENEWED)
    return spec, init_error


def _probe(pipe, dataset, request, wid, init_error):
    """OP_PROBE: the first samples, run and measured here; their rows (and the first sample,
    which fixes the layout) go back pickled."""
    if init_error is not None:
        _send_error(pipe, init_error, 0, 0)
        return

    def started(index):  # the parent's timeout= runs from here
        pipe.send(REPLY.pack(ST_STARTED, 0, index, 0, 0))

    try:
        first, rows, drew, kept = _pyworker.probe_samples(dataset, request, started)
        # the first sample (the layout's) without the buffers its views point into
        payload = _dumps_objects((own_storage(first), rows, drew, kept))
        del first, kept
    except Exception:  # noqa: BLE001 - the first sample's exception, for the parent
        _send_error(pipe, error_reply(f"in stoker worker process {wid} while loading "
                                      f"sample {request['indices'][0]} (the first "
                                      f"sample, which fixes the batch layout)"), 0, 0)
        return
    pipe.send(REPLY.pack(ST_OK, len(payload), 0, 0, 0) + payload)


class _Arena:
    """The loader's shared ring, as a worker writes into it: pwrite() at the row's offset in
    its memfd, so the ring's pages are never mapped into the worker (they would count in its
    resident memory: the whole ring in every worker once it has written rows of every slot),
    or, where the file refuses pwrite, a mapping of it."""

    def __init__(self, fd, size):
        self.fd, self.size, self.view = fd, size, None

    def write(self, off, buf):
        src = memoryview(buf).cast("B")
        if off + src.nbytes > self.size:
            raise ValueError(f"a row at {off} + {src.nbytes} bytes is outside the ring")
        if self.view is None:
            try:
                while src.nbytes:
                    k = os.pwrite(self.fd, src, off)
                    src, off = src[k:], off + k
                return
            except OSError:
                self.view = np.frombuffer(mmap.mmap(self.fd, self.size), dtype=np.uint8)
        self.view[off:off + src.nbytes] = np.frombuffer(src, dtype=np.uint8)

    def close(self):
        self.view = None
        os.close(self.fd)


def _send_error(pipe, err, py_ns, cpu_ns):
    text, blob = err
    t = text.encode("utf-8", "replace")[:400]
    payload = struct.pack("<I", len(t)) + t + blob
    pipe.send(REPLY.pack(ST_ERROR, len(payload), py_ns, 0, cpu_ns) + payload)

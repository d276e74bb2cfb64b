"""The loop of stoker's fork server (the process that forks Python datasets' worker processes),
in the standard library only, so that the fork server can go on as a lean interpreter.

_procpool.py starts the fork server as a fork of the training process (it then holds torch and
the dataset, unpickled, and forks the workers from them); this module is its loop: SERVE a loader
(its control socket and spec), and for each loader's C pool SPAWN a worker (fork) and REAP one.

Going lean. A fork of the training process maps everything the training process had when it was
forked, so its resident set (100-160 MB with torch) counts again in a sum of RSS over the process
tree, although almost none of it is its own. Once a loader's workers are started, the fork server
is needed only to restart a worker that died; so right after forking a loader's last worker (a
SPAWN flagged THEN_LEAN, sent by the C pool) it exec()s a fresh interpreter that runs this module
alone (lean_main: about 10 MB resident), keeping no spec (but see FS_KEEP): its workers stay its children
(exec keeps them) and the sockets stay open (passed by number). When a worker has to be forked
again, the lean server forks a bare child that waits on its socket for the spec (WANTS_SPEC in
the answer): the training process pickles the dataset then and sends it (_procpool.spec_sender,
called by the C pool), the child unpickles it (importing torch and the dataset's modules itself)
and becomes the worker. When the training process's copy of the dataset no longer pickles
(FS_KEEP: its first samples ran there and opened a handle, an h5py file say) the fork server
pickles its own copy, which the first workers got, before the exec, and the lean server keeps it
(_Served.blob, at most LEAN_KEEP_MAX) for the workers it forks again: they unpickle it themselves.
The fork server stays as it is when a spec does not pickle (checked once in the fork server with
a pickler that skips tensor and array data: _check), when a loader's own copy no longer pickles
and the server's pickles larger than LEAN_KEEP_MAX, when a spec may name the main module and
that cannot be imported again (a `python -c` program, a notebook, a script without
`if __name__ == "__main__"`, that defines classes or functions), or while a spec inherited by
fork is not yet claimed by its loader.
"""
import importlib
import os
import pickle
import select
import signal
import socket
import struct
import sys
import traceback
import types

CTL = struct.Struct("<iiii")      # op, worker id, pid, flags (C -> server)
CTL_REPLY = struct.Struct("<ii")  # value (pid / wait status), errno (with a pid: WANTS_SPEC)
CTL_SPAWN, CTL_REAP = 1, 2
THEN_LEAN = 1   # SPAWN flag: a loader's last worker at its start; go lean after it if possible
FRESH = 2       # SPAWN flag: a worker restarted after the training loop changed the dataset
# (its workers renewed their copy): forked without this server's copy, it waits for the
# dataset as the training process has it now (WANTS_SPEC), as a lean server's workers do
WANTS_SPEC = 1  # SPAWN answer's second value: the new worker waits for its spec (OP_SPEC)
FS_REQ = struct.Struct("<III")  # token, pickled spec length, flags (then the spec; the ctl fd)
FS_KEEP = 1     # SERVE flag: the loader's copy of the dataset no longer pickles: stay a fork
HDR = struct.Struct("<IIQQQQ")  # op, n, a, b, c, d: 40 bytes (parent -> worker)
OP_SPEC = 5     # HDR op: the spec (a bytes, pickled), to a worker forked without it

SPECS = {}    # token -> spec, inherited by a fork server forked with it
CHECKED = {}  # token -> _check(spec), done by the fork server when it starts
_PREP = None  # multiprocessing's spawn preparation of the training process's main module
_PREPARED = False   # this process has the training process's main module (or prepared it)
_MAIN_CODE = False  # the training process's main module defines classes or functions
_LEANABLE = False   # a fork server that may go lean (a fork of the training process, or lean)
_FAT = False        # it holds what going lean drops (the training process's pages, specs)
# the largest pickled dataset a lean server keeps for a loader whose own copy no longer pickles
# (_Served.blob); a larger one keeps the server a fork
LEAN_KEEP_MAX = 4 << 20


class _Served:
    """One loader in a server: its control socket, its spec (None in a lean server: the training
    process sends it to each worker forked there, or `blob` has it), whether a fresh interpreter
    can have the spec (`movable`: it pickles, and so does the loader's own copy; `pickles`: this
    server's copy pickles; `names_main`: it refers to the main module) and its workers. `blob`
    (a lean server's): this server's copy, pickled before going lean, for a loader whose own copy
    no longer pickles (FS_KEEP): its restarted workers get the dataset as the first ones did."""

    def __init__(self, ctl, spec=None, movable=True, names_main=False, pickles=None):
        self.ctl, self.spec, self.movable, self.names_main = ctl, spec, movable, names_main
        self.pickles = movable if pickles is None else pickles
        self.blob = None
        self.children = set()

    def close(self):
        for c in self.children:
            try:
                os.kill(c, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for c in self.children:
            try:
                os.waitpid(c, 0)
            except ChildProcessError:
                pass
        self.children.clear()
        self.ctl.close()


def _prepare_main():
    """Before a spec is unpickled in a fresh interpreter (a lean server, or a worker forked by
    one): the training process's main module imported again as spawn prepares it (classes of a
    guarded main script), once."""
    global _PREPARED
    if _PREPARED:
        return
    _PREPARED = True
    if _PREP:
        try:
            import multiprocessing.spawn as mspawn
            mspawn.prepare(pickle.loads(_PREP))
        except Exception:  # noqa: BLE001 - classes of the main script will not unpickle
            traceback.print_exc()


def fork_server_start(prep):
    """In a fork of the training process that has just become its fork server: what going lean
    later needs, found now, before it forks any worker (so that the exec can follow a loader's
    last worker at once): the main module's preparation (`prep`, b"" when it cannot be imported
    again), whether it defines code, and the check of the inherited specs."""
    global _PREP, _PREPARED, _MAIN_CODE, _LEANABLE, _FAT
    _PREP, _PREPARED, _LEANABLE, _FAT = prep, True, True, True
    _MAIN_CODE = _main_defines_code()
    for token, spec in SPECS.items():
        CHECKED[token] = _check(spec)


class _Nowhere:
    """A file that counts what is written to it and keeps none of it."""

    def __init__(self):
        self.n = 0

    def write(self, b):
        n = len(b) if not isinstance(b, memoryview) else b.nbytes
        self.n += n
        return n


class _Checker(pickle.Pickler):
    """Pickles to nowhere without the data of tensors, arrays and storages (their bytes are
    what costs, and they always pickle), noting whatever refers to the main module."""

    def __init__(self):
        self.sink = _Nowhere()
        super().__init__(self.sink, protocol=pickle.HIGHEST_PROTOCOL)
        from stoker import _holds  # (read-only files by path and position, as pickled)
        self.dispatch_table = _holds.dispatch_table()
        self.names_main = False
        torch, np = sys.modules.get("torch"), sys.modules.get("numpy")
        bulk = (getattr(torch, "Tensor", None), getattr(torch, "UntypedStorage", None),
                getattr(getattr(torch, "storage", None), "TypedStorage", None),
                getattr(np, "ndarray", None))
        self.bulk = tuple(t for t in bulk if isinstance(t, type))

    def reducer_override(self, obj):
        if type(obj).__module__ == "__main__" or isinstance(obj, (type, types.FunctionType)) \
                and getattr(obj, "__module__", None) == "__main__":
            self.names_main = True
        if self.bulk and isinstance(obj, self.bulk) and \
                not getattr(getattr(obj, "dtype", None), "hasobject", False):
            return (tuple, ())
        return NotImplemented


def _check(spec):
    """(whether `spec` pickles, whether it refers to the main module), found without pickling
    tensor or array data: the bytes are never kept."""
    c = _Checker()
    try:
        c.dump(spec)
    except Exception:  # noqa: BLE001 - it does not pickle: the fork server stays a fork
        return False, c.names_main
    return True, c.names_main


def _server_loop(main, served):
    """Answer the loaders' control sockets (SPAWN a worker, REAP one) and, on `main` (the fork
    server's socket to its parent; None for a spawned server), SERVE requests adding loaders.
    A control socket that ends takes its loader's workers with it; `main` ending (or the last
    loader of a spawned server) ends the server."""
    try:
        while True:
            socks = ([main] if main is not None else []) + [v.ctl for v in served]
            if not socks:
                return
            ready, _, _ = select.select(socks, [], [], 1.0)
            for s in ready:
                if s is main:
                    if not _serve_request(main, served):
                        return
                    continue
                v = next(v for v in served if v.ctl is s)
                if not _control_request(v, main, served):
                    served.remove(v)
                    v.close()
    finally:
        for v in served:
            v.close()


def _serve_request(main, served):
    """A SERVE or FORGET request on the fork server's socket; False when the parent is gone."""
    global _FAT
    try:
        got = _recv_header(main, FS_REQ)
        if got is None:
            return False
        (token, n, flags), fds = got
        blob = bytes(_recv_exact(main, n)) if n else b""
    except (OSError, EOFError):
        return False
    if not fds:  # forget: the loader chose threads
        SPECS.pop(token, None)
        CHECKED.pop(token, None)
        main.sendall(CTL_REPLY.pack(0, 0))
        return True
    for fd in fds[1:]:
        os.close(fd)
    ctl = socket.socket(fileno=fds[0])
    keep = bool(flags & FS_KEEP)
    # the loader goes on at once: whether this server could take its spec (unpickling it may
    # import torch and the dataset's modules: most of a second) comes on its control socket,
    # which its C pool reads before the answer to its first SPAWN
    main.sendall(CTL_REPLY.pack(os.getpid(), 0))
    try:
        if token:
            pickles, names_main = CHECKED.pop(token, (False, True))
            v = _Served(ctl, SPECS.pop(token), pickles and not keep, names_main, pickles)
        else:
            _prepare_main()
            v = _Served(ctl, pickle.loads(blob), not keep, b"__main__" in blob)
            _FAT = True  # (in a lean server: torch and the dataset's modules, imported)
        del blob
        ctl.sendall(struct.pack("<I", 0))
        served.append(v)
    except BaseException as e:  # noqa: BLE001 - told to the loader on its socket
        text = f"{type(e).__name__}: {e}".encode("utf-8", "replace")[:2000]
        try:
            ctl.sendall(struct.pack("<I", len(text)) + text)
        except OSError:
            pass
        ctl.close()
    return True


def _control_request(v, main, served):
    """A SPAWN or REAP request from a loader's C pool; False when its socket ended. A SPAWN
    flagged THEN_LEAN (the loader's last worker at its start) is followed by going lean."""
    ctl = v.ctl
    try:
        got = _recv_header(ctl, CTL)
    except (OSError, EOFError):
        return False
    if got is None:
        return False
    (op, wid, pid, flags), fds = got
    if op == CTL_SPAWN and fds:
        spec, blob = (None, None) if flags & FRESH else (v.spec, v.blob)
        run = importlib.import_module("stoker._procpool").worker_main \
            if spec is not None or blob is not None else None
        # going lean after this worker: everything prepared first, so that the exec follows
        # the fork and the answer at once (the fat server beside all the workers, briefly)
        lean = _lean_state(main, served) if flags & THEN_LEAN and main is not None else None
        child = os.fork()
        if child == 0:
            code = 0
            try:
                if main is not None:
                    main.close()
                for other in served:
                    other.ctl.close()
                for fd in fds[1:]:
                    os.close(fd)
                if lean is not None:
                    os.close(lean)
                keep_heap()
                if spec is None and blob is not None:  # (a lean server's own copy)
                    _prepare_main()
                    spec = pickle.loads(blob)
                if spec is None:
                    _worker_on_demand(fds[0], wid)
                else:
                    run(fds[0], wid, spec)
            except BaseException:  # noqa: BLE001
                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)
        v.children.add(child)
        # (the loader may have closed before reading the answer: its first SPAWNs are sent
        # together and answered later; then its socket ends here and its workers with it)
        if not _answer(ctl, child, WANTS_SPEC if run is None else 0):
            if lean is not None:
                os.close(lean)
            return False
        if lean is not None:
            _exec_lean(lean, ctl.fileno(), child)  # returns only when the exec failed
    elif op == CTL_REAP:
        try:
            _, status = os.waitpid(pid, 0)
            v.children.discard(pid)
            return _answer(ctl, status, 0)
        except ChildProcessError:
            return _answer(ctl, -1, 10)  # ECHILD
    else:
        for fd in fds:
            os.close(fd)
        return _answer(ctl, -1, 22)  # EINVAL
    return True


def _answer(ctl, value, err):
    """A control request's answer; False when the loader's socket ended."""
    try:
        ctl.sendall(CTL_REPLY.pack(value, err))
    except OSError:
        return False
    return True


# ---- a worker's heap ----

# glibc's mallopt parameters (malloc.h), and the values a worker sets: the largest threshold
# glibc's own dynamic rule would reach on a 64-bit system, and the trim threshold at twice it
# (the same rule's ratio).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
HEAP_MMAP_THRESHOLD = 32 << 20
HEAP_TRIM_THRESHOLD = 64 << 20


def keep_heap():
    """In a new worker process: glibc's malloc told to keep the memory a sample frees for the
    next sample, rather than hand it back to the kernel and fault it in again. By default glibc
    serves a block above its threshold (128 KB, raised to the largest block freed so far) with
    mmap, and trims the heap's top once more than twice that is free: a __getitem__ that
    decodes a JPEG and returns a 3x224x224 float32 tensor frees a few MB per sample, so each
    sample unmapped it and faulted ~130 pages back in (200 us of kernel time in 1700, measured
    with bench_pydataset.py --cpu and perf: bench/RESULTS.md, "pil's CPU"). With both
    thresholds fixed, blocks up to 32 MB come from the heap and the heap keeps up to 64 MB free
    at its top; what it keeps is what a sample used, already counted in the worker's peak.
    Left alone where the user set glibc's malloc tunables (MALLOC_*_ or GLIBC_TUNABLES), and
    on any other C library. Returns whether it set them."""
    if any(k.startswith("MALLOC_") and k.endswith("_") for k in os.environ) or \
            "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return False
        import ctypes  # (here, in the worker: the lean server's interpreter stays without it)
        mallopt = ctypes.CDLL(None).mallopt
    except (ValueError, OSError, AttributeError, ImportError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, HEAP_MMAP_THRESHOLD) and
                mallopt(M_TRIM_THRESHOLD, HEAP_TRIM_THRESHOLD))


def _worker_on_demand(fd, wid):
    """A worker forked by a lean server (which holds no spec): the spec first, pickled by the
    training process when it asked for this worker (OP_SPEC), then the worker's loop."""
    sock = socket.socket(fileno=fd)
    op, _, n, _, _, _ = HDR.unpack(_recv_exact(sock, HDR.size))
    if op != OP_SPEC:
        raise RuntimeError(f"worker process {wid} was sent request {op} before its dataset")
    blob = _recv_exact(sock, n)
    _prepare_main()
    spec = pickle.loads(blob)
    del blob
    sock.detach()
    importlib.import_module("stoker._procpool").worker_main(fd, wid, spec)


def _recv_header(sock, fmt):
    """A request's fixed header (struct `fmt`) and the descriptors sent with it, unpacked; None
    when the socket ended."""
    msg, fds, _, _ = socket.recv_fds(sock, fmt.size, 1)
    if not msg:
        return None
    if len(msg) < fmt.size:
        msg = bytes(msg) + bytes(_recv_exact(sock, fmt.size - len(msg)))
    return fmt.unpack(msg), fds


def _recv_exact(sock, n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError
        got += k
    return buf


# ---- going lean ----

def _lean_state(main, served):
    """Before going lean: the state lean_main needs (the sockets, each loader's workers, sys.path,
    the main module's preparation) in a memfd, every descriptor it names made inheritable; the
    memfd, or None when the server stays as it is: nothing to drop, a spec inherited by fork not
    claimed yet, a spec a fresh interpreter could not have (it does not pickle, or its loader's
    copy does not, or it refers to a main module that cannot be imported again), or a main
    module that cannot be imported again and defines code (a later loader's dataset may be one
    of its classes, which only a fork knows)."""
    if not (_LEANABLE and _FAT) or SPECS or not all(v.movable or v.pickles for v in served):
        return None
    if not _PREP and (_MAIN_CODE or any(v.names_main for v in served)):
        return None
    try:
        blobs = []
        for v in served:  # a loader whose own copy no longer pickles: this server's, kept
            blob = v.blob if v.spec is None else None if v.movable else _dumps_at_most(v.spec)
            if blob is None and not v.movable:
                return None
            blobs.append(blob)
        state = pickle.dumps({"path": list(sys.path), "prep": _PREP or b"",
                              "main": main.fileno(),
                              "served": [(v.ctl.fileno(), sorted(v.children), b)
                                         for v, b in zip(served, blobs)]})
        fd = os.memfd_create("stoker-fork-server-state")
        view = memoryview(state)
        while view.nbytes:
            view = view[os.write(fd, view):]
    except Exception:  # noqa: BLE001 - then it stays as it is
        traceback.print_exc()
        return None
    for s in [main] + [v.ctl for v in served]:
        os.set_inheritable(s.fileno(), True)
    os.set_inheritable(fd, True)
    return fd


def _exec_lean(fd, ctl, child):
    """Exec lean_main on the state in memfd `fd`, adding `child` (forked since the state was
    written) to the workers of the loader on control socket `ctl`; returns only if the exec
    failed (the server then stays as it is)."""
    code = ("import importlib.util as u; s = u.spec_from_file_location('stoker_fork_server', "
            "%r); m = u.module_from_spec(s); s.loader.exec_module(m); m.lean_main(%d, %d, %d)"
            % (os.path.abspath(__file__), fd, ctl, child))
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(sys.executable, [sys.executable, "-c", code])
    except OSError:
        traceback.print_exc()
        os.close(fd)


class _Bounded(_Nowhere):
    """A file that keeps what is written to it, up to LEAN_KEEP_MAX bytes (then OverflowError)."""

    def __init__(self):
        super().__init__()
        self.parts = []

    def write(self, b):
        n = super().write(b)
        if self.n > LEAN_KEEP_MAX:
            raise OverflowError
        self.parts.append(bytes(b))
        return n


def _dumps_at_most(spec):
    """`spec` pickled, or None when it does not pickle or takes more than LEAN_KEEP_MAX bytes
    (found without writing more than that)."""
    f = _Bounded()
    try:
        from stoker import _holds  # (read-only files by path and position)
        _holds.pickler(f).dump(spec)
    except Exception:  # noqa: BLE001 - then the server stays a fork
        return None
    return b"".join(f.parts)


def _main_defines_code():
    """Whether the main module defines classes or functions of its own (a later loader's
    dataset may be one of them, which a fork of the training process knows and a fresh
    interpreter does not)."""
    main = sys.modules.get("__main__")
    return any(getattr(v, "__module__", None) == "__main__" for v in vars(main).values()
               if isinstance(v, type) or callable(v)) if main is not None else False


def lean_main(fd, ctl=-1, child=0):
    """The fork server after going lean: the state _lean_state left in memfd `fd` (read, then
    closed: the lean server keeps no memfd), `child` a worker of the loader on `ctl` too, then
    the loop."""
    global _PREP, _LEANABLE
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    chunks, off = [], 0
    while True:
        b = os.pread(fd, 1 << 16, off)
        if not b:
            break
        chunks.append(b)
        off += len(b)
    os.close(fd)
    state = pickle.loads(b"".join(chunks))
    sys.path[:] = state["path"]
    _PREP, _LEANABLE = state["prep"], True
    served = []
    for fd_ctl, children, blob in state["served"]:
        v = _Served(socket.socket(fileno=fd_ctl))
        v.blob = blob
        v.children.update(children)
        if fd_ctl == ctl and child > 0:
            v.children.add(child)
        served.append(v)
    _server_loop(socket.socket(fileno=state["main"]), served)

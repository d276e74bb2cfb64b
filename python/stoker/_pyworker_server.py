"""The loop of stoker's fork server (the process that forks Python datasets' worker processes),
in the standard library only, so that the fork server can go on as a lean interpreter.

_procpool.py starts the fork server as a fork of the training process (it then holds torch and
the dataset, unpickled, and forks the workers from them); this module is its loop: SERVE a loader
(its control socket and spec), and for each loader's C pool SPAWN a worker (fork) and REAP one.

Going lean. A fork of the training process maps everything the training process had when it was
forked, so its resident set (100-160 MB with torch) counts again in a sum of RSS over the process
tree, although almost none of it is its own. Once a loader's workers are started, the fork server
is needed only to restart a worker that died; so on LEAN (sent by _procpool after a loader's
workers started) it pickles the specs it serves into a memfd and exec()s a fresh interpreter that
runs this module alone (lean_main: about 10 MB resident). Its workers stay its children (exec
keeps them), the sockets stay open (passed by number). The specs are unpickled there only when a
worker has to be forked again (the dataset's modules and torch are then imported, once). The
fork server stays as it is (answer 0) when a spec does not pickle, when the pickled specs exceed
LEAN_MAX_BYTES (they are kept in the memfd: memory, if in no process's resident set), when a spec
may name the main module and that cannot be imported again (a `python -c` program, a notebook,
a script without `if __name__ == "__main__"`, that defines classes or functions), or while a spec inherited by fork is not yet claimed
by its loader.
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

CTL = struct.Struct("<iiii")      # op, worker id, pid, pad (C -> server)
CTL_REPLY = struct.Struct("<ii")  # value (pid / wait status / went lean), errno
CTL_SPAWN, CTL_REAP = 1, 2
FS_REQ = struct.Struct("<II")  # token, pickled spec length (then the spec; the ctl fd attached)
LEAN_TOKEN = 0xFFFFFFFF        # FS_REQ token without a ctl fd: go lean (token 1..: forget it)
LEAN_MAX_BYTES = 64 << 20

SPECS = {}    # token -> spec, inherited by a fork server forked with it
_PREP = None  # multiprocessing's spawn preparation of the training process's main module


class _Served:
    """One loader in a server: its control socket, its spec (an object, or pickled: bytes, or
    (fd, offset, length) in a lean server's memfd, unpickled on first use) and its workers."""

    def __init__(self, ctl, spec=None, blob=None):
        self.ctl, self._spec, self._blob, self.children = ctl, spec, blob, set()

    @property
    def spec(self):
        if self._spec is None:
            _prepare_main()
            self._spec = pickle.loads(self.blob())
        return self._spec

    def blob(self):
        """The spec pickled (raises what pickling raises)."""
        b = self._blob
        if isinstance(b, tuple):
            fd, off, n = b
            return os.pread(fd, n, off)
        if b is None:
            b = self._blob = pickle.dumps(self._spec, protocol=pickle.HIGHEST_PROTOCOL)
        return b

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
    """In a lean server, before the first spec is unpickled: the training process's main module
    imported again as spawn prepares it (classes of a guarded main script), once."""
    global _PREP
    prep, _PREP = _PREP, None
    if prep:
        try:
            import multiprocessing.spawn as mspawn
            mspawn.prepare(pickle.loads(prep))
        except Exception:  # noqa: BLE001 - classes of the main script will not unpickle
            traceback.print_exc()


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
    """A SERVE, FORGET or LEAN request on the fork server's socket; False when the parent is
    gone."""
    try:
        got = _recv_header(main, FS_REQ)
        if got is None:
            return False
        (token, n), fds = got
        blob = bytes(_recv_exact(main, n)) if n else b""
    except (OSError, EOFError):
        return False
    if not fds and token == LEAN_TOKEN:
        _go_lean(main, served)  # returns only when it stays as it is
        return True
    if not fds:  # forget: the loader chose threads
        SPECS.pop(token, None)
        main.sendall(CTL_REPLY.pack(0, 0))
        return True
    for fd in fds[1:]:
        os.close(fd)
    ctl = socket.socket(fileno=fds[0])
    try:
        if token:
            v = _Served(ctl, SPECS.pop(token))
        else:
            _prepare_main()
            v = _Served(ctl, pickle.loads(blob), blob)
        ctl.sendall(struct.pack("<I", 0))
        served.append(v)
    except BaseException as e:  # noqa: BLE001 - told to the loader on its socket
        text = f"{type(e).__name__}: {e}".encode("utf-8", "replace")[:2000]
        try:
            ctl.sendall(struct.pack("<I", len(text)) + text)
        except OSError:
            pass
        ctl.close()
    main.sendall(CTL_REPLY.pack(os.getpid(), 0))
    return True


def _control_request(v, main, served):
    """A SPAWN or REAP request from a loader's C pool; False when its socket ended."""
    ctl = v.ctl
    try:
        got = _recv_header(ctl, CTL)
    except (OSError, EOFError):
        return False
    if got is None:
        return False
    (op, wid, pid, _), fds = got
    if op == CTL_SPAWN and fds:
        try:
            spec = v.spec
        except Exception:  # noqa: BLE001 - a lean server's spec that no longer unpickles
            traceback.print_exc()
            for fd in fds:
                os.close(fd)
            ctl.sendall(CTL_REPLY.pack(-1, 22))  # EINVAL
            return True
        worker_main = importlib.import_module("stoker._procpool").worker_main
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
                worker_main(fds[0], wid, spec)
            except BaseException:  # noqa: BLE001
                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)
        v.children.add(child)
        ctl.sendall(CTL_REPLY.pack(child, 0))
    elif op == CTL_REAP:
        try:
            _, status = os.waitpid(pid, 0)
            v.children.discard(pid)
            ctl.sendall(CTL_REPLY.pack(status, 0))
        except ChildProcessError:
            ctl.sendall(CTL_REPLY.pack(-1, 10))  # ECHILD
    else:
        for fd in fds:
            os.close(fd)
        ctl.sendall(CTL_REPLY.pack(-1, 22))  # EINVAL
    return True


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

def _go_lean(main, served):
    """LEAN: pickle the served specs into a memfd and exec lean_main (answer 1 first), or stay
    as it is (answer 0: a spec inherited by fork not yet claimed, a spec that does not pickle,
    or more than LEAN_MAX_BYTES of them)."""
    global _PREP
    try:
        if SPECS:
            raise ValueError("an inherited spec is not claimed yet")
        blobs = [v.blob() for v in served]
        if sum(len(b) for b in blobs) > LEAN_MAX_BYTES:
            raise ValueError("the specs are too large")
        if _PREP is None and "stoker._procpool" in sys.modules:
            _PREP = sys.modules["stoker._procpool"]._main_preparation()
        if not _PREP and (any(b"__main__" in b for b in blobs) or _main_defines_code()):
            raise ValueError("a class of a main module that cannot be imported again would "
                             "not unpickle (for this loader, or a later one)")
        fd = os.memfd_create("stoker-fork-server")
        offs, off = [], 0
        for b in blobs:
            offs.append(off)
            off += len(b)
        head = pickle.dumps({"path": list(sys.path), "prep": _PREP or b"",
                             "main": main.fileno(),
                             "served": [(v.ctl.fileno(), sorted(v.children), o, len(b))
                                        for v, o, b in zip(served, offs, blobs)]})
        base = 8 + len(head)
        os.write(fd, struct.pack("<Q", len(head)) + head)
        for b in blobs:
            view = memoryview(b)
            while view.nbytes:
                view = view[os.write(fd, view):]
        del blobs
    except Exception:  # noqa: BLE001 - then it stays as it is
        main.sendall(CTL_REPLY.pack(0, 0))
        return
    for s in [main] + [v.ctl for v in served]:
        os.set_inheritable(s.fileno(), True)
    os.set_inheritable(fd, True)
    code = ("import importlib.util as u; s = u.spec_from_file_location('stoker_fork_server', "
            "%r); m = u.module_from_spec(s); s.loader.exec_module(m); m.lean_main(%d, %d)"
            % (os.path.abspath(__file__), fd, base))
    main.sendall(CTL_REPLY.pack(1, 0))
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(sys.executable, [sys.executable, "-c", code])
    except OSError:  # stays as it is (the parent was told 1: only its report is wrong)
        traceback.print_exc()
        os.close(fd)


def _main_defines_code():
    """Whether the main module defines classes or functions of its own (a later loader's
    dataset may be one of them, which a fork of the training process knows and a fresh
    interpreter does not)."""
    main = sys.modules.get("__main__")
    return any(getattr(v, "__module__", None) == "__main__" for v in vars(main).values()
               if isinstance(v, type) or callable(v)) if main is not None else False


def lean_main(fd, base):
    """The fork server after LEAN: the state _go_lean wrote into memfd `fd`, then the loop."""
    global _PREP
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.set_inheritable(fd, False)  # (a later LEAN copies what it needs into a memfd of its own)
    n = struct.unpack("<Q", os.pread(fd, 8, 0))[0]
    state = pickle.loads(os.pread(fd, n, 8))
    sys.path[:] = state["path"]
    _PREP = state["prep"] or None
    served = []
    for ctl, children, off, length in state["served"]:
        v = _Served(socket.socket(fileno=ctl), blob=(fd, base + off, length))
        v.children.update(children)
        served.append(v)
    _server_loop(socket.socket(fileno=state["main"]), served)

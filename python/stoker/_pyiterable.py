"""stoker.Loader over an IterableDataset: each worker iterates its own replica of the dataset,
batches what it draws and hands the batches over in turn, as the DataLoader does.

An IterableDataset has no indices, so stoker's order, tickets and ring do not apply: a worker
(a process forked by stoker's fork server, or a thread) draws batch_size items from its
iterator, collates them (default_collate or collate_fn, in the worker, as the DataLoader), and
the training loop takes batches round-robin over the workers, skipping those whose iterator
ended (each worker's last batch partial unless drop_last). torch.utils.data.get_worker_info()
answers in every worker (id, num_workers, seed, dataset), so a dataset shards itself by it
exactly as it does under the DataLoader; with num_workers=0 one thread iterates the dataset
with get_worker_info() None, as the DataLoader's main process does.

Batches from worker processes are pickled (a tensor by value) over a Unix socket: unlike a
map-style dataset, nothing is known about a batch before the worker made it. Each worker's
global random generators are seeded per epoch from stk_sample_seed(seed, epoch, worker id).

Ctrl-C never costs a batch (docs/python.md "Errors"): answers are numbered per pass and kept
in their channel until the consumer's commit (attribute stores only, no call that could run a
signal handler between it and the return), so a KeyboardInterrupt while the training loop
waits, takes or unpickles a batch leaves it for the next call; a KeyboardInterrupt raised in a
worker (its collate_fn) is forwarded to the training loop as an answer of its own, the items it
was collating kept for the worker's next batch. Each process channel's answers are read by a
thread of its own, so no socket read is ever cut short by a signal.

Resume: when the dataset has state_dict()/load_state_dict(), each worker sends its replica's
state with every batch; state_dict() holds the state of each worker at its last delivered batch
(and whose turn is next), and after load_state_dict() each worker's replica is given its state
before it is iterated again. Without them, state_dict() raises StokerNotSupportedError.
"""
import copy
import pickle
import socket
import struct
import threading
import time
import warnings

from . import _core
from . import _errors
from . import _holds
from . import _procpool
from . import _pyworker
from . import _torchcompat
from . import _torchprof
from .loader import Loader, _MAPPED, _torch, superseded

REQ = struct.Struct("<IIQQ")  # op, count, epoch, pass (parent -> worker)
ANS = struct.Struct("<IIQ")    # kind, payload length, pass (worker -> parent)
OP_START, OP_BATCH = 10, 11
ANS_BATCH, ANS_END, ANS_ERROR, ANS_INTERRUPT, ANS_DEAD = 1, 2, 3, 4, 5


class IterSpec(_procpool.WorkerSpec):
    """A worker spec for an IterableDataset: batch size, drop_last, collate_fn, seed. A worker
    process started with it runs worker_loop instead of answering tickets."""

    def __init__(self, dataset, n_workers, base_seed, worker_init_fn, name, batch_size,
                 drop_last, collate_fn, reseed):
        super().__init__(dataset, n_workers, base_seed, worker_init_fn, name)
        self.batch_size, self.drop_last = batch_size, drop_last
        self.collate_fn, self.reseed = collate_fn, reseed

    def worker_loop(self, sock, wid):
        return _iter_worker_main(sock, wid, self)


def _collate(spec, items):
    torch = _torch()
    if spec.batch_size is None:
        if spec.collate_fn is not None:
            return spec.collate_fn(items[0])
        if torch is not None:
            from torch.utils.data._utils.collate import default_convert
            return default_convert(items[0])
        return items[0]
    if spec.collate_fn is not None:
        return spec.collate_fn(items)
    from ._collate import _default_collate
    return _default_collate(torch)(items)


def _epoch_worker_info(spec, wid, epoch, dataset):
    """get_worker_info() with a seed of epoch `epoch`'s: the DataLoader's workers, started anew
    at each epoch, get a new one each epoch, and an IterableDataset that shuffles its shards with
    random.Random(get_worker_info().seed) got the same order every epoch from stoker's
    persistent workers. Epoch 0 keeps the loader's seed + worker id."""
    tls = _pyworker.TLS
    on_thread = getattr(tls, "info", None) is not None
    if not on_thread:
        from torch.utils.data._utils import worker as tw
        if tw._worker_info is None:  # (num_workers=0: none, as in the main process)
            return
    base = _core.sample_seed(spec.base_seed, epoch, (1 << 63) - 1) if epoch else spec.base_seed
    info = _pyworker.worker_info(wid, spec.n_workers, (base + wid) & ((1 << 64) - 1), dataset)
    if on_thread:
        tls.info = info
    else:
        tw._worker_info = info


class _Stream:
    """One worker's iteration of its replica: next batch, end, or an exception.

    `start`: None (the epoch's start) or (the replica's state, the batches this worker made
    before it) from a resume state. `reseed` (worker processes with reseed on; never a thread,
    whose generators are the training loop's): the global generators are seeded from
    stk_sample_seed(seed, epoch, worker id) before iter() and again, per (seed, epoch, worker,
    batch k), before each later batch's items are drawn, so a resumed replica draws what it
    would have drawn (seeded only once, it drew the epoch's first numbers again)."""

    def __init__(self, spec, wid, epoch, start, dataset=None, reseed=False):
        self.spec, self.wid, self.epoch = spec, wid, epoch
        ds = spec.dataset if dataset is None else dataset
        self.dataset = ds
        state, self.k = start if start is not None else (None, 0)
        _epoch_worker_info(spec, wid, epoch, ds)
        if state is not None:
            ds.load_state_dict(state)
        self.reseed = reseed
        if reseed:
            _pyworker.seed_all(_core.sample_seed(spec.base_seed, epoch, wid))
        self.it = iter(ds)
        self.ended = False
        self.items = None  # the next batch's items, drawn and not yet delivered

    def next_batch(self):
        """(ANS_BATCH, batch, state) / (ANS_END, None, None); an exception propagates. A
        KeyboardInterrupt (collate_fn's, or the worker thread's) keeps the items drawn for the
        next call; another exception drops them, as the DataLoader's worker does."""
        spec = self.spec
        items = self.items
        k = 1 if spec.batch_size is None else spec.batch_size
        if items is None or (len(items) < k and not self.ended):
            if items is None:
                if self.ended:
                    return ANS_END, None, None
                items = self.items = []
                if self.reseed and self.k:  # (batch 0 draws after the seeding at iter())
                    _pyworker.seed_all(_core.sample_seed(
                        spec.base_seed, self.epoch, self.k * max(1, spec.n_workers) + self.wid))
            try:
                while len(items) < k:
                    items.append(next(self.it))
            except StopIteration:
                self.ended = True
            except Exception:
                self.items = None
                raise
        if not items or (len(items) < k and spec.drop_last):
            self.items = None
            return ANS_END, None, None
        try:
            batch = _collate(spec, items)
            st = self.dataset.state_dict() if hasattr(self.dataset, "state_dict") else None
        except Exception:
            self.items = None
            raise
        self.items = None
        self.k += 1
        return ANS_BATCH, batch, (st, self.k)


def _iter_worker_main(sock, wid, spec):
    """A worker process's loop: START(epoch, state) begins a fresh iteration; each BATCH
    request gets the next batch, END, or the exception."""
    stream, gen = None, 0
    while True:
        try:
            head = _procpool._recv_exact(sock, REQ.size)
        except (OSError, EOFError):
            return
        op, n, epoch, pass_no = REQ.unpack(head)
        if op == OP_START:
            gen = pass_no
            state = pickle.loads(_procpool._recv_exact(sock, n)) if n else None
            try:
                stream = _Stream(spec, wid, epoch, state, reseed=spec.reseed)
                err = None
            except Exception:  # noqa: BLE001 - reported with the first batch request
                stream = None
                err = _errors.wrap_exception(f"in stoker worker process {wid} (starting the "
                                             f"iteration of epoch {epoch})")[1]
            continue
        if op != OP_BATCH:
            return
        if stream is None:
            payload = err or pickle.dumps(None)
            sock.sendall(ANS.pack(ANS_ERROR, len(payload), gen) + payload)
            continue
        try:
            kind, batch, st = stream.next_batch()
            payload = b"" if kind == ANS_END else pickle.dumps(
                (batch, st), protocol=pickle.HIGHEST_PROTOCOL)
        except KeyboardInterrupt:  # collate_fn's own: the training loop's, items kept
            kind, payload = ANS_INTERRUPT, b""
        except Exception:  # noqa: BLE001 - the DataLoader's wrapper goes to the consumer
            kind = ANS_ERROR
            payload = _errors.wrap_exception(f"in stoker worker process {wid} (epoch "
                                             f"{epoch})")[1]
        sock.sendall(ANS.pack(kind, len(payload), gen) + payload)


# ---- the parent side: one channel per worker ----

def _unpickle(payload):
    """A worker process's batch and replica state (pickled)."""
    return pickle.loads(payload)


class _Channel:
    """A worker's answers to one pass's requests, numbered 0, 1, 2 ... and kept in `msgs`
    until the consumer commits them (`taken`); the consumer keeps `depth` requests ahead of
    what it took (requesting more than that is harmless: the answers wait in order)."""

    def __init__(self, wid, timeout):
        self.wid, self.timeout = wid, timeout
        self.cv = threading.Condition()
        self.gen = 0          # the pass whose answers are kept
        self.msgs = {}        # answer number -> (kind, payload)
        self.arrived = 0      # answers of this pass so far
        self.taken = 0        # answers the consumer committed
        self.requested = 0    # requests sent in this pass

    def _reset(self, gen):
        """A new pass (cv held): answers of older passes are dropped as they come."""
        self.gen = gen
        self.msgs = {}
        self.arrived = self.taken = self.requested = 0

    def _arrive(self, gen, answer):
        with self.cv:
            if gen == self.gen:
                self.msgs[self.arrived] = answer
                self.arrived += 1
                self.cv.notify_all()

    def top_up(self, epoch, depth):
        while self.requested < self.taken + depth:
            self._request(epoch)
            self.requested += 1

    def peek(self):
        """The next answer, waited for (a KeyboardInterrupt or the timeout leaves everything as
        it was); it stays until the consumer commits it (taken += 1)."""
        deadline = time.monotonic() + self.timeout if self.timeout else None
        with self.cv:
            self.msgs.pop(self.taken - 1, None)  # committed before
            while self.taken not in self.msgs:
                if deadline is not None and time.monotonic() >= deadline:
                    raise RuntimeError(f"stoker.Loader timed out after {self.timeout} seconds "
                                       f"waiting for {self.what()}")
                self.cv.wait(0.1)
            return self.msgs[self.taken]


class _ProcChannel(_Channel):
    """A worker process: requests go out over its socket, a reader thread of the channel
    receives the answers (so no socket read is cut short by a signal in the training loop)."""

    def __init__(self, server_ctl, wid, timeout, spec):
        super().__init__(wid, timeout)
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        socket.send_fds(server_ctl, [_procpool.CTL.pack(_procpool.CTL_SPAWN, wid, 0, 0)],
                        [b.fileno()])
        pid, want = _procpool.CTL_REPLY.unpack(_procpool._recv_exact(server_ctl, 8))
        b.close()
        if pid <= 0:
            a.close()
            raise _core.StokerIOError(f"cannot start iterable worker process {wid}")
        if want == _procpool.WANTS_SPEC:  # forked by a lean fork server: it needs the dataset
            _procpool.spec_sender(spec)(a.fileno())
        self.sock, self.pid = a, pid
        self.closing = False
        self.dead = False  # its socket ended: the worker is gone (restarted at the next pass)
        self.status = None  # its wait status once reaped (reap)
        self.reader = threading.Thread(target=self._read, name=f"stoker-iter-read-{wid}",
                                       daemon=True)
        self.reader.start()

    def what(self):
        return f"worker process {self.wid}"

    def _read(self):
        while True:
            try:
                kind, n, gen = ANS.unpack(_procpool._recv_exact(self.sock, ANS.size))
                payload = bytes(_procpool._recv_exact(self.sock, n)) if n else b""
            except (OSError, EOFError, ValueError):
                if not self.closing:
                    self.dead = True
                    self._arrive(self.gen, (ANS_DEAD, None))
                return
            self._arrive(gen, (kind, payload))

    def start(self, epoch, state, gen):
        blob = b"" if state is None else pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        with self.cv:
            self._reset(gen)
        self._send(REQ.pack(OP_START, len(blob), epoch, gen) + blob)

    def _request(self, epoch):
        self._send(REQ.pack(OP_BATCH, 1, epoch, self.gen))

    def _send(self, msg):
        """A request to the worker. One that exited has closed its socket: the send fails, and
        the reader thread, finding the socket ended, answers ANS_DEAD, which the consumer takes
        next and raises as the worker's death (by name, not as the socket's error). A reader
        that found it already (its answer dropped by a new pass's reset) is answered for here."""
        try:
            self.sock.sendall(msg)
        except (BrokenPipeError, ConnectionResetError):
            if self.dead:
                self._arrive(self.gen, (ANS_DEAD, None))

    def reap(self, server_ctl):
        """The dead worker's wait status, asked of the fork server that forked it (REAP), once;
        -1 where the server cannot say."""
        if self.status is None:
            try:
                server_ctl.sendall(_procpool.CTL.pack(_procpool.CTL_REAP, self.wid, self.pid, 0))
                status, err = _procpool.CTL_REPLY.unpack(_procpool._recv_exact(server_ctl, 8))
            except (OSError, EOFError):
                return -1
            self.status = status if status >= 0 and not err else -1
        return self.status

    def death(self, server_ctl):
        """What the consumer raises for this worker's death: how it ended, and that it is
        restarted for the next pass."""
        return (f"stoker.Loader: iterable worker process {self.wid} (pid {self.pid}) exited "
                f"unexpectedly: it {_core.wait_status_text(self.reap(server_ctl))}; its "
                f"iterator's items after the last batch it delivered are lost for this pass, and "
                f"it is restarted for the next one")

    def close(self):
        self.closing = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class _ThreadChannel(_Channel):
    """A worker thread iterating its replica (a shallow copy of the dataset), answering as many
    requests as the consumer made."""

    def __init__(self, spec, wid, n, depth, timeout):
        super().__init__(wid, timeout)
        self.spec, self.n = spec, n
        # each worker thread iterates its own (shallow) copy, as each DataLoader worker has its
        # own replica: attributes the dataset sets while iterating stay per worker
        self.dataset = copy.copy(spec.dataset) if n > 0 else spec.dataset
        # and a file of its own where the dataset holds one (its position), closed at the end
        self.files = _holds.own_files(self.dataset) if n > 0 else []
        self.epoch, self.state = None, None
        self.produced = 0
        self.stop = False
        self.thread = threading.Thread(target=self._run, name=f"stoker-iter-{wid}", daemon=True)
        self.thread.start()

    def what(self):
        return f"worker thread {self.wid}"

    def _run(self):
        try:
            self._serve()
        finally:
            for f in self.files:
                f.close()

    def _serve(self):
        if self.n > 0:
            _pyworker.TLS.info = _pyworker.worker_info(
                self.wid, self.n, self.spec.base_seed + self.wid, self.dataset)
            _pyworker.TLS.ready = True
            if self.spec.worker_init_fn is not None:
                self.spec.worker_init_fn(self.wid)
        stream, gen = None, -1
        while True:
            with self.cv:
                while not self.stop and (self.epoch is None or (
                        gen == self.gen and self.produced >= self.requested)):
                    self.cv.wait()
                if self.stop:
                    return
                if gen != self.gen:
                    gen, epoch, state = self.gen, self.epoch, self.state
                    stream = None
                self.produced += 1
            try:
                if stream is None:
                    stream = _Stream(self.spec, self.wid, epoch, state, self.dataset)
                kind, batch, st = stream.next_batch()
                out = (kind, (batch, st))
            except KeyboardInterrupt:  # collate_fn's own: the training loop's, items kept
                out = (ANS_INTERRUPT, None)
            except Exception:  # noqa: BLE001
                out = (ANS_ERROR, _errors.wrapper(f"in stoker worker thread {self.wid} (epoch "
                                                  f"{epoch})"))
            self._arrive(gen, out)

    def start(self, epoch, state, gen):
        with self.cv:
            self._reset(gen)
            self.epoch, self.state = epoch, state
            self.produced = 0
            self.cv.notify_all()

    def top_up(self, epoch, depth):
        with self.cv:
            if self.requested < self.taken + depth:
                self.requested = self.taken + depth
                self.cv.notify_all()

    def close(self):
        with self.cv:
            self.stop = True
            self.cv.notify_all()


class _IterPass:
    """One pass over an IterableDataset: its batches, each next() a torch.profiler range named
    like the DataLoader's while a profiler records (_torchprof). Not a generator: an exception
    out of next() (a KeyboardInterrupt) leaves the pass able to go on."""

    __slots__ = ("_loader", "_gen", "_epoch", "_done", "__weakref__")

    def __init__(self, loader, gen, epoch):
        self._loader, self._gen, self._epoch, self._done = loader, gen, epoch, False

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        rng = _torchprof.range_for(self)
        try:
            if rng is None:
                return self._loader._take(self._gen, self._epoch)
            with rng:
                return self._loader._take(self._gen, self._epoch)
        except StopIteration:
            self._done = True
            raise


class PyIterLoader(Loader):
    """stoker.Loader for an IterableDataset (made by stoker.Loader itself)."""

    def __init__(self, data=None, batch_size=1, shuffle=None, seed=None, drop_last=False,
                 num_workers=None, prefetch=None, pin_memory=False, device=None, rank=None,
                 world_size=None, transforms=None, on_error="raise", trace=None, *,
                 dataset=None, sampler=None, batch_sampler=None, collate_fn=None, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None,
                 prefetch_factor=None, persistent_workers=False, pin_memory_device="",
                 in_order=None, executor="auto", reseed=True, output=None, fields=None,
                 n_threads=None, **native_only):
        self._core = None
        self._tokens = None
        self._channels = []
        self._server = None
        ds = data if data is not None else dataset
        self._torch_dataset = ds
        name = _pyworker.name(ds)
        if shuffle not in (None, False):
            raise _core.StokerInvalidError(f"DataLoader with IterableDataset: expected "
                                           f"unspecified shuffle option, but got "
                                           f"shuffle={shuffle}")
        if sampler is not None:
            raise _core.StokerInvalidError(f"DataLoader with IterableDataset: expected "
                                           f"unspecified sampler option, but got "
                                           f"sampler={sampler}")
        if batch_sampler is not None:
            raise _core.StokerInvalidError(f"DataLoader with IterableDataset: expected "
                                           f"unspecified batch_sampler option, but got "
                                           f"batch_sampler={batch_sampler}")
        if transforms is not None or any(v is not None for v in native_only.values()):
            raise _core.StokerInvalidError(f"transforms and stoker's format options apply to "
                                           f"datasets stoker reads itself, not to {name}")
        if device is not None and str(device) != "cpu":
            raise _core.StokerNotSupportedError(
                "device= with a Python dataset: pass pin_memory=True and move each batch with "
                ".to(device, non_blocking=True), as with the DataLoader")
        if executor not in _pyworker.EXECUTORS:
            raise _core.StokerInvalidError(f"executor should be one of "
                                           f"{_pyworker.EXECUTORS}, not {executor!r}")
        if n_threads is not None:  # stoker's name for the worker count (num_workers its alias)
            if num_workers is not None:
                raise _core.StokerInvalidError("n_threads= and num_workers= (its DataLoader "
                                               "alias) name one setting: pass one of them")
            num_workers = n_threads
        # The DataLoader's default, 0: one thread iterates the dataset. Not stoker's core count
        # as for a map-style dataset: each worker iterates a replica, so a dataset that does
        # not shard itself by get_worker_info() would be delivered once per worker.
        workers = 0 if num_workers is None else _torchcompat.check_int(num_workers,
                                                                        "num_workers", 0)
        _torchcompat.check_prefetch_factor(prefetch_factor, num_workers)
        _torchcompat.check_multiprocessing_context(multiprocessing_context, num_workers, executor)
        if persistent_workers and workers == 0:
            raise _core.StokerInvalidError("persistent_workers option needs num_workers > 0")
        if timeout is None or isinstance(timeout, bool) or \
                not isinstance(timeout, (int, float)) or timeout < 0:
            raise _core.StokerInvalidError("timeout option should be non-negative")
        if batch_size is not None:
            batch_size = _torchcompat.check_int(batch_size, "batch_size", 1, 2**31 - 1)
        elif drop_last:
            raise _core.StokerInvalidError("batch_size=None option disables auto-batching and "
                                           "is mutually exclusive with drop_last")
        if collate_fn is not None and _torchcompat.is_default_collate(collate_fn):
            collate_fn = None
        self.seed = _torchcompat.resolve_seed(seed, generator=generator)
        auto = executor == "auto"
        if auto:
            executor = "thread" if workers == 0 else "process"
        self._reason = ("num_workers=0: one thread iterates the dataset (get_worker_info() is "
                        "None, as in the DataLoader's main process)" if workers == 0 else
                        "an IterableDataset: each worker iterates its own replica, as with the "
                        "DataLoader" if num_workers is not None or executor == "process" else
                        "executor='thread' was asked for")
        n = max(1, workers)
        depth = int(prefetch_factor or 2)
        spec = IterSpec(ds, workers, self.seed, worker_init_fn, name, batch_size, drop_last,
                        collate_fn, bool(reseed))
        self._spec = spec
        try:
            pending = None
            if executor == "process":
                method = "spawn" if multiprocessing_context in ("spawn",) or getattr(
                    multiprocessing_context, "get_start_method", lambda: None)() == "spawn" \
                    else "fork"
                pending = _procpool.prepare_server(spec, method)
                why = pending.unpicklable() if auto else None
                if why is not None:  # "auto" takes threads where the workers cannot get it
                    pending.forget()
                    pending, executor = None, "thread"
                    self._reason = f"worker threads, not worker processes: {why}"
                    _procpool.warn_threads_instead(name, why)
            if pending is not None:
                self._server = _procpool.start_server(pending)
                self._channels = [_ProcChannel(self._server.ctl, w, timeout or 0, spec)
                                  for w in range(n)]
            else:
                _pyworker.install_worker_info_hook()
                self._channels = [_ThreadChannel(spec, w, workers, depth, timeout or 0)
                                  for w in range(n)]
                _MAPPED.add(self)
        except BaseException:
            self._shutdown()
            raise
        self.executor = executor
        self._core = True  # open (Loader's _check_open)
        self._depth = depth
        self._len_called, self._pass_yielded = None, 0  # the DataLoader's length warning
        self.batch_size, self.drop_last = batch_size, bool(drop_last)
        self.num_workers_given = workers
        self.timeout = timeout or 0
        self._restarts = 0  # worker processes restarted after a death (_restart_dead)
        self.prefetch = depth * n
        self.rank, self.world_size = 0, 1
        self.pin_memory = False
        self.output = "torch" if _torch() is not None else "numpy"
        self._epoch = 0
        self._states = [None] * n         # each worker's replica state at its last delivered batch
        self._resume = None               # a loaded state, applied at the next iter()
        self._turn = 0
        self._batches = 0
        self._gen = 0
        self._iter_live = None
        self._active = None
        self._stateful = hasattr(ds, "state_dict") and hasattr(ds, "load_state_dict")
        self.generator = None
        for attr, value in _torchcompat.dataloader_attrs(  # as the DataLoader's attributes
                ds, shuffle=False, sampler=None, batch_sampler=None, batch_size=batch_size,
                drop_last=drop_last, generator=None, collate_fn=collate_fn,
                num_workers=workers, prefetch_factor=prefetch_factor, iterable=True,
                worker_init_fn=worker_init_fn, multiprocessing_context=multiprocessing_context,
                persistent_workers=persistent_workers,
                pin_memory_device=pin_memory_device).items():
            setattr(self, attr, value)
        self.dataset_kind = "iterable"

    # ---- iteration ----

    def __iter__(self):
        self._check_open()
        if self._active is not None:  # the previous pass was abandoned: the next epoch
            self._epoch += 1
        epoch = self._epoch
        resume = self._resume
        self._resume = None
        states = resume["workers"] if resume else [None] * len(self._channels)
        exhausted = set(resume["exhausted"]) if resume else set()
        self._turn = resume["turn"] if resume else 0
        self._batches = resume["batches"] if resume else 0
        self._states = list(states)
        self._gen += 1
        self._ended_by = "iter()"
        gen = self._gen
        self._restart_dead()
        for w, ch in enumerate(self._channels):
            if w not in exhausted:
                ch.start(epoch, states[w], gen)
                ch.top_up(epoch, self._depth)
        self._active = [w not in exhausted for w in range(len(self._channels))]
        self._pass_yielded = 0
        return _IterPass(self, gen, epoch)

    def _restart_dead(self):
        """A worker process that died (a signal, the OOM killer, an exit) is reaped and a new one
        forked for the pass about to start, as the DataLoader's next pass has new workers (a
        lean fork server asks for the spec: _ProcChannel)."""
        for w, ch in enumerate(self._channels):
            if isinstance(ch, _ProcChannel) and ch.dead:
                ch.reap(self._server.ctl)
                ch.close()
                self._channels[w] = _ProcChannel(self._server.ctl, w, self.timeout,
                                                 self._spec)
                self._restarts += 1

    def _take(self, gen, epoch):
        """The pass's next batch, round-robin over the workers whose iterators go on. What it
        takes is committed only by the stores just before `return batch` (no call between them
        and the return, so no signal handler runs there); a KeyboardInterrupt anywhere before
        them leaves the answer in its channel for the next call."""
        channels = self._channels
        n = len(channels)
        while True:
            active = self._active
            if self._gen != gen:  # another pass started: one at a time
                raise superseded(self)
            if active is None:
                raise StopIteration
            if not any(active):
                self._active = None
                self._epoch = epoch + 1
                raise StopIteration
            w = self._turn
            ch = channels[w]
            if not active[w]:
                self._turn = (w + 1) % n
                continue
            ch.top_up(epoch, self._depth)
            kind, payload = ch.peek()
            if kind == ANS_BATCH:
                batch, st = _unpickle(payload) if isinstance(payload, bytes) else payload
                if self._len_called is not None and self._pass_yielded >= self._len_called:
                    self._warn_len(self._pass_yielded + 1)
                ch.taken += 1  # the commit: stores only, up to the return
                self._pass_yielded += 1
                self._states[w] = st
                self._turn = (w + 1) % n
                self._batches += 1
                return batch
            ch.taken += 1
            if kind == ANS_INTERRUPT:  # the worker's collate_fn raised KeyboardInterrupt
                raise KeyboardInterrupt
            self._turn = (w + 1) % n
            if kind == ANS_END:
                active[w] = False
            elif kind == ANS_DEAD:
                active[w] = False
                raise _errors.StokerWorkerError(ch.death(self._server.ctl))
            else:  # ANS_ERROR
                _errors.reraise(payload)

    def _warn_len(self, fetched):
        """The DataLoader's warning when an IterableDataset yields more than the __len__
        len(loader) reported (its comparison: batches of this pass against len(dataset))."""
        msg = (f"Length of IterableDataset {self._torch_dataset} was reported to be "
               f"{self._len_called} (when accessing len(dataloader)), but {fetched} samples have "
               f"been fetched. ")
        if self.num_workers_given > 0:
            msg += ("For multiprocessing data-loading, this could be caused by not properly "
                    "configuring the IterableDataset replica at each worker. Please see "
                    "https://pytorch.org/docs/stable/data.html#torch.utils.data.IterableDataset "
                    "for examples.")
        warnings.warn(msg)

    def __len__(self):
        ds = self._torch_dataset
        n = len(ds)  # TypeError without __len__, as the DataLoader's
        self._len_called = n
        if self.batch_size is None:
            return n
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    # ---- epochs and state ----

    @property
    def epoch(self):
        return self._epoch

    def set_epoch(self, epoch):
        self._epoch = _torchcompat.check_int(epoch, "epoch", 0)
        self._active = None
        self._gen += 1
        self._ended_by = "set_epoch()"

    def state_dict(self):
        if not self._stateful:
            raise _core.StokerNotSupportedError(
                f"state_dict(): {_pyworker.name(self._torch_dataset)} is an IterableDataset "
                f"without state_dict()/load_state_dict(), so its position cannot be saved; "
                f"implement them (each worker's replica is asked for its state after every "
                f"batch) or resume at an epoch boundary with set_epoch()")
        active = self._active
        if active is None:  # between epochs: the next epoch from its start
            n = len(self._channels)
            return {"format": "stoker-iterable-state", "epoch": self._epoch, "turn": 0,
                    "batches": 0, "workers": [None] * n, "drawn": [0] * n, "exhausted": []}
        # (each worker's: its replica's state and the batches it made, which its seeding needs)
        return {"format": "stoker-iterable-state", "epoch": self._epoch, "turn": self._turn,
                "batches": self._batches,
                "workers": [None if s is None else s[0] for s in self._states],
                "drawn": [0 if s is None else s[1] for s in self._states],
                "exhausted": [w for w, a in enumerate(active) if not a]}

    def load_state_dict(self, state):
        if not self._stateful:
            raise _core.StokerNotSupportedError(
                f"load_state_dict(): {_pyworker.name(self._torch_dataset)} is an "
                f"IterableDataset without state_dict()/load_state_dict()")
        if not isinstance(state, dict) or state.get("format") != "stoker-iterable-state" or \
                not isinstance(state.get("workers"), list):
            raise _core.StokerInvalidError(
                "not a state of a loader over an IterableDataset (state_dict() of a "
                "stoker.Loader over one gives it)")
        n, have = len(state["workers"]), len(self._channels)
        if n != have and not (state.get("batches") == 0 and not any(state["workers"])):
            raise _core.StokerInvalidError(  # (at an epoch's start any count resumes it)
                f"this state was taken mid-epoch with {n} worker{'s' if n != 1 else ''} and "
                f"this loader has {have}: an IterableDataset's position is each worker's "
                f"replica's, so it resumes with the same num_workers")
        if n != have:
            state = dict(state, workers=[None] * have, drawn=[0] * have, exhausted=[])
        drawn = state.get("drawn") or [0] * len(state["workers"])  # (a state from before it)
        if len(drawn) != len(state["workers"]) or not all(
                type(k) is int and k >= 0 for k in drawn):
            raise _core.StokerInvalidError(
                f"this state's \"drawn\" ({drawn!r}) is not one batch count per worker: a "
                f"corrupt or edited state?")
        state = dict(state, workers=[None if s is None and not k else (s, k)
                                     for s, k in zip(state["workers"], drawn)])
        self._epoch = int(state["epoch"])
        self._resume = state
        self._active = None
        self._gen += 1
        self._ended_by = "load_state_dict()"

    # ---- information ----

    @property
    def num_workers(self):
        return self.num_workers_given

    def info(self):
        return {"n_threads": self.num_workers_given, "prefetch": self.prefetch,
                "batch_size": self.batch_size, "rank": 0, "world_size": 1,
                "executor": self.executor, "executor_reason": self._reason,
                "start_method": self._server.method if self._server is not None else None,
                "output": self.output, "autotune": False, "device": None}

    def stats(self):
        dead = sum(1 for ch in self._channels if isinstance(ch, _ProcChannel) and ch.dead)
        return {"batches": self._batches, "python_s": None, "python_samples": None,
                "gil_share": None, "worker_deaths": self._restarts + dead,
                "worker_restarts": self._restarts}

    def worker_pids(self):
        return [ch.pid for ch in self._channels if isinstance(ch, _ProcChannel)]

    # ---- lifetime ----

    def _shutdown(self):
        for ch in self._channels:
            ch.close()
        self._channels = []
        server, self._server = self._server, None
        if server is not None:
            try:
                server.ctl.close()
            except OSError:
                pass

    def close(self):
        if self._core is None:
            return
        self._core = None
        self._shutdown()

    def __repr__(self):
        return (f"<stoker.Loader {_pyworker.name(self._torch_dataset)} (iterable), "
                f"{self.executor} executor, {len(self._channels)} workers>")

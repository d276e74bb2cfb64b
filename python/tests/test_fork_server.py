"""stoker's fork server going lean (python/stoker/_pyworker_server.py): once a loader's workers
are forked it keeps no spec, pickled or not; a worker restarted after a death gets the dataset
from the training process then (the spec sent on demand); and it stays a fork where a fresh
interpreter could not have the dataset. Each case runs in a fresh interpreter (the fork server
is one per process)."""
import pickle
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from stoker import _pyworker_server as server  # noqa: E402

from conftest import run_python  # noqa: E402

# The dataset module the child scripts import (a -c script that defines no class or function of
# its own lets the fork server go lean; one that does keeps the fork).
DATASETS = textwrap.dedent("""
    import random, threading
    import numpy as np, torch
    from stoker import _procpool

    class Big(torch.utils.data.Dataset):
        # 32 MB of array data: pickled, the spec the old lean server kept in a memfd
        def __init__(self):
            self.data = np.arange(8 << 20, dtype=np.float32).reshape(64, -1)
        def __len__(self):
            return 24
        def __getitem__(self, i):
            return float(self.data[i % 64, 0]) + i

    class LazyLock(torch.utils.data.Dataset):
        # opens a handle that does not pickle on first use (as h5py datasets open their file),
        # and draws random numbers (so executor="auto" picks processes after its probe)
        def __init__(self):
            self.lock = None
        def __len__(self):
            return 24
        def __getitem__(self, i):
            if self.lock is None:
                self.lock = threading.Lock()
            random.random()
            return i

    class BigLazyLock(LazyLock):
        # LazyLock with 32 MB of array data: more than a lean fork server keeps
        def __init__(self):
            super().__init__()
            self.data = np.zeros(8 << 20, dtype=np.float32)

    class LoadsOnlyHere(torch.utils.data.Dataset):
        # pickles, and unpickling it fails in any other process (a lean fork server, say); draws
        # random numbers (so executor="auto" picks processes after its probe)
        def __init__(self):
            import os
            self.pid = os.getpid()
        def __setstate__(self, state):
            import os
            if state["pid"] != os.getpid():
                raise RuntimeError("this dataset loads only in the process that made it")
            self.__dict__.update(state)
        def __len__(self):
            return 24
        def __getitem__(self, i):
            random.random()
            return i

    class LoadsAfterMarker(LoadsOnlyHere):
        # unpickling it elsewhere waits until the file `marker` exists (at most 60 s, then fails)
        def __init__(self, marker):
            super().__init__()
            self.marker = marker
        def __setstate__(self, state):
            import os, time
            for _ in range(6000):
                if state["pid"] == os.getpid() or os.path.exists(state["marker"]):
                    self.__dict__.update(state)
                    return
                time.sleep(0.01)
            raise RuntimeError("the marker never came")

    class Sharded(torch.utils.data.IterableDataset):
        # 0..29, each worker process its share (by get_worker_info())
        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            return iter(range(info.id, 30, info.num_workers))

    class ShardedKilledOnce(torch.utils.data.IterableDataset):
        # Sharded whose worker kills itself (SIGKILL) at item 13, the first time (a marker file)
        def __init__(self, marker):
            self.marker = marker
        def __iter__(self):
            import os, signal
            info = torch.utils.data.get_worker_info()
            for i in range(info.id, 30, info.num_workers):
                if i == 13 and not os.path.exists(self.marker):
                    open(self.marker, "w").close()
                    os.kill(os.getpid(), signal.SIGKILL)
                yield i

    SENT = []

    def count_sends():
        # wraps _procpool.spec_sender: how many times the training process sent the spec
        orig = _procpool.spec_sender
        def counting(*args):
            send = orig(*args)
            def wrapped(fd):
                SENT.append(fd)
                return send(fd)
            return wrapped
        _procpool.spec_sender = counting

    def memfds(pid):
        import os
        out = []
        for f in os.listdir("/proc/%d/fd" % pid):
            try:
                link = os.readlink("/proc/%d/fd/%s" % (pid, f))
            except OSError:
                continue
            if "memfd:" in link:
                out.append(link)
        return out

    def rss_kb(pid):
        return int([l for l in open("/proc/%d/status" % pid)
                    if l.startswith("VmRSS")][0].split()[1])

    def one_pass(loader, catch):
        # one pass: the values delivered and the messages of the errors (of type catch) raised,
        # going on after each
        got, errors, it = [], [], iter(loader)
        while True:
            try:
                got += [v.item() for v in next(it)]
            except StopIteration:
                return got, errors
            except catch as e:
                errors.append(str(e))

    def alive_children():
        # this process's children that have not exited
        import os
        n = 0
        for p in os.listdir("/proc"):
            try:
                st = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            n += int(st[1]) == os.getpid() and st[0] != "Z"
        return n

    def first_loader_then_lean():
        # a map-style loader on worker processes (printing its epoch's size), then the fork
        # server lean (printing so): (that loader, the fork server)
        import stoker
        first = stoker.Loader(Big(), batch_size=4, num_workers=2, executor="process")
        fs = _procpool._FS
        print("first", sum(len(b) for b in first))
        fs.forget(0)   # answered after the exec that follows the last worker's fork
        print("lean", fs.is_lean)
        return first, fs

    def epochs_until_a_death(loader, n):
        # the death is found when a sample goes to the killed worker: an epoch whose samples
        # all went to the other one ends whole, so go on to the next (at most 50)
        import stoker
        for epoch in range(50):
            got, errors = one_pass(loader, stoker.StokerIOError)
            if errors or len(got) != n:
                return got, errors
        return got, errors
""")


def assert_prints(code, want):
    """Runs `code` in a fresh interpreter (the fork server is one per process): it exits 0 and
    the first lines it prints are `want`."""
    r = run_python(code, timeout=240)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:len(want)] == want, (r.stdout, r.stderr)


def script(tmp_path, body):
    (tmp_path / "fsds.py").write_text(DATASETS)
    return f"import sys\nsys.path.insert(0, {str(tmp_path)!r})\n" + textwrap.dedent(body)


def test_lean_fork_server_keeps_no_spec_and_a_restart_gets_it_on_demand(tmp_path):
    code = script(tmp_path, """
        import os, signal
        import fsds, stoker
        from stoker import _procpool
        fsds.count_sends()
        ds = fsds.Big()
        loader = stoker.Loader(ds, batch_size=4, num_workers=2, executor="process")
        fs = _procpool._FS
        want = sorted(float(ds.data[i % 64, 0]) + i for i in range(24))
        print("first", sorted(float(v) for b in loader for v in b) == want, len(fsds.SENT))
        fs.forget(0)   # answered after the exec that follows the last worker's fork, if any
        print("lean", fs.is_lean)
        old = loader.worker_pids()
        os.kill(old[0], signal.SIGKILL)
        got, errors = fsds.epochs_until_a_death(loader, 24)
        print("killed", len(errors) == 1 and "signal 9" in errors[0], len(got) == 20)
        print("after", sorted(float(v) for b in loader for v in b) == want,
              loader.worker_pids()[0] not in old, loader.stats()["worker_restarts"])
        # the restarted worker got the spec from this process, once; the lean server (which
        # answered the restart, so it has long read and closed its state) holds no memfd and
        # less memory than the dataset's 32 MB of data (it never unpickled it)
        print("sent", len(fsds.SENT), fs.is_lean, fsds.memfds(fs.pid), fsds.rss_kb(fs.pid) < 32768)
    """)
    assert_prints(code, ["first True 0", "lean True", "killed True True", "after True True 1",
                         "sent 1 True [] True"])


@pytest.mark.parametrize("executor", ["auto", "process"])
def test_a_later_loader_whose_dataset_the_lean_server_cannot_load(tmp_path, executor):
    # a later loader's constructor does not wait while the lean server unpickles its dataset
    # (that may import torch: most of a second); the server's answer is read by the C pool
    # before its first SPAWN answer, so a dataset it cannot load fails the loader's samples
    # (or, where the constructor's probe runs in worker process 0, the constructor) with the
    # server's reason, not a hang, and the loader closes
    code = script(tmp_path, f"""
        import fsds, stoker
        first, fs = fsds.first_loader_then_lean()
        why = "this dataset loads only in the process that made it"
        try:
            bad = stoker.Loader(fsds.LoadsOnlyHere(), batch_size=4, num_workers=2,
                                executor={executor!r})
        except Exception as e:
            print("failed", why in str(e), type(e).__name__)
        else:
            got, errors = fsds.one_pass(bad, stoker.StokerIOError)
            print("failed", len(errors) > 0 and all(why in e for e in errors), bad.executor)
            bad.close()
        print("first again", sum(len(b) for b in first))
    """)
    assert_prints(code, ["first 24", "lean True", "failed True " +
                         ("process" if executor == "auto" else "StokerWorkerError"),
                         "first again 24"])


def test_a_later_loaders_constructor_does_not_wait_for_the_lean_server(tmp_path):
    # the lean server can unpickle this dataset only once the marker exists, which this script
    # makes after the constructor returned: a constructor that waited for the server would
    # wait for the marker (and get the server's failure after 60 s)
    marker = str(tmp_path / "marker")
    code = script(tmp_path, f"""
        import fsds, stoker
        first, fs = fsds.first_loader_then_lean()
        later = stoker.Loader(fsds.LoadsAfterMarker({marker!r}), batch_size=4, num_workers=2)
        open({marker!r}, "w").close()
        print("later", sorted(int(v) for b in later for v in b) == list(range(24)),
              later.executor)
    """)
    assert_prints(code, ["first 24", "lean True", "later True process"])


def test_a_later_loader_in_a_single_threaded_process_gets_a_fresh_fork(tmp_path):
    # once the first loader is closed the process is single-threaded again: a later loader's
    # workers come from a fresh fork of it (the dataset inherited, its modules imported), not
    # from the lean server, which would unpickle it importing torch and the dataset's modules
    # again (about a second for each later loader of a torchvision dataset). This dataset
    # loads only in the process that made it: unpickled by the lean server, it failed. The
    # replaced servers end once no loader needs them. (The script defines no function: one
    # that does keeps its fork server fat, which is not replaced.)
    code = script(tmp_path, """
        import time, fsds, stoker
        first, fs = fsds.first_loader_then_lean()
        first.close()
        for k in range(3):
            loader = stoker.Loader(fsds.LoadsOnlyHere(), batch_size=4, num_workers=2,
                                   executor="process")
            print(k, loader.info()["start_method"],
                  sorted(int(v) for b in loader for v in b) == list(range(24)))
            loader.close()
        for _ in range(1200):  # the replaced servers exit once their socket is closed (a
            if fsds.alive_children() <= 1:  # safety cap of 60 s, not a verdict: a loaded
                break                       # machine only makes it take longer)
            time.sleep(0.05)
        print("fork servers", fsds.alive_children())
    """)
    assert_prints(code, ["first 24", "lean True", "0 fork True", "1 fork True", "2 fork True",
                         "fork servers 1"])


def test_an_iterable_loader_after_the_server_went_lean(tmp_path):
    # after a map-style loader made the fork server lean, an iterable loader on worker processes
    # is served by the lean server: its spec goes with the SERVE request (pickled by this
    # process), so its workers are forked with it and none asks for it (no WANTS_SPEC: the
    # iterable's spawns are never flagged THEN_LEAN); every item once, sharded by
    # get_worker_info(), two epochs
    code = script(tmp_path, """
        import fsds, stoker
        from stoker import _procpool
        fsds.count_sends()
        first = stoker.Loader(fsds.Big(), batch_size=4, num_workers=2, executor="process")
        fs = _procpool._FS
        print("first", sum(len(b) for b in first), len(fsds.SENT))
        fs.forget(0)
        print("lean", fs.is_lean)
        it = stoker.Loader(fsds.Sharded(), batch_size=3, num_workers=2)
        got = [int(v) for b in it for v in b]
        print("iterable", sorted(got) == list(range(30)), len(got), len(fsds.SENT), it.executor,
              fs.is_lean)
        print("again", sorted(int(v) for b in it for v in b) == list(range(30)), len(fsds.SENT))
    """)
    assert_prints(code, ["first 24 0", "lean True", "iterable True 30 0 process True",
                         "again True 0"])


def test_an_iterable_worker_killed_after_the_server_went_lean_is_restarted(tmp_path):
    # an iterable loader's worker process killed by a signal: the pass raises naming the signal,
    # and the next pass has a new worker (as the DataLoader's next pass has new workers; before,
    # every later pass raised BrokenPipeError). Here the fork server went lean in between (a
    # map-style loader's start), so the new worker is forked bare and asks for the spec, which
    # the training process pickles and sends (one send)
    code = script(tmp_path, f"""
        import fsds, stoker
        from stoker import _procpool
        fsds.count_sends()
        it = stoker.Loader(fsds.ShardedKilledOnce({str(tmp_path / "marker")!r}), batch_size=3,
                           num_workers=2)
        big = stoker.Loader(fsds.Big(), batch_size=4, num_workers=2, executor="process")
        fs = _procpool._FS
        fs.forget(0)
        print("lean", fs.is_lean, len(fsds.SENT))
        got, errors = fsds.one_pass(it, RuntimeError)
        print("pass1", len(errors), "signal 9" in errors[0], "restarted" in errors[0],
              13 not in got, len(got) == len(set(got)), set(got) < set(range(30)))
        print("pass2", sorted(int(v) for b in it for v in b) == list(range(30)), len(fsds.SENT),
              it.stats()["worker_restarts"], it.stats()["worker_deaths"])
        print("pass3", sorted(int(v) for b in it for v in b) == list(range(30)), len(fsds.SENT))
    """)
    assert_prints(code, ["lean True 0", "pass1 1 True True True True True", "pass2 True 1 1 1",
                         "pass3 True 1"])


def test_restart_names_a_dataset_that_no_longer_pickles_then_recovers(tmp_path):
    # the spec is pickled by the training process when a worker must be restarted: a dataset
    # that no longer pickles then is a named error for that worker's samples (the other worker
    # goes on), and once it pickles again the worker is restarted
    code = script(tmp_path, """
        import os, signal, threading
        import fsds, stoker
        from stoker import _procpool
        ds = fsds.Big()
        # (persistent: the workers are kept when the dataset changes, so the killed one is
        # restarted from the dataset as it is then, which is what this test is about)
        loader = stoker.Loader(ds, batch_size=4, num_workers=2, executor="process",
                               persistent_workers=True)
        fs = _procpool._FS
        print("first", len([v for b in loader for v in b]))
        fs.forget(0)
        ds.handle = threading.Lock()
        os.kill(loader.worker_pids()[0], signal.SIGKILL)
        got, errors = fsds.epochs_until_a_death(loader, 24)
        print("died", bool(errors) and "signal 9" in errors[0],
              len(got) + 4 * len(errors) == 24)   # (a failed sample fails its batch of 4)
        # worker 0's samples now fail, naming why (its restart); worker 1's go on
        got, errors = fsds.epochs_until_a_death(loader, 24)
        print("named", bool(errors) and all("sending it the dataset failed" in e and "lock" in e
                           for e in errors), len(got) + 4 * len(errors) == 24)
        del ds.handle
        want = sorted(float(ds.data[i % 64, 0]) + i for i in range(24))
        stale = []  # batches prepared ahead before the del failed as above: said, not lost
        for epoch in range(50):   # a sample of worker 0 restarts it
            got, errors = fsds.one_pass(loader, stoker.StokerIOError)
            stale += errors
            got = sorted(float(v) for v in got)
            if loader.stats()["worker_restarts"] and not errors:
                break
        print("recovered", got == want, loader.stats()["worker_restarts"],
              all("sending it the dataset failed" in e and "lock" in e for e in stale))
    """)
    assert_prints(code, ["first 24", "died True True", "named True True", "recovered True 1 True"])


@pytest.mark.parametrize("cls, lean", [("LazyLock", True), ("BigLazyLock", False)])
def test_a_probe_here_that_leaves_an_unpicklable_handle(tmp_path, cls, lean):
    # executor="auto" runs the first samples in the training process: its copy of the dataset
    # then holds a lock (an h5py file, in the articles) and no longer pickles, while the fork
    # server's copy, which the workers inherit, does. The fork server pickles its own copy and
    # goes lean keeping it (a worker restarted from this process's copy could not be), or, when
    # that copy is larger than LEAN_KEEP_MAX (4 MB), stays a fork; either way a killed worker is
    # restarted with the dataset as the first workers had it
    code = script(tmp_path, f"""
        import os, signal
        import fsds, stoker
        from stoker import _procpool
        ds = fsds.{cls}()
        loader = stoker.Loader(ds, batch_size=4, num_workers=2)
        print("chosen", loader.executor, ds.lock is not None)
        _procpool._FS.forget(0)   # answered after the exec that would follow the last fork
        old = loader.worker_pids()
        os.kill(old[0], signal.SIGKILL)
        got, errors = fsds.epochs_until_a_death(loader, 24)
        print("killed", len(errors) == 1 and "signal 9" in errors[0])
        print("after", sorted(int(v) for b in loader for v in b) == list(range(24)),
              loader.worker_pids()[0] not in old, _procpool._FS.is_lean)
    """)
    assert_prints(code, ["chosen process True", "killed True", f"after True True {lean}"])


def test_a_script_that_defines_code_and_cannot_be_imported_again_keeps_the_fork(tmp_path):
    # a later loader's dataset may be a class of the main module, which a fresh interpreter
    # could not load when that module cannot be imported again (here a -c script)
    code = script(tmp_path, """
        import fsds, stoker
        from stoker import _procpool
        class Local(fsds.LazyLock):   # defined in the -c script, used by a later loader
            pass
        loader = stoker.Loader(fsds.Big(), batch_size=4, num_workers=2, executor="process")
        _procpool._FS.forget(0)
        local = stoker.Loader(Local(), batch_size=4, num_workers=2, executor="process")
        _procpool._FS.forget(0)
        print(_procpool._FS.is_lean, sorted(int(v) for b in local for v in b) == list(range(24)))
    """)
    r = run_python(code, timeout=240)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False True", (r.stdout, r.stderr)


def test_check_skips_tensor_and_array_data_and_notes_the_main_module():
    # the fork server's check pickles to nowhere without the bulk data (so it costs what the
    # objects cost, not their bytes), and says whether anything refers to __main__
    bulk = {"t": torch.zeros(4 << 20), "a": np.zeros(4 << 20, dtype=np.float32),
            "objects": np.array([1, "x"], dtype=object), "labels": list(range(10))}
    c = server._Checker()
    c.dump(bulk)
    assert c.sink.n < 64 << 10 and not c.names_main
    assert server._check(bulk) == (True, False)
    assert len(pickle.dumps(bulk)) > 32 << 20  # (what a full pickle would have written)
    assert server._check({"lock": __import__("threading").Lock()})[0] is False
    Main = type("Main", (), {"__module__": "__main__"})
    main_mod = sys.modules["__main__"]
    setattr(main_mod, "Main", Main)
    try:
        assert server._check([Main()]) == (True, True)
        assert server._check([Main]) == (True, True)
    finally:
        delattr(main_mod, "Main")


def test_a_process_running_threads_spawns_its_fork_server_only_for_processes(tmp_path):
    """In a process already running threads (a notebook kernel), "auto" started a fresh
    interpreter as the fork server before its probe, ~0.9 s and ~230 MB kept even when it chose
    threads; it now starts one only when processes are chosen or asked for. That interpreter
    runs in a session of its own: a Ctrl-C at the terminal (sent to the whole foreground process
    group) ended it while it imported torch, and later loaders found it gone."""
    (tmp_path / "sleepy_ds.py").write_text(textwrap.dedent("""
        import time
        import torch
        from torch.utils.data import Dataset
        class Sleepy(Dataset):
            def __len__(self): return 8
            def __getitem__(self, i):
                time.sleep(0.001)
                return torch.tensor([i])
        """))
    r = run_python(textwrap.dedent(f"""
        import os, sys, threading, time
        sys.path.insert(0, {str(tmp_path)!r})
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
        import stoker
        from stoker import _procpool
        from sleepy_ds import Sleepy
        a = stoker.Loader(Sleepy(), batch_size=4, num_workers=2)
        print(a.info()["executor"], _procpool._FS is None)
        b = stoker.Loader(Sleepy(), batch_size=4, num_workers=2, executor="process")
        fs = _procpool._FS
        print(fs.how, os.getsid(fs.pid) != os.getsid(0), sum(len(x) for x in b))
        """))
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["thread", "True", "spawn", "True", "8"], (r.stdout, r.stderr)

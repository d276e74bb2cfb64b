"""Shared fixtures: small .stk datasets written with stoker's own writer, whose every value is a
known function of the record number, so tests can check a batch against the records written."""
import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest

import stoker

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PYTHONPATH = os.path.dirname(os.path.dirname(stoker.__file__))  # the dir holding stoker/

MAIN_N = 1000
SMALL_N = 100

# A child process's time limit: most of the per-test limit (scripts/run_pytest.sh's
# STK_PYTEST_TIMEOUT, default 300 s, which `make test-under-load` triples), so that a child slowed
# by a loaded machine is still waited for and a hung one fails by name before pytest-timeout ends
# the whole run. A hang guard, never a verdict on speed.
CHILD_LIMIT = 0.8 * float(os.environ.get("STK_PYTEST_TIMEOUT") or 300)

FIELDS = {
    "data": "bytes",
    "label": "int64",
    "score": "float32",
    "vec": ("float32", (2, 3)),
    "half": ("float16", (4,)),
    "bf": ("bfloat16", (2,)),
}


def payload(i):
    """Bytes of record i: 1 + (i*37 % 300) bytes, byte k = (i*131 + k) & 255."""
    n = 1 + (i * 37) % 300
    return ((np.arange(n, dtype=np.int64) + i * 131) & 255).astype(np.uint8).tobytes()


def bf16_bits(values):
    """float32 values -> bfloat16 bit patterns (truncation; the values used are exact)."""
    return (np.asarray(values, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def record(i):
    return {
        "data": payload(i),
        "label": i * 7,
        "score": i / 4.0,
        "vec": np.arange(6, dtype=np.float32).reshape(2, 3) + i,
        "half": (np.arange(4) + i % 100).astype(np.float16),
        "bf": bf16_bits([i % 64, -(i % 32)]),
    }


def write_dataset(directory, n, shards=1, fields=FIELDS, make=record):
    os.makedirs(directory, exist_ok=True)
    per = -(-n // shards)
    for s in range(shards):
        lo, hi = s * per, min(n, (s + 1) * per)
        stoker.write_shard(os.path.join(directory, f"shard-{s:05d}.stk"), fields,
                           (make(i) for i in range(lo, hi)), metadata={"test": True})
    return str(directory)


@pytest.fixture(scope="session")
def ds_main(tmp_path_factory):
    """1000 records over 3 shards (a directory)."""
    return write_dataset(tmp_path_factory.mktemp("main"), MAIN_N, shards=3)


@pytest.fixture(scope="session")
def ds_small(tmp_path_factory):
    """100 records, one shard (the file itself)."""
    d = write_dataset(tmp_path_factory.mktemp("small"), SMALL_N, shards=1)
    return os.path.join(d, "shard-00000.stk")


def indices(batch):
    return np.asarray(batch["index"]).tolist()


def run_epoch(loader):
    """Indices of one pass, batch by batch."""
    return [indices(b) for b in loader]


def flat(batches):
    return [i for b in batches for i in b]


def run_python(code, timeout=CHILD_LIMIT, env=None, **kw):
    """Run `code` in a fresh Debian python3 with stoker importable; returns CompletedProcess."""
    e = dict(os.environ)
    e["PYTHONPATH"] = PYTHONPATH + os.pathsep + e.get("PYTHONPATH", "")
    if env:
        e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=e, **kw)


# ---- per-test time limit (scripts/run_pytest.sh passes --timeout, --timeout_method=thread) ----
# pytest-timeout's thread method dumps every thread's stack and ends the run, which catches a test
# stuck in C with the GIL released; this hook makes it say first which test ran past the limit.
@pytest.hookimpl(tryfirst=True, optionalhook=True)  # optional: pytest-timeout may be missing
def pytest_timeout_set_timer(item, settings):
    if settings.method != "thread" or settings.timeout <= 0:
        return None  # pytest-timeout's own handling
    import pytest_timeout

    def expired():
        msg = "\nTIMEOUT %s: still running after %g s\n" % (item.nodeid, settings.timeout)
        sys.stderr.write(msg)
        sys.stderr.flush()
        pytest_timeout.timeout_timer(item, settings.timeout)

    timer = threading.Timer(settings.timeout, expired)
    timer.name = "timeout %s" % item.nodeid
    timer.daemon = True

    def cancel():
        timer.cancel()
        timer.join()

    item.cancel_timeout = cancel
    timer.start()
    return True


def torchrun(script_text, nproc, args, tmp_path, timeout=CHILD_LIMIT):
    """Run `script_text` under torch.distributed.run with `nproc` local ranks (a clean rendezvous
    environment, one OMP thread each); assert it succeeded and return the CompletedProcess."""
    script = tmp_path / "torchrun_script.py"
    script.write_text(script_text)
    env = dict(os.environ, PYTHONPATH=PYTHONPATH, OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--redirects", "2", "--tee", "2",
           "--standalone", "--nnodes", "1", "--nproc_per_node", str(nproc), str(script),
           *[str(a) for a in args]]
    # torchrun's own rendezvous (its TCPStore) can drop a connection on a heavily loaded machine
    # before any rank has run the script ("Broken pipe", RendezvousConnectionError): that is
    # torchrun failing to start, not the script failing, so it is tried once more. Any other
    # failure is the test's.
    for attempt in (1, 2):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                           cwd=str(tmp_path))
        out = r.stdout + r.stderr
        if r.returncode == 0 or attempt == 2 or not _RENDEZVOUS_FAILURE.search(out):
            break
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


_RENDEZVOUS_FAILURE = re.compile(r"Rendezvous(Connection|Timeout)Error|"
                                 r"(?s:rendezvous.*(Broken pipe|Connection reset))", re.I)


# ---- the tests whose verdict involves threads, processes, signals or timing (issue 30) ----
# `make test-under-load` runs these (pytest -m timing) beside a CPU load of 2 busy processes per
# CPU, REPEAT=N times in a row, so that a timing assumption fails there rather than at random in
# CI. A file maps to None (every test in it) or to substrings of the names of the tests it
# selects. A test can also carry @pytest.mark.timing itself. Chosen: each test that races
# threads or processes against each other, sends signals, waits with a time limit or measures
# time (and the virtual-clock redesigns of the latter), so that one run takes minutes; not the
# ones whose time is process start-up (torchrun and gloo jobs: test_ranks.py, the torchrun cache
# job; spawned DataLoader workers; a fork beside running threads) and whose verdicts keep a
# margin of a different order or do not involve time (docs/reliability.md lists them). Keep a
# new test of the first kind on this list.
TIMING_TESTS = {
    "test_interrupt.py": None,        # a signal never costs a batch; state_dict from a thread
    "test_process.py": ("threads_end", "ctrl_c"),
    "test_profile.py": ("wait_for_iter", "stats_fields", "trace", "autotune",
                        "timed_dataset_counts_every_call_in_the_worker_processes[None]",
                        "stoker_loader_with_slow_step", "any_iterable"),
    "test_pydataset.py": ("times_out", "ctrl_c", "stuck", "killed"),
    "test_remote_transport.py": ("in_flight", "read_ahead", "coalescing"),
    "test_loader.py": ("thread", "one_consumer", "deadlock"),
    "test_firstcontact.py": ("timeout", "thread"),
    "test_batchmap.py": ("threads", "close_while"),
    "test_remote.py": ("loaders_race", "server_stops"),
    "test_remote_formats.py": ("read_ahead", "cached", "damaged", "removed_while"),
}


def pytest_configure(config):
    config.addinivalue_line("markers", "timing: the verdict involves threads, processes, signals "
                            "or timing (make test-under-load runs these; conftest.TIMING_TESTS)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        names = TIMING_TESTS.get(os.path.basename(str(item.fspath)), ())
        if names is None or any(n in item.name for n in names):
            item.add_marker(pytest.mark.timing)


def open_memfds(prefix):
    """This process's open descriptors of memory files whose name starts with `prefix` (stoker's
    memory files: /memfd:<name>), as {fd: path}."""
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("/memfd:" + prefix):
            out[int(fd)] = link
    return out

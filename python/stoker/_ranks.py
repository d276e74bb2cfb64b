"""stoker.profile across ranks: which rank waits on data, and who waits on it.

In a data-parallel job every rank meets the others at each collective (the gradient
all-reduce), so one rank whose loader is slow makes every rank slow, and each rank's own profile
shows the time in the step, not in loading. Under torch.distributed (an initialised process
group) or torchrun's environment (RANK and WORLD_SIZE set, WORLD_SIZE > 1), each rank's Profile
sends its measurements to the others when its loop ends:

* through the process group (all_gather_object) when there is one;
* otherwise through files in the directory named by STOKER_DOCTOR_DIR, which the ranks share
  (each writes <run>-<round>-rank<r>.json and reads the others', waiting up to
  STOKER_DOCTOR_TIMEOUT seconds, default 300).

The pieces here: where this process stands (`context`), the timing of the collectives the step
calls (`install_collective_timer`: torch.distributed's all_reduce & co. wrapped, so that the
time a rank spends in them, which is the time it waits for the slowest rank plus the transfer,
is measured), the exchange (`gather`), the decision (`judge`, pure: synthetic tables in the
tests) and the merged Perfetto trace (`merge_traces`). _profile.py drives them; this module
never imports _profile or _advice.
"""
import json
import os
import socket
import statistics
import sys
import time

from . import _core

DATA_BOUND_SHARE = _core.DIAG_DATA_BOUND_SHARE

# torch.distributed calls that block until every rank has arrived (when async_op is False)
_COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
                "reduce_scatter_tensor", "broadcast", "reduce", "all_to_all",
                "all_to_all_single", "barrier")
_MAX_EVENTS = 20000   # loop events kept per rank for the merged trace

# Seconds spent in the wrapped collectives by this process, and their (start, duration) spans
# (perf_counter), appended by the wrappers; the Profile reads deltas around each step.
collective_s = 0.0
collective_spans = []
_installed = False
_depth = 0            # > 0 inside a wrapped call (a collective calling another counts once)
_round = 0            # exchanges so far in this process (file names; the same on every rank)


def context():
    """(rank, world, how): how the ranks exchange results: "group" (torch.distributed is
    initialised), "files" (torchrun's environment and STOKER_DOCTOR_DIR), "none" (world > 1
    but no way to reach the others) or None (a single process)."""
    dist = _dist()
    if dist is not None:
        return dist.get_rank(), dist.get_world_size(), "group"
    rank, world = _core.env_rank()
    if world <= 1:
        return 0, 1, None
    return rank, world, "files" if os.environ.get("STOKER_DOCTOR_DIR") else "none"


def _dist(min_world=2):
    """torch.distributed when initialised with at least min_world ranks, else None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    dist = getattr(torch, "distributed", None)
    try:
        if dist is not None and dist.is_available() and dist.is_initialized() and \
                dist.get_world_size() >= min_world:
            return dist
    except (RuntimeError, ValueError):
        pass
    return None


def shutdown():
    """Destroy the default process group, if the script stoker.doctor ran initialised one and is
    over. With gloo, a process that exits with its group alive can abort at interpreter exit
    ("terminate called without an active exception": the group's threads are destroyed
    unjoined), which is what torch.distributed's docs ask destroy_process_group for. Only called
    when the script ended cleanly on this rank: after a failure the other ranks may still be in
    a collective."""
    dist = _dist(min_world=1)
    try:
        if dist is not None:
            dist.destroy_process_group()
    except (RuntimeError, ValueError):
        pass


def install_collective_timer():
    """Wrap torch.distributed's blocking collectives (once per process) so that the time in
    them is measured. Code that looks them up at call time (dist.all_reduce(...)) is seen;
    DDP's own all-reduce runs inside backward and is not (its wait is then estimated)."""
    global _installed
    torch = sys.modules.get("torch")
    if _installed or torch is None or not hasattr(torch, "distributed"):
        return
    dist = torch.distributed
    for name in _COLLECTIVES:
        fn = getattr(dist, name, None)
        if fn is not None and not getattr(fn, "_stoker_timed", False):
            setattr(dist, name, _timed(fn))
    _installed = True


def _timed(fn):
    def wrapper(*args, **kw):
        global collective_s, _depth
        if kw.get("async_op") or _depth:
            return fn(*args, **kw)
        _depth += 1
        t0 = time.perf_counter()
        try:
            return fn(*args, **kw)
        finally:
            dt = time.perf_counter() - t0
            _depth -= 1
            collective_s += dt
            if len(collective_spans) < _MAX_EVENTS:
                collective_spans.append((t0, dt))
    wrapper._stoker_timed = True
    wrapper.__wrapped__ = fn
    wrapper.__name__ = getattr(fn, "__name__", "collective")
    wrapper.__doc__ = getattr(fn, "__doc__", None)
    return wrapper


def host():
    return socket.gethostname()


# ---- the exchange ----

def gather(obj, how, rank, world):
    """Every rank's `obj` (JSON-serialisable), indexed by rank; None for a rank that did not
    answer (files: by the timeout). Every rank must call it the same number of times."""
    global _round
    _round += 1
    if how == "group":
        out = [None] * world
        _dist().all_gather_object(out, obj)
        return out
    if how == "files":
        return _gather_files(obj, rank, world, _round)
    return [obj if r == rank else None for r in range(world)]


def _run_id():
    for key in ("TORCHELASTIC_RUN_ID", "MASTER_PORT"):
        v = os.environ.get(key)
        if v:
            return "".join(c if c.isalnum() or c in "-_." else "_" for c in v)
    return "run"


def _gather_files(obj, rank, world, rnd):
    d = os.environ["STOKER_DOCTOR_DIR"]
    os.makedirs(d, exist_ok=True)
    name = lambda r: os.path.join(d, f"stoker-{_run_id()}-{rnd}-rank{r}.json")  # noqa: E731
    tmp = name(rank) + f".tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump({"rank": rank, "value": obj}, f)   # a None value still marks the arrival
    os.replace(tmp, name(rank))   # readers see the whole file or none
    timeout = float(os.environ.get("STOKER_DOCTOR_TIMEOUT", "300"))
    got = [None] * world
    t0 = time.monotonic()
    while True:
        for r in range(world):
            if got[r] is None and os.path.exists(name(r)):
                try:
                    with open(name(r)) as f:
                        got[r] = json.load(f)
                except (OSError, ValueError):
                    pass
        if all(x is not None for x in got) or time.monotonic() - t0 > timeout:
            return [None if x is None else x["value"] for x in got]
        time.sleep(0.02)


# ---- the decision ----

def estimate_collective(ranks):
    """Fill `collective_ms` of the ranks that measured none: in a step that synchronises the
    ranks, a rank waits there for the slowest one's data, so its wait is estimated as the
    longest data wait of any rank minus its own (stated as an estimate)."""
    known = [r for r in ranks if r is not None]
    worst = max((r["wait_ms"] for r in known), default=0.0)
    for r in known:
        if r.get("collective_ms") is None:
            r["collective_ms"] = max(0.0, worst - r["wait_ms"])
            r["collective_source"] = "estimate"
    return ranks


def judge(ranks):
    """(straggler, verdict) for a table of ranks (dicts with rank, host, wait_share,
    data_bound; None for a rank that did not report). The straggler is the rank whose data wait
    holds the job back: data-bound, and waiting for data a larger share of its time than the
    other ranks by more than the data-bound share itself (so ranks that all wait alike, a
    job-wide data bound, have no straggler). Pure: the tests feed it synthetic tables."""
    known = [r for r in ranks if r is not None]
    missing = [i for i, r in enumerate(ranks) if r is None]
    note = (f" (rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} did not "
            f"report)") if missing else ""
    if not known:
        return None, "no rank reported" + note
    if len(known) == 1 and len(ranks) > 1:
        return None, (f"only rank {known[0]['rank']} is seen: no process group and no "
                      f"STOKER_DOCTOR_DIR (or the other ranks did not report)" + note)
    top = max(known, key=lambda r: r["wait_share"])
    others = [r["wait_share"] for r in known if r is not top]
    rest = statistics.median(others) if others else 0.0
    bound = [r for r in known if r["data_bound"]]
    if top["data_bound"] and others and top["wait_share"] - rest > DATA_BOUND_SHARE:
        coll = [r for r in known if r is not top]
        measured = all(r.get("collective_source") == "measured" for r in coll)
        waits = ", ".join(f"rank {r['rank']} {r.get('collective_ms', 0):.1f} ms"
                          for r in coll)
        how = "measured" if measured else ("estimated: no collective was timed; it assumes "
                                           "the step synchronises the ranks")
        return top["rank"], (
            f"rank {top['rank']} (host {top['host']}) waits for data "
            f"{100 * top['wait_share']:.0f}% of the time; the other ranks wait for it in the "
            f"all-reduce ({waits} per step, {how})" + note)
    if bound:
        names = ", ".join(str(r["rank"]) for r in bound)
        every = len(bound) == len(known)
        return None, (f"{'every rank' if every else 'ranks ' + names} "
                      f"wait{'s' if every else ''} for data alike (up to "
                      f"{100 * top['wait_share']:.0f}% of the time): no straggler; the loading "
                      f"is too slow on all of them" + note)
    return None, (f"no rank is data-bound (at most {100 * top['wait_share']:.1f}% waiting, "
                  f"rank {top['rank']}): no straggler" + note)


# ---- the merged trace ----

def merge_traces(ranks):
    """One Chrome/Perfetto trace of every rank's loop: a process track per rank ("rank 1
    (host h)") with its waits for data, steps and collectives on a shared wall clock."""
    events = []
    for r in ranks:
        if r is None:
            continue
        pid = r["rank"]
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"name": f"rank {pid} ({r['host']})"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"sort_index": pid}})
        for tid, track in ((0, "loop"), (1, "collectives")):
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                           "args": {"name": track}})
        for name, ts, dur in r.get("events", ()):
            events.append({"name": name, "ph": "X", "pid": pid,
                           "tid": 1 if name == "collective" else 0,
                           "ts": round(ts * 1e6, 1), "dur": round(dur * 1e6, 1)})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_trace(path, ranks):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(merge_traces(ranks), f)
    os.replace(tmp, path)

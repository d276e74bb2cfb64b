"""python3 -m stoker.doctor [--json-out PATH] [--steps N] [--warmup W] [--no-advice] [--trace PATH]
                           [--all-ranks] SCRIPT [ARGS...]

Runs a training script unchanged under stoker.profile: every PyTorch DataLoader and
stoker.Loader the script iterates is timed (each next() is waiting, the time between batches
is the step). After N steps of the busiest loader (or when the script ends) it prints the
verdict (is the loop data-bound, by how much) and measured advice, and writes them as JSON to
PATH. `stoker doctor DATA --recipe R --python SCRIPT` runs this for you.

Under torchrun (`torchrun --nproc_per_node N -m stoker.doctor train.py ARGS`) every rank
measures its own loop and the ranks exchange their figures when it ends (through the process
group the script initialises, or through files in $STOKER_DOCTOR_DIR without one): rank 0
prints one report with a row per rank, the straggler and the advice measured on it, writes the
JSON and the merged trace; the other ranks print nothing unless --all-ranks.
"""
import argparse
import json
import os
import runpy
import sys
import traceback

from . import _advice, _profile, _ranks
from .loader import Loader


class _Session:
    """The Profiles of every loader the script iterates, keyed by the loader object."""

    def __init__(self, steps, warmup, advise, trace=None):
        self.steps, self.warmup, self.advise, self.trace = steps, warmup, advise, trace
        self.profiles = {}

    def wrap(self, loader, it):
        if _advice._measuring:
            return it  # a loader the advice re-created to measure: not the script's loop
        prof = self.profiles.get(id(loader))
        if prof is None or prof.iterable is not loader:
            prof = _profile.Profile(loader, steps=self.steps, warmup=self.warmup,
                                    advise=self.advise, trace=self.trace)
            self.profiles[id(loader)] = prof
        return _profile._TimedIter(prof, it)

    def busiest(self):
        return max(self.profiles.values(), key=lambda p: p.steps, default=None)


def _patch(session):
    """Make DataLoader.__iter__ and stoker.Loader.__iter__ return timed iterators."""
    classes = [Loader]
    try:
        from torch.utils.data import DataLoader
        classes.append(DataLoader)
    except ImportError:
        pass
    for cls in classes:
        orig = cls.__iter__

        def timed_iter(self, _orig=orig):
            return session.wrap(self, _orig(self))
        cls.__iter__ = timed_iter


def _parse(argv):
    ap = argparse.ArgumentParser(
        prog="python3 -m stoker.doctor",
        description="Run a training script unchanged and tell whether its loop waits on data: "
                    "the waiting share, the step and wait times, and advice measured by trying "
                    "the loader alone at several worker counts.")
    ap.add_argument("--json-out", metavar="PATH",
                    help="also write the report as JSON here (rank 0; with --all-ranks the "
                         "other ranks write PATH.rankN)")
    ap.add_argument("--steps", type=int, metavar="N",
                    help="stop the script after N measured steps of its busiest loader "
                         "(default: run it to the end)")
    ap.add_argument("--warmup", type=int, default=2, metavar="W",
                    help="steps measured but left out of the figures (default 2)")
    ap.add_argument("--no-advice", action="store_true",
                    help="skip the worker-count measurements behind the advice")
    ap.add_argument("--trace", metavar="PATH",
                    help="write a Perfetto trace of the loop (waits, steps, collectives); "
                         "under torchrun one file with a track per rank")
    ap.add_argument("--all-ranks", action="store_true",
                    help="under torchrun, every rank prints its report (default: rank 0)")
    ap.add_argument("script", help="the training script (a Python file)")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    a = ap.parse_args(argv)
    if a.steps is not None and a.steps < 1:
        ap.error(f"--steps should be a positive integer, got {a.steps}")
    if a.warmup < 0:
        ap.error(f"--warmup should be non-negative, got {a.warmup}")
    if not os.path.isfile(a.script):
        ap.error(f"{a.script}: no such file")
    return a


def main(argv=None):
    a = _parse(sys.argv[1:] if argv is None else argv)
    session = _Session(a.steps, a.warmup, not a.no_advice, a.trace)
    _patch(session)
    script = os.path.abspath(a.script)
    sys.argv = [a.script] + a.args
    sys.path.insert(0, os.path.dirname(script))
    status, error = 0, None
    try:
        runpy.run_path(script, run_name="__main__")
    except _profile._StopProfiling:
        pass  # the steps were measured
    except SystemExit as e:
        if e.code not in (None, 0):
            status = e.code if isinstance(e.code, int) else 1
            error = f"{a.script} exited with status {e.code}"
    except BaseException as e:  # noqa: BLE001 - the script's failure is reported below
        traceback.print_exc()
        status = 130 if isinstance(e, KeyboardInterrupt) else 1
        error = f"{a.script} raised {type(e).__name__}: {e}"
    prof = session.busiest()
    if prof is None or prof.steps == 0:
        report = {"steps": 0, "wait_share": None, "data_bound": None, "step_ms": None,
                  "wait_ms": None, "batch_size": None, "samples_per_s": None, "loader": None,
                  "num_workers": None, "advice": []}
        msg = (f"stoker.doctor: {a.script} iterated no DataLoader or stoker.Loader (nothing "
               f"to measure)")
        status = status or 3
    else:
        report = prof.to_dict()
        msg = str(prof)
    report["script"] = a.script
    report["script_error"] = error
    report["exit_status"] = status
    rank = prof.rank if prof is not None and prof.world > 1 else _ranks.context()[0]
    if rank == 0 or a.all_ranks:
        print(msg, file=sys.stderr)
    if error:
        print(f"stoker.doctor: {error}", file=sys.stderr)
    if a.json_out and (rank == 0 or a.all_ranks):
        with open(a.json_out if rank == 0 else f"{a.json_out}.rank{rank}", "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
    if error is None:
        _ranks.shutdown()
    return status


if __name__ == "__main__":
    sys.exit(main())

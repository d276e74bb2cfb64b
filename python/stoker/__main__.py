"""python -m stoker: the stoker command-line tool (pack, inspect, verify, bench, doctor), the
same C code as the `stoker` executable `make` builds, run in this process. `pip install` makes
it the `stoker` command too (setup.py's console script calls main()).

    python3 -m stoker verify train/
"""
import os
import signal
import sys


def main(argv=None):
    """Run the command line on argv (default: sys.argv[1:]); returns its exit code."""
    args = sys.argv[1:] if argv is None else list(argv)
    # As the executable: Ctrl-C ends the command (Python's handler would only set a flag the C
    # code never reads), and a closed pipe (`stoker inspect --records | head`) ends it quietly.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    # `stoker doctor --python` runs this interpreter with this package on its path.
    os.environ.setdefault("STOKER_PYTHON", sys.executable)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.environ.get("PYTHONPATH", "")
    if here not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = here + (os.pathsep + path if path else "")
    from . import _core
    sys.stdout.flush()
    sys.stderr.flush()
    return _core.cli_main(["stoker"] + args)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The thread executor's cost per sample (issue 24, pysleep): one of bench_pydataset.py's
datasets iterated by stoker.Loader (or the DataLoader) for N epochs in this process, printing
each epoch's samples/s and the process's CPU time per sample, so that the run can be put under
`perf record` / `perf stat` (bench_pydataset.py runs each loader in a child of its own).

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_threadcost.py sleep 6 \
        [--workers N] [--executor thread] [--prefetch P] [--dataloader]
    perf probe -x /usr/bin/python3.11 PyEval_SaveThread      # one hit per GIL release
    PYTHONPATH=build/python perf stat -e probe_python3:PyEval_SaveThread,context-switches \
        /usr/bin/python3 bench/bench_threadcost.py sleep 5
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_pydataset  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario", help="sleep, tensor224, purepy, ... (bench_pydataset's)")
    ap.add_argument("epochs", type=int)
    ap.add_argument("--data", default="/tmp/pyds")
    ap.add_argument("--workers", type=int, default=None, help="num_workers (default: stoker's)")
    ap.add_argument("--executor", default="auto")
    ap.add_argument("--prefetch", type=int, default=None)
    ap.add_argument("--dataloader", action="store_true",
                    help="the DataLoader instead (--workers, default 0)")
    a = ap.parse_args()
    ns = bench_pydataset.dataset_namespace()
    ds = ns["make"](a.scenario, a.data)
    if a.dataloader:
        w = a.workers or 0
        loader = ns["DataLoader"](ds, batch_size=32, shuffle=True, num_workers=w,
                                  persistent_workers=w > 0)
    else:
        import stoker
        kw = {} if a.prefetch is None else {"prefetch": a.prefetch}
        loader = stoker.Loader(ds, batch_size=32, shuffle=True, num_workers=a.workers,
                               executor=a.executor, **kw)
    for e in range(a.epochs):
        t, c0, n = time.perf_counter(), time.process_time(), 0
        for batch in loader:
            n += len(batch[-1])
            del batch
        dt = time.perf_counter() - t
        print(f"epoch {e}: {n / dt:.0f} samples/s, CPU {1e6 * (time.process_time() - c0) / n:.0f}"
              f" us/sample", flush=True)
    if not a.dataloader:
        i = loader.info()
        print(f"{i.get('executor')} x{i.get('n_threads')}: {i.get('executor_reason')}")


if __name__ == "__main__":
    main()

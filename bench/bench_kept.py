#!/usr/bin/env python3
"""What a second loader in one process gains from the ring memory the first one wrote (issue 29,
first5; src/batch/stk_pinned.c keeps a closed loader's used slots of 2 MiB or more for the next
ring with slots of the same size).

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_kept.py DATA.stk [--rounds 3]
        [--threads 2] [--pause 3] [--batch-size 256]

Each round runs two trials in this one process: a loader of --batch-size reads one epoch of
DATA (imagenet-train) and is closed, the process sleeps --pause seconds (longer than the ~2 s
after which a VM with free page reporting gives freed memory back to its host, so that memory
freed and mapped again is fresh), then a second loader reads one epoch: with the same batch
size (its slots take the kept memory) or with one sample less (slots of another size: fresh
memory, the kept blocks freed). Prints the second loader's epoch, wall seconds and CPU seconds
of the process (its worker threads included), per trial, and the medians.
"""
import argparse
import resource
import statistics
import time

import stoker


def cpu_s():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def epoch(data, batch, threads):
    """One epoch of a new loader: (wall s, CPU s), the loader closed after it."""
    t0, c0 = time.perf_counter(), cpu_s()
    loader = stoker.Loader(data, batch_size=batch, shuffle=True, transforms="imagenet-train",
                           n_threads=threads, seed=0)
    n = 0
    for b in loader:  # a dict of tensors (a .stk's fields), or (images, labels) from a folder
        n += len(b["label"] if isinstance(b, dict) else b[1])
        del b
    loader.close()
    return time.perf_counter() - t0, cpu_s() - c0, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pause", type=float, default=3.0)
    ap.add_argument("--batch-size", type=int, default=256)
    a = ap.parse_args()
    res = {"same batch size (kept memory)": [], "one sample less (fresh memory)": []}
    for r in range(a.rounds):
        for name, second in ((k, a.batch_size - (i == 1)) for i, k in enumerate(res)):
            epoch(a.data, a.batch_size, a.threads)
            time.sleep(a.pause)
            wall, cpu, n = epoch(a.data, second, a.threads)
            res[name].append((wall, cpu))
            print(f"round {r}: second loader, batch {second}: {n} samples, {wall:.3f} s wall, "
                  f"{cpu:.3f} CPU s", flush=True)
    for name, v in res.items():
        w = [x[0] for x in v]
        c = [x[1] for x in v]
        print(f"{name}: wall {statistics.median(w):.3f} s [{min(w):.3f}-{max(w):.3f}], "
              f"CPU {statistics.median(c):.3f} s [{min(c):.3f}-{max(c):.3f}]")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Autotune against hand-tuned thread counts, side by side in one process.

For each round, and each setting in turn (num_workers=None, i.e. autotuned, then every fixed
count up to the CPUs), a fresh stoker.Loader runs --warmup epochs untimed (the autotuner's ramp
from one thread lands here; its length is reported separately), then --epochs timed epochs
taken as fast as they come (a consumer that never holds the loader back), or with a
simulated step of --step-ms per batch (a slow consumer: the autotuner should then use fewer
threads). Reports samples/s, the threads the autotuner ended on, and its reason.

    /usr/bin/python3 bench/bench_autotune.py bench/out/jpeg_small_2000.stk --rounds 3
"""
import argparse
import os
import statistics
import time

import stoker


def run(path, workers, a):
    loader = stoker.Loader(path, batch_size=a.batch_size, shuffle=True, num_workers=workers,
                           transforms=a.recipe)
    step = a.step_ms / 1e3
    t0 = time.perf_counter()
    for _ in range(a.warmup):
        for _b in loader:
            if step:
                time.sleep(step)
    ramp = time.perf_counter() - t0
    n = 0
    t0 = time.perf_counter()
    for _ in range(a.epochs):
        for b in loader:
            n += len(b["index"])
            del b
            if step:
                time.sleep(step)
    dt = time.perf_counter() - t0
    st = loader.stats()
    loader.close()
    return n / dt, st, ramp


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data")
    ap.add_argument("--recipe", default="imagenet-train")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="untimed epochs (default 1)")
    ap.add_argument("--epochs", type=int, default=2, help="timed epochs (default 2)")
    ap.add_argument("--step-ms", type=float, default=0.0)
    a = ap.parse_args()
    cpus = len(os.sched_getaffinity(0))
    settings = [None] + list(range(1, cpus + 1))
    rates = {s: [] for s in settings}
    chosen = []
    for r in range(a.rounds):
        for s in settings:
            rate, st, ramp = run(a.data, s, a)
            rates[s].append(rate)
            if s is None:
                chosen.append((st["active_threads"], st["depth"], st["autotune_changes"], ramp,
                               st["autotune_reason"]))
            print(f"round {r} num_workers={s}: {rate:.0f} samples/s"
                  + (f" (autotune: {st['active_threads']} threads, depth {st['depth']}, "
                     f"{st['autotune_changes']} changes; warm-up epoch {ramp:.2f} s)"
                     if s is None else ""), flush=True)
    med = {s: statistics.median(v) for s, v in rates.items()}
    best = max((s for s in settings if s is not None), key=lambda s: med[s])
    print()
    print(f"| setting | samples/s (median of {a.rounds}) | runs | vs best fixed |")
    print("|---|---|---|---|")
    for s in settings:
        name = "autotune (num_workers=None)" if s is None else f"num_workers={s}"
        print(f"| {name} | {med[s]:.0f} | {', '.join(f'{x:.0f}' for x in rates[s])} | "
              f"{med[s] / med[best]:.3f} |")
    print()
    for i, (t, d, c, ramp, why) in enumerate(chosen):
        print(f"autotune round {i}: ended on {t} threads, depth {d}, {c} changes, warm-up epoch "
              f"{ramp:.2f} s; last reason: {why}")


if __name__ == "__main__":
    main()

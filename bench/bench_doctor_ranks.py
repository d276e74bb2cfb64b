#!/usr/bin/python3
"""stoker.profile across ranks against the truth (issue 18): 2 ranks, gloo, rank 1's data slow.

Run under torchrun (Debian's torchrun needs --redirects/--tee on Python 3.11):

    python3 -m torch.distributed.run --redirects 2 --tee 2 --nproc_per_node 2 \\
        bench/bench_doctor_ranks.py [--steps 50] [--step-ms 10] [--sleeps 0,10,40]

For each loader (a DataLoader with a DistributedSampler whose Dataset sleeps in __getitem__ on
rank 1; a stoker.Loader slowed on rank 1 by its test hook _set_debug_delay, a sleep before each
batch) and each sleep, the step sleeps --step-ms and all-reduces 16 floats. The truth, from
timers in the step (independent of the profile's clock around next()): a rank's waiting share
is the loop's wall time not spent in the step; its all-reduce time is the time inside
dist.all_reduce. Rank 0 prints a markdown table.
"""
import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

import stoker

from sleep_dataset import SleepDataset  # bench/, the script's own directory


class Step:
    """Sleeps ms, then all-reduces; times both (the truth)."""

    def __init__(self, ms):
        self.ms, self.busy, self.coll, self.calls = ms, 0.0, 0.0, 0
        self.first_start = self.last_end = None

    def __call__(self, batch):
        t0 = time.perf_counter()
        time.sleep(self.ms / 1e3)
        t1 = time.perf_counter()
        dist.all_reduce(torch.ones(16))
        t2 = time.perf_counter()
        self.calls += 1
        if self.calls > 2:   # the profile's warm-up steps are left out of the truth too
            self.busy += t2 - t0
            self.coll += t2 - t1
            if self.first_start is None:
                self.first_start = self.prev_end
            self.last_end = t2
        self.prev_end = t2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--step-ms", type=float, default=10.0)
    ap.add_argument("--sleeps", default="0,10,40")
    a = ap.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    data = "/tmp/stoker_bench_doctor_ranks.stk"
    if rank == 0:
        stoker.write_shard(data, {"label": "int64"}, ({"label": i} for i in range(4000)))
    dist.barrier()
    rows = []
    for kind in ("DataLoader", "stoker.Loader"):
        for sleep in [float(x) for x in a.sleeps.split(",")]:
            ms = sleep if rank == 1 else 0.0
            n = (a.steps + 4) * world
            if kind == "DataLoader":
                ds = SleepDataset(n, ms)
                loader = DataLoader(ds, batch_size=1, sampler=DistributedSampler(
                    ds, num_replicas=world, rank=rank, shuffle=False))
            else:
                loader = stoker.Loader(data, batch_size=1, num_workers=1)
                if ms:
                    loader._set_debug_delay(int(ms))
            step = Step(a.step_ms)
            p = stoker.profile(loader, step=step, steps=a.steps, warmup=2, advise=False)
            wall = step.last_end - step.first_start
            truth = 1 - step.busy / wall
            coll_ms = 1e3 * step.coll / (step.calls - 2)
            mine = {"truth": truth, "coll_ms": coll_ms}
            every = [None] * world
            dist.all_gather_object(every, mine)
            for r, row in enumerate(p.ranks):
                rows.append((kind, sleep, r, every[r]["truth"], row["wait_share"],
                             every[r]["coll_ms"], row["collective_ms"], row["data_bound"],
                             p.straggler))
            if kind == "stoker.Loader":
                loader.close()
    if rank == 0:
        print(f"\n{a.steps} steps of {a.step_ms:g} ms + all-reduce; rank 1's data sleeps the "
              f"given ms per batch\n")
        print("| loader | rank 1 sleep ms | rank | truth: waiting | stoker.profile: waiting "
              "| truth: all-reduce ms | profile: in collectives ms | data-bound | straggler |")
        print("|---|---|---|---|---|---|---|---|---|")
        for kind, sleep, r, tw, pw, tc, pc, db, s in rows:
            print(f"| {kind} | {sleep:g} | {r} | {tw:.3f} | {pw:.3f} | {tc:.2f} | {pc:.2f} | "
                  f"{'yes' if db else 'no'} | {s} |")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""One rank of the 2-process jobs of test_ranks.py (started with RANK, WORLD_SIZE, MASTER_ADDR
and MASTER_PORT set, as torchrun does). argv[1] is a JSON config: group (initialise gloo and
all-reduce in each step, or not: the ranks then exchange through STOKER_DOCTOR_DIR), out (a
directory), data (a .stk file for the stoker.Loader scenarios) and scenarios, each: name,
loader ("torch": a DataLoader with a DistributedSampler; "stoker": stoker.Loader), slow (the
ranks whose data takes sleep_ms per batch), sleep_ms, step_ms, steps, advise, trace.
Writes out/rank<r>.json: {scenario: the Profile's to_dict() and its text}.

The DataLoader scenarios measure on a virtual clock (as test_profile.py's): a sample takes
exactly sleep_ms on it and a step step_ms, so every rank's waiting share is exact and the
verdicts do not move with the machine's load (a fast rank once waited 11% of the time under a
load of 16, over the 5% line). They still sleep for real, so the ranks meet in the all-reduce
as in training and the collective times stay measured. The stoker.Loader scenario keeps the
real clock (its slow batches come from the extension's debug delay)."""
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

import stoker

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from sleep_dataset import SleepDataset  # noqa: E402
from vclock import VirtualClock  # noqa: E402 (beside this script)

class ClockSleepDataset(SleepDataset):
    def __getitem__(self, i):
        clock.now += self.ms / 1e3
        return super().__getitem__(i)


clock = VirtualClock()
real_time = stoker._profile.time
cfg = json.loads(sys.argv[1])
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if cfg["group"]:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))


def make_step(ms):
    def step(batch):
        clock.now += ms / 1e3
        time.sleep(ms / 1e3)
        if cfg["group"]:
            t = torch.ones(16)
            dist.all_reduce(t)   # every rank meets the others here, as a gradient all-reduce
    return step


results = {}
for sc in cfg["scenarios"]:
    ms = sc["sleep_ms"] if rank in sc["slow"] else 0
    n_batches = sc["steps"] + 4   # the steps, the warm-up and a spare
    stoker._profile.time = clock if sc["loader"] == "torch" else real_time
    if sc["loader"] == "torch":
        ds = ClockSleepDataset(n_batches * world, ms)
        loader = DataLoader(ds, batch_size=1, num_workers=0,
                            sampler=DistributedSampler(ds, num_replicas=world, rank=rank,
                                                       shuffle=False))
    else:
        loader = stoker.Loader(cfg["data"], batch_size=2, num_workers=1, rank=rank,
                               world_size=world)
        if ms:
            loader._set_debug_delay(ms)   # each batch takes ms, as a slow pipeline would
    trace = os.path.join(cfg["out"], f"{sc['name']}.trace.json") if sc.get("trace") else None
    p = stoker.profile(loader, step=make_step(sc["step_ms"]), steps=sc["steps"], warmup=2,
                       advise=sc.get("advise", False), trace=trace)
    results[sc["name"]] = dict(p.to_dict(), text=str(p))
    if sc["loader"] == "stoker":
        loader.close()

with open(os.path.join(cfg["out"], f"rank{rank}.json"), "w") as f:
    json.dump(results, f)
if cfg["group"]:
    dist.destroy_process_group()

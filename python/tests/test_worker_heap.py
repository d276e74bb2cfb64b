"""A worker process's heap: glibc's malloc keeps what a sample freed for the next sample
(_pyworker_server.keep_heap), instead of trimming it and faulting it back in. Page faults are
counted (getrusage), never time: the verdict does not depend on the machine's load."""
import json
import os

import pytest

from conftest import run_python

GLIBC = bool(os.confstr("CS_GNU_LIBC_VERSION")) if "CS_GNU_LIBC_VERSION" in \
    os.confstr_names else False

# Three 8 MB blocks allocated, written and freed, four times; the minor page faults of the last
# three rounds. glibc's default (a block above its dynamic threshold is mmap'd; the freed top of
# the heap is trimmed beyond twice that threshold) faults the 24 MB in again every round: 18,336
# pages over the three (a worker process without keep_heap); a heap that keeps its memory faults
# none after the first round.
PATTERN = r'''
import resource

def churn_faults():
    def rnd():
        blocks = [bytearray(8 << 20) for _ in range(3)]
        for b in blocks:
            b[::4096] = b"\x01" * len(b[::4096])
        del blocks
    rnd()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(3):
        rnd()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
'''

# Far below the default's ~18,000 (3 rounds x 24 MB of 4 KB pages), far above what a kept heap
# faults (the interpreter's own few: 0 measured).
FEW = 600


def _last_json(p):
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
def test_keep_heap_stops_the_faults():
    """In a fresh interpreter: the pattern faults its memory in every round by default (the
    control: what keep_heap changes is there to change), and not once keep_heap ran."""
    code = PATTERN + r'''
import json
from stoker import _pyworker_server as s
before = churn_faults()
set_ = s.keep_heap()
print(json.dumps({"before": before, "set": set_, "after": churn_faults()}))
'''
    r = _last_json(run_python(code, env={"GLIBC_TUNABLES": ""}))
    assert r["set"] is True
    assert r["before"] > 3 * FEW, r
    assert r["after"] < FEW, r


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
def test_keep_heap_leaves_the_users_settings():
    code = r'''
from stoker import _pyworker_server as s
print(s.keep_heap())
'''
    p = run_python(code, env={"MALLOC_TRIM_THRESHOLD_": "131072"})
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split()[-1] == "False"


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
def test_worker_processes_keep_their_heap():
    """The pattern run in __getitem__ on stoker's worker processes (executor="process", a fresh
    training process): each sample's rounds fault next to nothing."""
    code = PATTERN + r'''
import json
import torch
import stoker

class Churn(torch.utils.data.Dataset):
    def __len__(self):
        return 6
    def __getitem__(self, i):
        return churn_faults()

loader = stoker.Loader(Churn(), batch_size=3, num_workers=2, executor="process")
faults = [int(x) for b in loader for x in b]
print(json.dumps({"faults": faults, "executor": loader.info().get("executor")}))
'''
    r = _last_json(run_python(code))
    assert r["executor"] == "process", r
    assert len(r["faults"]) == 6
    assert max(r["faults"]) < FEW, r

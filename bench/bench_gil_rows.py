"""The GIL meter's rows for three kinds of __getitem__ (pure Python, a 2 ms sleep, a numpy
matmul): stoker._pyworker.probe_samples on 8 samples in this thread, then the Probe
(_executor.probe_of) and the choice (_executor.choose) for 2 cores. Rows: (wall, CPU, GIL-held
CPU, GIL-free CPU, run-queue wait) in ms (issue 24, bench/RESULTS.md "correctness (pyrobust)").

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_gil_rows.py
"""
import time
import torch
import stoker  # noqa: F401
from stoker import _pyworker, _executor, _pydataset
class Py(torch.utils.data.Dataset):
    def __len__(self): return 64
    def __getitem__(self, i):
        s = 0
        for k in range(20000): s += k * k % 7
        return torch.tensor([float(s)]), i
class Sl(torch.utils.data.Dataset):
    def __len__(self): return 64
    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.zeros(3), i
class Np(torch.utils.data.Dataset):
    def __len__(self): return 64
    def __getitem__(self, i):
        import numpy as np
        a = np.random.default_rng(i).random((300,300))
        return torch.from_numpy((a @ a).sum(0)[:4].copy()), i
for ds in (Py(), Sl(), Np()):
    first, rows, drew, _ = _pyworker.probe_samples(ds, {"indices": list(range(8)), "seed": 1, "reseed": False})
    p = _executor.probe_of(rows, 16, drew)
    c = _executor.choose(p, "auto", None, 2)
    print(type(ds).__name__, p, c.executor, c.workers,
          [tuple(round(x / 1e6, 2) for x in r) for r in rows])

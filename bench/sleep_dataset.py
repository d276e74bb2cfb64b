"""A torch Dataset whose samples take a fixed time: the slow data of the rank benchmarks and
tests (bench/bench_doctor_ranks.py, python/tests/ranks_job.py)."""
import time

import torch
from torch.utils.data import Dataset


class SleepDataset(Dataset):
    """n samples, each taking `ms` milliseconds in __getitem__ (a float tensor [i])."""

    def __init__(self, n, ms):
        self.n, self.ms = n, ms

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.ms:
            time.sleep(self.ms / 1e3)
        return torch.tensor([float(i)])

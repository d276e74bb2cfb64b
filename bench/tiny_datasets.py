"""Datasets of tiny samples for the benches that compare stoker's per-sample costs with the
DataLoader's (bench_executors.py, bench_interleaved.py): a short pure-Python __getitem__ and a
class of your own over a TensorDataset."""
import torch
from torch.utils.data import Dataset, TensorDataset


class Short(Dataset):
    """A loop of k steps of Python arithmetic returning (a tensor of 4 floats, an int), the shape
    of a tabular or text sample; 100,000 samples. A list of indices (the batch-fetch idiom) gets
    the batch's stacked tensors."""

    def __init__(self, k):
        self.k = k

    def __len__(self):
        return 100000

    def one(self, i):
        s = 0
        for j in range(self.k):
            s += j * i
        return float(s % 1000)

    def __getitem__(self, i):
        if isinstance(i, list):  # a batch's indices (--fetch batch)
            return (torch.tensor([[self.one(v)] * 4 for v in i]),
                    torch.tensor([v % 10 for v in i]))
        return torch.tensor([self.one(i)] * 4), i % 10


class Tensors(TensorDataset):
    """A TensorDataset in a class of your own (__getitem__ calls the base class's, as
    bench_tutorials.py --own writes it): stoker cannot read it natively."""

    def __getitem__(self, i):
        return TensorDataset.__getitem__(self, i)


def tensors(features, n=200000):
    """Tensors over n rows of `features` random float32 values and an int64 label."""
    g = torch.Generator().manual_seed(0)
    return Tensors(torch.randn(n, features, generator=g), torch.randint(0, 10, (n,), generator=g))

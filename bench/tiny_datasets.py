"""Datasets of tiny samples for the benches that compare stoker's per-sample costs with the
DataLoader's (bench_executors.py, bench_interleaved.py, bench_object_leaves.py): a short
pure-Python __getitem__, a class of your own over a TensorDataset, and samples with object
leaves (a dict of many small tensors; an NLP-style dict with a string and a list)."""
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


class ManyLeaves(Dataset):
    """A dict of `keys` small tensors (8 floats each): past the ring's 15 fields the rest travel
    as object leaves."""

    def __init__(self, keys=20, n=6000):
        self.keys = [f"k{i}" for i in range(keys)]
        self.x = torch.randn(n, 8)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {k: self.x[i] * j for j, k in enumerate(self.keys)}


class Texts(Dataset):
    """NLP-style: a token tensor, a label, the text, a list of word ids and an id string."""

    WORDS = "the quick brown fox jumps over a lazy dog and then some more words".split()

    def __init__(self, n=20000):
        import random
        rnd = random.Random(0)
        self.texts = [" ".join(rnd.choice(self.WORDS) for _ in range(rnd.randint(5, 30)))
                      for _ in range(n)]

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, i):
        t = self.texts[i]
        ids = [hash(w) % 1000 for w in t.split()]
        x = torch.zeros(32, dtype=torch.long)
        x[:min(32, len(ids))] = torch.tensor(ids[:32])
        return {"input_ids": x, "label": i % 5, "text": t, "word_ids": ids[:4], "id": f"doc-{i}"}

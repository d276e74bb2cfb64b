"""Issue 24: torch.profiler sees stoker's data loading as it sees the DataLoader's.

Each next() on a stoker.Loader iterator is a profiler range named like the DataLoader's
("enumerate(DataLoader)#<IterClass>.__next__"), recorded with its time; with no profiler
recording, the range is never entered (checked by counting calls, not by timing)."""
import sys

import pytest
import torch
from torch.utils.data import DataLoader

import stoker
from stoker import _torchprof

ROW = "enumerate(DataLoader)#_LoaderIter.__next__"


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("torchprof") / "x.stk")
    stoker.write_shard(path, {"v": "int64"}, ({"v": i} for i in range(40)))
    return path


def _rows(prof):
    return {e.key: e for e in prof.key_averages() if e.key.startswith("enumerate(DataLoader)#")}


def test_each_next_is_a_profiler_range_with_its_time(shard):
    loader = stoker.Loader(shard, 8, num_workers=1)
    loader._set_debug_delay(2)  # each batch takes a while: the row holds real waiting
    dl = DataLoader(list(range(16)), batch_size=8)
    with torch.profiler.profile() as prof:
        n = sum(1 for _ in loader)               # 5 batches, then StopIteration
        m = sum(1 for _ in dl)                   # the DataLoader in the same profile
        for _ in stoker.Loader(shard, 20, output="tuple", fields=("v",)):
            pass
    rows = _rows(prof)
    assert (n, m) == (5, 2)
    assert ROW in rows, sorted(rows)
    # every __next__ of the two stoker passes, the StopIteration included (as the DataLoader's)
    assert rows[ROW].count == (5 + 1) + (2 + 1)
    assert rows[ROW].cpu_time_total > 0
    theirs = [k for k in rows if k != ROW]
    assert theirs == ["enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"]
    assert rows[theirs[0]].count == m + 1


def test_no_profiler_no_range(shard, monkeypatch):
    calls = []

    class Counting:
        def __init__(self, name):
            calls.append(name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(torch.autograd.profiler, "record_function", Counting)
    loader = stoker.Loader(shard, 8, num_workers=1)
    it = iter(loader)
    assert _torchprof.range_for(it) is None
    assert sum(1 for _ in it) == 5
    assert calls == []  # never entered without a profiler
    with torch.profiler.profile():
        assert sum(1 for _ in loader) == 5
    assert calls == [ROW] * 6  # entered on each next() while one records
    monkeypatch.setitem(sys.modules, "torch", None)  # torch blocked or never imported
    assert _torchprof.range_for(it) is None


class _Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 12

    def __getitem__(self, i):
        return i * i


class _Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(range(12))


def test_python_datasets_are_profiled_too():
    """A map-style dataset (stoker's _LoaderIter) and an IterableDataset (its own pass) record
    the DataLoader's row on each next()."""
    with torch.profiler.profile() as prof:
        a = sum(1 for _ in stoker.Loader(_Squares(), batch_size=4, num_workers=1,
                                         executor="thread"))
        b = sum(1 for _ in stoker.Loader(_Stream(), batch_size=4, num_workers=1,
                                         executor="thread"))
    rows = _rows(prof)
    assert (a, b) == (3, 3)
    assert rows[ROW].count == 3 + 1, sorted(rows)
    it_row = "enumerate(DataLoader)#_IterPass.__next__"
    assert rows[it_row].count == 3 + 1, sorted(rows)

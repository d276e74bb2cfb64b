"""Checks every record source must pass through stoker.Loader (shared by the per-format tests):
exactly-once over epochs with shuffle and ranks, equality of every field with the same records
packed to .stk, exact mid-epoch resume."""
import numpy as np

import stoker


def _epoch_indices(loader):
    return [i for b in loader for i in b["index"].numpy().tolist()]


def check_exactly_once(data, n, batch_size=5, epochs=2, world_size=2):
    """Every record once per epoch over the ranks (PyTorch's padding repeats at most
    world_size - 1), a different shuffle each epoch, the same on every rank."""
    per_rank = n // world_size + (n % world_size > 0)
    orders = []
    loaders = [stoker.Loader(data, batch_size, shuffle=True, seed=11, num_workers=2, rank=r,
                             world_size=world_size) for r in range(world_size)]
    try:
        for _ in range(epochs):
            got = [_epoch_indices(ld) for ld in loaders]
            assert all(len(g) == per_rank for g in got)
            flat = sorted(i for g in got for i in g)
            assert sorted(set(flat)) == list(range(n))
            assert len(flat) - n == per_rank * world_size - n  # only the padding repeats
            orders.append(got)
    finally:
        for ld in loaders:
            ld.close()
    assert orders[0] != orders[1]


def _values(batch, fields):
    out = {}
    for f in fields:
        name = f["name"]
        out[name] = batch.bytes(name) if f["kind"] == "bytes" else batch[name].numpy().tolist()
    return out


def check_equals_packed(data, tmp_path, n):
    """`data` packed with stoker.pack to a .stk file in tmp_path: its Dataset records and
    loader batches equal those of `data`. Returns the packed path."""
    packed = str(tmp_path / "packed.stk")
    assert stoker.pack(data, packed)["records"] == n
    ds, ps = stoker.Dataset(data), stoker.Dataset(packed)
    assert ds.fields == ps.fields and len(ds) == len(ps) == n
    for i in range(n):
        a, b = ds[i], ps[i]
        assert a.keys() == b.keys()
        for k in a:
            assert np.array_equal(a[k], b[k]) if isinstance(a[k], np.ndarray) else a[k] == b[k]
    kw = dict(batch_size=7, num_workers=2, rank=0, world_size=1)
    la, lb = stoker.Loader(data, **kw), stoker.Loader(packed, **kw)
    try:
        for x, y in zip(la, lb):
            assert _values(x, ds.fields) == _values(y, ps.fields)
            assert x["index"].tolist() == y["index"].tolist()
    finally:
        la.close()
        lb.close()
    ds.close()
    ps.close()
    return packed


def check_resume(data, k=3, batch_size=4):
    """A state taken after k batches resumes the epoch exactly on a fresh loader."""
    def make(seed):
        return stoker.Loader(data, batch_size, shuffle=True, seed=seed, num_workers=2, rank=0,
                             world_size=1)
    ld = make(5)
    full = _epoch_indices(ld)
    ld.close()
    ld = make(5)
    it = iter(ld)
    head = [i for _ in range(k) for i in next(it)["index"].numpy().tolist()]
    state = ld.state_dict()
    ld.close()
    resumed = make(99)  # the seed comes from the state
    resumed.load_state_dict(state)
    tail = _epoch_indices(resumed)
    resumed.close()
    assert head + tail == full
    return state

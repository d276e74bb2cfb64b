"""Token files read in place from a mapping when asked (STOKER_MMAP=1; issue 26, tok5:
src/io/stk_mapped.c): the rows are the same bytes as the read path's (the default) for uint16 and uint32 ids, windows, random
offsets, packed rows and mixtures, over epochs and a resume from one path into the other; a file
cut short or rewritten under a mapped reader is an error naming it (the process lives: no SIGBUS);
an empty file beside others maps nothing and changes nothing."""
import os

import numpy as np
import pytest

import stoker
from token_corpora import write_megatron, write_nanogpt

T = 16


def _arr(x):
    return x.numpy() if hasattr(x, "numpy") else np.asarray(x)


def _maps(path):
    """How many mappings of `path` this process has now (/proc/self/maps)."""
    real = os.path.realpath(path)
    with open("/proc/self/maps") as f:
        return sum(line.rstrip("\n").endswith(" " + real) for line in f)


def _mapped(path):
    return _maps(path) > 0


def _epochs(data, n_epochs=2, **kw):
    L = stoker.Loader(data, batch_size=5, seq_len=T, shuffle=True, seed=9, num_workers=2, **kw)
    out = []
    for e in range(n_epochs):
        L.set_epoch(e)
        out.append([{k: _arr(v).copy() for k, v in b.items()} for b in L])
    L.close()
    return out


def _same(a, b):
    assert len(a) == len(b)
    for ea, eb in zip(a, b):
        assert len(ea) == len(eb)
        for x, y in zip(ea, eb):
            assert x.keys() == y.keys()
            for k in x:
                assert x[k].dtype == y[k].dtype and np.array_equal(x[k], y[k]), k


def _corpus(tmp_path, mode, dtype):
    """A corpus for `mode` with ids of `dtype` (each id its stream position + 1, plus a base per
    part) and the loader's arguments for it; the files to look for in the maps."""
    kw = {"tokens": "packed" if mode == "packed" else "windows" if mode == "mix" else mode}
    if dtype == np.uint32:
        kw["token_dtype"] = "uint32"
    if mode == "packed":
        rng = np.random.default_rng(3)
        lens = rng.integers(1, 3 * T, 150)
        lens[4] = 3 * T + 5  # split across rows
        pos = np.concatenate([[0], np.cumsum(lens)])
        docs = [np.arange(pos[d], pos[d + 1]) + 70000 for d in range(len(lens))]
        kw.pop("token_dtype", None)  # the index says the width
        prefix = write_megatron(tmp_path / "p", docs,
                                dtype=np.int32 if dtype == np.uint32 else np.uint16)
        return str(prefix), kw, [str(prefix) + ".bin"]
    if mode == "mix":
        paths = [write_nanogpt(tmp_path / f"m{k}.bin", np.arange(n * T + 1) + 1000 * k, dtype)
                 for k, n in enumerate((50, 30, 20))]
        return stoker.mix({paths[0]: 5, paths[1]: 3, paths[2]: 2}), kw, paths
    p = write_nanogpt(tmp_path / "w.bin", (np.arange(200 * T + 7) + 60000) % 2 ** 32, dtype)
    return p, kw, [p]


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32])
@pytest.mark.parametrize("mode", ["windows", "random", "packed", "mix"])
def test_mapped_rows_equal_read_rows(tmp_path, monkeypatch, mode, dtype):
    data, kw, files = _corpus(tmp_path, mode, dtype)
    monkeypatch.delenv("STOKER_MMAP", raising=False)
    ds = stoker.tokens.open_tokens(data, T, **kw)
    assert not any(_mapped(f) for f in files)  # the read path, the default
    del ds
    monkeypatch.setenv("STOKER_MMAP", "0")
    ds = stoker.tokens.open_tokens(data, T, **kw)
    assert not any(_mapped(f) for f in files)  # asked not to map
    del ds
    read = _epochs(data, **kw)
    monkeypatch.setenv("STOKER_MMAP", "1")
    ds = stoker.tokens.open_tokens(data, T, **kw)
    assert all(_mapped(f) for f in files)  # the mapped path
    del ds
    mapped = _epochs(data, **kw)
    _same(read, mapped)
    for kw2 in ({"ids_dtype": "int32"},) if mode == "windows" else ():  # int32 rows too
        monkeypatch.setenv("STOKER_MMAP", "0")
        read = _epochs(data, 1, **kw, **kw2)
        monkeypatch.setenv("STOKER_MMAP", "1")
        _same(read, _epochs(data, 1, **kw, **kw2))
    if mode == "windows":  # and they are the stream's: row r is ids[r*T : r*T + T + 1]
        ids = ((np.arange(200 * T + 7) + 60000) % 2 ** 32).astype(dtype).astype(np.int64)
        span = 2 ** 16 if dtype == np.uint16 else 2 ** 32
        rows = 0
        for b in mapped[0]:
            for x, y in zip(b["input_ids"], b["labels"]):
                r = (int(x[0]) - 60000) % span // T
                assert np.array_equal(x, ids[r * T:r * T + T])
                assert np.array_equal(y, ids[r * T + 1:r * T + T + 1])
                rows += 1
        assert rows == 200


def test_resume_from_mapped_into_read_and_back(tmp_path, monkeypatch):
    """A state_dict taken from a mapped run resumes a pread run (and back) on the same rows: the
    read path decides nothing about the order."""
    p = write_nanogpt(tmp_path / "r.bin", np.arange(120 * T + 1))
    kw = dict(batch_size=4, seq_len=T, shuffle=True, seed=5, num_workers=2)
    R = stoker.Loader(p, **kw)
    ref = [{k: _arr(v).copy() for k, v in b.items()} for b in R]
    R.close()
    got, state = [], None
    for cut, env in ((7, "1"), (19, None), (len(ref), "1")):
        if env is None:
            monkeypatch.delenv("STOKER_MMAP", raising=False)
        else:
            monkeypatch.setenv("STOKER_MMAP", env)
        before = _maps(p)
        L = stoker.Loader(p, **kw)
        assert _maps(p) == before + (env == "1")  # mapped, or read
        if state is not None:
            L.load_state_dict(state)
        it = iter(L)
        while len(got) < cut:
            got.append({k: _arr(v).copy() for k, v in next(it).items()})
        state = L.state_dict()
        L.close()
    _same([ref], [got])


def _cut_or_rewrite(path, how):
    if how == "cut":
        with open(path, "r+b") as f:
            f.truncate(4096)  # the first page stays: rows past it would SIGBUS unguarded
    else:
        with open(path, "r+b") as f:  # same size, new bytes, a new modification time
            f.seek(10000)
            f.write(b"\x07\x00" * 64)
        os.utime(path, ns=(0, 4_000_000_000 * 10 ** 9))


@pytest.mark.parametrize("how", ["cut", "rewritten"])
@pytest.mark.parametrize("tokens", ["windows", "packed"])
def test_changed_under_a_mapped_reader_names_it(tmp_path, monkeypatch, how, tokens):
    monkeypatch.setenv("STOKER_MMAP", "1")
    n = 64 * 2048  # 64 pages of uint16 ids
    if tokens == "packed":
        docs = [np.arange(k, k + 50) + 1 for k in range(0, n - 50, 50)]
        p = write_megatron(tmp_path / "changing", docs)
        f = str(p) + ".bin"
    else:
        p = f = write_nanogpt(tmp_path / "changing.bin", np.arange(n) % 60000)
    L = stoker.Loader(p, batch_size=8, seq_len=T, tokens=tokens, shuffle=True, seed=1,
                      num_workers=2, prefetch=1)
    assert _mapped(f)
    it = iter(L)
    next(it)
    _cut_or_rewrite(f, how)
    with pytest.raises(stoker.Error) as e:
        for _ in range(len(L)):
            next(it)
    msg = str(e.value)
    assert "changing" in msg and "changed while open" in msg, msg
    L.close()
    # a loader opened after the change reads the new version (a cut file: fewer rows)
    if how == "cut" and tokens == "windows":
        L = stoker.Loader(p, batch_size=8, seq_len=T, num_workers=1)
        assert len(L.dataset) == (2048 - 1) // T
        assert sum(len(b["input_ids"]) for b in L) == (2048 - 1) // T
        L.close()


def test_empty_file_beside_others_and_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("STOKER_MMAP", "1")
    d = tmp_path / "parts"
    d.mkdir()
    write_nanogpt(d / "a.bin", np.arange(40 * T + 1))
    write_nanogpt(d / "b.bin", np.zeros(0))  # empty: no mapping, no tokens
    write_nanogpt(d / "c.bin", np.arange(40 * T + 1, 60 * T + 3))
    mapped = _epochs(str(d), 1, format="nanogpt")
    assert _mapped(str(d / "a.bin")) is False  # the loaders are closed: nothing left mapped
    monkeypatch.setenv("STOKER_MMAP", "0")
    _same(_epochs(str(d), 1, format="nanogpt"), mapped)
    x = np.concatenate([b["input_ids"] for b in mapped[0]])
    assert sorted(x[:, 0].tolist()) == list(range(0, (60 * T + 2) // T * T, T))
    monkeypatch.setenv("STOKER_MMAP", "1")
    empty = write_nanogpt(tmp_path / "empty.bin", np.zeros(0))
    with pytest.raises(stoker.Error, match="empty.bin.*0 tokens make no row"):
        stoker.Loader(empty, batch_size=2, seq_len=T)

"""Packed rows' computed ids (issue 26, tok3: position ids, padding and -100 labels written 16
bytes a store, a piece's input_ids and labels in one pass) against a naive reference built from
the documents one token at a time, through the loader: empty documents, documents of exactly T,
longer than T (split into rows, the piece's last label the document's next token), the last
partial batch, int64 and int32 ids, pad ids 0 (a memset), -1 and 50256."""
import numpy as np
import pytest

import stoker
from token_corpora import write_megatron

T = 16


def _corpus(tmp_path):
    """Documents whose ids are their stream positions + 1 (so every token says where it is),
    with empty ones, ones of exactly T and 2T, and one longer than 3T."""
    rng = np.random.default_rng(11)
    lens = list(rng.integers(1, 2 * T, 70))
    lens[2] = 0
    lens[3] = 3 * T + 5
    lens[9] = T
    lens[10] = 0
    lens[11] = 0
    lens[20] = 2 * T
    lens[30] = T - 1
    lens[-1] = 0
    at, docs = 1, []
    for n in lens:
        docs.append(np.arange(at, at + n))
        at += n
    return write_megatron(tmp_path / "rows", docs), docs


def _reference(x, docs, pad):
    """labels, position_ids and seq_lens of one row from its input_ids, token by token."""
    where = {}
    for d, doc in enumerate(docs):
        for o, tok in enumerate(doc):
            where[int(tok)] = (d, o)
    lab, pos, lens = [], [], []
    prev = None  # (doc, offset) of the previous position, or "pad"
    for j, tok in enumerate(int(v) for v in x):
        if tok == pad and tok not in where:
            start = prev != "pad"
            prev = "pad"
            lab.append(-100)
        else:
            d, o = where[tok]
            start = prev != (d, o - 1)
            prev = (d, o)
            lab.append(int(docs[d][o + 1]) if o + 1 < len(docs[d]) else -100)
        if start:
            lens.append(0)
        lens[-1] += 1
        pos.append(0 if start else pos[-1] + 1)
    return np.array(lab), np.array(pos), np.array(lens)


@pytest.mark.parametrize("ids_dtype", ["int64", "int32"])
@pytest.mark.parametrize("pad_id", [0, -1, 50256])
def test_packed_rows_equal_naive_reference(tmp_path, ids_dtype, pad_id):
    prefix, docs = _corpus(tmp_path)
    total = sum(len(d) for d in docs)
    assert total < 50256  # no token is a pad id
    B = 7
    L = stoker.Loader(prefix, batch_size=B, seq_len=T, tokens="packed", pad_id=pad_id,
                      ids_dtype=ids_dtype, shuffle=True, seed=2, num_workers=2, output="numpy")
    n_rows = L.dataset.info["n_rows"]
    assert n_rows % B  # a last partial batch
    seen, sizes = [], []
    for b in L:
        x, y, pos, lens = b["input_ids"], b["labels"], b["position_ids"], b["seq_lens"]
        assert x.dtype == y.dtype == pos.dtype == np.dtype(ids_dtype)
        sizes.append(len(x))
        for r in range(len(x)):
            want_y, want_pos, want_lens = _reference(x[r], docs, pad_id)
            assert np.array_equal(y[r], want_y), (b["index"][r], y[r], want_y)
            assert np.array_equal(pos[r], want_pos), (b["index"][r], pos[r], want_pos)
            assert np.array_equal(lens[r][:len(want_lens)], want_lens)
            assert not lens[r][len(want_lens):].any()
            seen.extend(int(v) for v in x[r] if 1 <= v <= total)
    assert sizes[-1] == n_rows % B and sum(sizes) == n_rows
    assert sorted(seen) == list(range(1, total + 1))  # every token once; empty documents none
    L.close()


def test_batch_built_in_one_call_equals_general_conversion(tmp_path):
    """The Loader's host batches come from the extension in one call (Batch.as_dict): the same
    tensors as converting each view; a bytes field (it adds its lengths) is left to the general
    path, which still gives it."""
    import torch
    from stoker.batch import Batch
    prefix, docs = _corpus(tmp_path)
    L = stoker.Loader(prefix, batch_size=4, seq_len=T, tokens="packed", num_workers=1)
    raw = next(L._core)
    fast = raw.as_dict(Batch, np.asarray, torch.from_numpy)
    assert type(fast) is Batch and list(fast) == [n for n, _, _ in raw.tensors()]
    for name, view, _ in raw.tensors():
        want = torch.from_numpy(np.asarray(view))
        assert fast[name].dtype == want.dtype and torch.equal(fast[name], want)
        assert fast[name].data_ptr() == want.data_ptr()  # a view of the ring, no copy
    arrays = raw.as_dict(Batch, np.asarray, None)
    assert all(isinstance(v, np.ndarray) for v in arrays.values())
    b = next(iter(L))  # through the Loader: a Batch with its attributes set
    assert isinstance(b, Batch) and b.attached and b.epoch == 0 and b.number == 1
    assert "cu_seqlens" in b and b["input_ids"].shape == (4, T)
    del raw, fast, arrays, want, b
    L.close()
    # documents: a bytes field ("tokens") and its lengths
    D = stoker.Loader(stoker.Dataset(prefix + ".idx"), batch_size=3, num_workers=1)
    raw = next(D._core)
    assert raw.as_dict(Batch, np.asarray, torch.from_numpy) is None
    del raw
    b = next(iter(D))
    assert b.bytes("tokens")[0] == np.asarray(docs[3], np.uint16).tobytes()  # batch 1: 3, 4, 5
    D.close()


def test_cu_seqlens_of_equals_naive_sum():
    """cu_seqlens from seq_lens (one loop in the extension for a loader's int32 rows; numpy for
    any other array) against a running sum written out."""
    import torch
    from stoker.tokens import cu_seqlens_of
    rng = np.random.default_rng(5)
    for shape in [(1, 1), (3, 1), (4, 7), (32, 9), (2, 0)]:
        sl = np.zeros(shape, np.int32)
        for r in range(shape[0]):
            k = int(rng.integers(0, shape[1] + 1))
            sl[r, :k] = rng.integers(1, 3000, k)
        want = [0]
        for v in sl.reshape(-1):
            if v:
                want.append(want[-1] + int(v))
        for x in (sl, torch.from_numpy(sl), sl.astype(np.int64), np.asfortranarray(sl),
                  sl.astype(">i4")):
            got = cu_seqlens_of(x)
            assert isinstance(got, type(x) if isinstance(x, torch.Tensor) else np.ndarray)
            got = np.asarray(got)
            assert got.dtype == np.int32 and got.tolist() == want, (shape, x, got, want)

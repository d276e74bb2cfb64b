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

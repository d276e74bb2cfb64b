"""Token corpora (issue 26, docs/tokens.md): every format read in place against numpy's view of
the same bytes, each bad header / count / truncation a named error, windows / random / packed
rows, mixtures by weight, and the loader's guarantees proved on tokens: every token exactly
once per epoch, the same global batches for any world size and thread count, and bitwise-exact
resume after three successive resumes at random steps on 1 -> 2 -> 3 -> 2 ranks."""
import os
import random
import struct

import numpy as np
import pytest
import torch

import stoker
from token_corpora import (LLMC_GPT2, LLMC_LLAMA3, documents, stream, write_llmc,
                           write_megatron, write_nanogpt, write_numpy)

T = 8


def _arr(x):
    return x.numpy() if hasattr(x, "numpy") else np.asarray(x)


def _windows_ref(ids, T, r):
    """Row r of WINDOWS: (input_ids, labels) from the stream."""
    ids = np.asarray(ids, dtype=np.int64)
    return ids[r * T:r * T + T], ids[r * T + 1:r * T + T + 1]


def _check_windows(ds, ids, T):
    ids = np.asarray(ids, dtype=np.int64)
    assert len(ds) == (len(ids) - 1) // T
    for r in list(range(min(len(ds), 5))) + [len(ds) - 1]:
        rec = ds[r]
        x, y = _windows_ref(ids, T, r)
        assert np.array_equal(rec["input_ids"], x) and np.array_equal(rec["labels"], y), r


# ---- the formats ----

def test_nanogpt_uint16_and_uint32(tmp_path):
    ids = np.arange(1000) * 7 % 65000
    p = write_nanogpt(tmp_path / "train.bin", ids)
    ds = stoker.tokens.open_tokens(p, T)
    assert ds.format == "nanogpt" and ds.info["token_bytes"] == 2 and ds.info["n_tokens"] == 1000
    _check_windows(ds, ids, T)
    big = np.arange(1000, dtype=np.int64) * 100003 % (1 << 32)
    p4 = write_nanogpt(tmp_path / "big.bin", big, np.uint32)
    ds4 = stoker.tokens.open_tokens(p4, T, token_dtype="uint32")
    _check_windows(ds4, big, T)
    # read as uint16 it is twice as many (smaller) tokens: format= and token_dtype= decide
    assert stoker.tokens.open_tokens(p4, T).info["n_tokens"] == 2000


def test_llmc_shards_gpt2_and_llama3_one_stream(tmp_path):
    ids = np.arange(3000) % 50257
    paths = [write_llmc(tmp_path / f"fw_{k:06d}.bin", ids[k * 1000:(k + 1) * 1000])
             for k in range(3)]
    ds = stoker.tokens.open_tokens(str(tmp_path / "fw_*.bin"), T)
    assert ds.format == "llmc" and ds.info["n_tokens"] == 3000 and len(ds.shards) == 3
    _check_windows(ds, ids, T)  # windows cross the shard boundaries
    row = ds[1000 // T]  # tokens 1000..1008: the second shard's first
    assert row["input_ids"][0] == ids[1000]
    big = (np.arange(500) * 977 + 128000) % 128256
    p = write_llmc(tmp_path / "l3.bin", big, LLMC_LLAMA3)
    ds3 = stoker.tokens.open_tokens(p, T)
    assert ds3.info["token_bytes"] == 4
    _check_windows(ds3, big, T)
    assert paths


@pytest.mark.parametrize("dtype,split", [(np.uint16, 1), (np.int32, 3)])
def test_megatron_prefix_idx_or_bin(tmp_path, dtype, split):
    docs = documents(50, seed=1, eos=None)
    prefix = write_megatron(tmp_path / "corpus_text_document", docs, dtype=dtype, split=split)
    ids = stream(docs, np.int64)
    for path in (prefix, prefix + ".idx", prefix + ".bin"):
        ds = stoker.tokens.open_tokens(path, T)
        assert ds.format == "megatron"
        _check_windows(ds, ids, T)
        info = ds.info
        assert info["n_documents"] == 50 and info["boundaries"] and info["n_tokens"] == len(ids)
    # documents as records (stoker.Dataset, no seq_len): Megatron's documents, not sequences
    docs_ds = stoker.Dataset(prefix + ".idx")
    assert len(docs_ds) == 50
    got = np.frombuffer(docs_ds[7]["tokens"], dtype=dtype)
    assert np.array_equal(got, docs[7])


def test_megatron_several_prefixes_and_multimodal(tmp_path):
    a, b = documents(10, seed=2, eos=None), documents(12, seed=3, eos=None)
    pa = write_megatron(tmp_path / "a", a)
    pb = write_megatron(tmp_path / "b", b, multimodal=True)
    ds = stoker.tokens.open_tokens([pa, pb], T, tokens="packed")
    assert ds.info["n_documents"] == 22
    one = stoker.tokens.open_tokens([pa, pb], T)
    _check_windows(one, stream(a + b, np.int64), T)


@pytest.mark.parametrize("header,dtype", [(False, np.uint16), (False, np.uint32),
                                          (True, np.uint16), (True, np.uint32),
                                          (True, np.int32)])
def test_numpy_tokens_raw_and_npy(tmp_path, header, dtype):
    ids = np.arange(700) * 13 % 60000
    p = write_numpy(tmp_path / "part-0-00000.npy", ids, dtype, header=header)
    kw = {} if header or dtype == np.uint16 else {"token_dtype": "uint32"}
    ds = stoker.tokens.open_tokens(p, T, **kw)
    assert ds.format == "numpy-tokens"
    _check_windows(ds, ids, T)


def test_stk_token_column_round_trip(tmp_path):
    """stoker pack writes a corpus' documents to .stk (field tokens, metadata token_bytes);
    reading that column gives the same rows as the corpus itself, packed ones too."""
    docs = documents(80, seed=4)
    prefix = write_megatron(tmp_path / "m", docs)
    out = str(tmp_path / "m.stk")
    stoker.pack(prefix + ".idx", out)
    col = stoker.tokens.open_tokens(out, T)
    assert col.format == "token-column" and col.info["n_documents"] == 80
    _check_windows(col, stream(docs, np.int64), T)
    a = stoker.tokens.open_tokens(prefix, T, tokens="packed")
    b = stoker.tokens.open_tokens(out, T, tokens="packed")
    assert len(a) == len(b)
    for r in range(len(a)):
        for k in ("input_ids", "labels", "position_ids"):
            assert np.array_equal(a[r][k], b[r][k])
    # an int32 array column (fixed-length documents) and a column named by token_field=
    w = stoker.Writer(str(tmp_path / "arr.stk"), {"ids": ("int32", (16,)), "label": "int64"})
    for i in range(20):
        w.add({"ids": np.arange(16, dtype=np.int32) + 16 * i, "label": i})
    w.close()
    c = stoker.tokens.open_tokens(str(tmp_path / "arr.stk"), T, token_field="ids")
    _check_windows(c, np.arange(320), T)
    with pytest.raises(stoker.StokerInvalidError, match="label.*token ids|not token ids"):
        stoker.tokens.open_tokens(str(tmp_path / "arr.stk"), T, token_field="label")


def test_token_column_of_another_format_lmdb(tmp_path):
    """A column of a format without field extents (LMDB: each record read once at open for
    its length, through the source's own cursor) gives the same rows."""
    lmdb = pytest.importorskip("lmdb")
    docs = documents(40, seed=13)
    env = lmdb.open(str(tmp_path / "docs_lmdb"), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for i, d in enumerate(docs):
            txn.put(b"%08d" % i, np.asarray(d, np.uint16).tobytes())
    env.close()
    ds = stoker.tokens.open_tokens(str(tmp_path / "docs_lmdb"), T, token_field="value")
    assert ds.info["n_documents"] == 40 and ds.info["boundaries"]
    _check_windows(ds, stream(docs, np.int64), T)
    L = stoker.Loader(str(tmp_path / "docs_lmdb"), batch_size=4, seq_len=T, tokens="packed",
                      token_field="value", num_workers=2, pad_id=-1)
    x = np.concatenate([_arr(b["input_ids"]).copy() for b in L])
    assert np.array_equal(np.sort(x[x != -1]), np.sort(stream(docs, np.int64)))
    L.close()


def test_ids_int32_and_dataset_of_documents(tmp_path):
    ids = np.arange(400) % 1000
    p = write_nanogpt(tmp_path / "x.bin", ids)
    L = stoker.Loader(p, batch_size=4, seq_len=T, ids_dtype="int32")
    b = next(iter(L))
    assert b["input_ids"].dtype == torch.int32 and b["labels"].dtype == torch.int32
    assert b["input_ids"].shape == (4, T)
    L.close()
    d = stoker.Dataset(p)  # no seq_len: one document per file
    assert d.format == "nanogpt" and len(d) == 1


# ---- bad input: each a named error ----

def _raises(exc, match, path, **kw):
    with pytest.raises(exc) as e:
        stoker.tokens.open_tokens(path, T, **kw)
    msg = str(e.value)
    assert os.path.basename(str(path).replace(".idx", "").replace(".bin", "")) in msg, msg
    assert match in msg, msg
    return msg


def test_bad_llmc_and_nanogpt_files(tmp_path):
    ids = np.arange(100)
    p = write_llmc(tmp_path / "a.bin", ids, count=200)  # header says more than there is
    _raises(stoker.StokerFormatError, "truncated llm.c shard: its header says 200 tokens", p)
    p = write_llmc(tmp_path / "b.bin", ids, count=50)
    _raises(stoker.StokerFormatError, "does not match the file size", p)
    p = write_llmc(tmp_path / "c.bin", ids, version=3)
    _raises(stoker.StokerNotSupportedError, "version 3", p)
    with open(tmp_path / "d.bin", "wb") as f:
        f.write(struct.pack("<3i", LLMC_GPT2, 1, 10))  # the header cut short
    _raises(stoker.StokerFormatError, "truncated llm.c shard", tmp_path / "d.bin",
            format="llmc")
    p = write_llmc(tmp_path / "e.bin", ids)
    with open(p, "r+b") as f:
        f.write(struct.pack("<i", 12345))
    _raises(stoker.StokerFormatError, "bad magic 12345", p, format="llmc")
    with open(tmp_path / "odd.bin", "wb") as f:
        f.write(b"\x01\x00\x02")  # 3 bytes: not whole uint16 tokens
    _raises(stoker.StokerFormatError, "not a whole number of 2-byte tokens", tmp_path / "odd.bin")


def test_bad_megatron_index(tmp_path):
    docs = documents(5, seed=5, eos=None)

    def fresh(name, **kw):
        return write_megatron(tmp_path / name, docs, **kw)

    p = fresh("hdr")
    with open(p + ".idx", "r+b") as f:
        f.write(b"XXIDIDX")
    _raises(stoker.StokerFormatError, "no MMIDIDX", p + ".idx")
    p = fresh("ver", version=2)
    _raises(stoker.StokerNotSupportedError, "version 2", p)
    p = fresh("flt")
    with open(p + ".idx", "r+b") as f:
        f.seek(17)
        f.write(bytes([7]))
    _raises(stoker.StokerNotSupportedError, "float32", p)
    p = fresh("short")
    with open(p + ".idx", "r+b") as f:
        f.truncate(os.path.getsize(p + ".idx") - 8)
    _raises(stoker.StokerFormatError, "truncated, or the counts are corrupt", p)
    p = fresh("ptr", split=2)
    with open(p + ".idx", "r+b") as f:  # sequence 1's pointer moved
        s = struct.unpack("<Q", open(p + ".idx", "rb").read()[18:26])[0]
        f.seek(34 + 4 * s + 8)
        f.write(struct.pack("<q", 2))
    _raises(stoker.StokerFormatError, "not at", p)
    p = fresh("bin")
    with open(p + ".bin", "r+b") as f:
        f.truncate(os.path.getsize(p + ".bin") - 2)
    _raises(stoker.StokerFormatError, "truncated: its index says", p)
    p = fresh("extra")
    with open(p + ".bin", "ab") as f:
        f.write(b"\0\0")
    _raises(stoker.StokerFormatError, "does not match the file size", p)
    p = fresh("docidx")
    raw = bytearray(open(p + ".idx", "rb").read())
    raw[-8:] = struct.pack("<q", 99)  # the last entry must be the sequence count
    open(p + ".idx", "wb").write(bytes(raw))
    _raises(stoker.StokerFormatError, "corrupt document index", p)


def test_bad_npy_and_arguments(tmp_path):
    p = write_numpy(tmp_path / "f.npy", np.arange(10), np.float32, header=True)
    _raises(stoker.StokerNotSupportedError, "not token ids", p)
    p2 = str(tmp_path / "two.npy")
    np.save(p2, np.zeros((4, 4), np.uint16))
    _raises(stoker.StokerNotSupportedError, "not a 1-D token array", p2)
    p3 = write_numpy(tmp_path / "t.npy", np.arange(100), np.uint16, header=True)
    with open(p3, "r+b") as f:
        f.truncate(os.path.getsize(p3) - 10)
    _raises(stoker.StokerFormatError, "truncated .npy", p3)
    ok = write_nanogpt(tmp_path / "ok.bin", np.arange(100))
    with pytest.raises(stoker.StokerInvalidError, match="ok.bin: 100 tokens make no row"):
        stoker.tokens.open_tokens(ok, 200)
    with pytest.raises(stoker.StokerInvalidError, match="packing needs document boundaries"):
        stoker.tokens.open_tokens(ok, T, tokens="packed")
    with pytest.raises(stoker.StokerInvalidError, match="seq_len"):
        stoker.Loader(ok, batch_size=2, seq_len=0)
    with pytest.raises(stoker.StokerInvalidError, match="tokens="):
        stoker.Loader(ok, batch_size=2, seq_len=T, tokens="sliding")
    with pytest.raises(stoker.StokerInvalidError, match="give seq_len"):
        stoker.Loader(ok, batch_size=2, eos=0)
    with pytest.raises(stoker.StokerInvalidError, match="eos"):
        stoker.Loader(ok, batch_size=2, seq_len=T, eos=-3)


def test_file_truncated_while_open_names_it(tmp_path):
    p = write_nanogpt(tmp_path / "shrink.bin", np.arange(1000))
    L = stoker.Loader(p, batch_size=4, seq_len=T, num_workers=1, prefetch=1)
    with open(p, "r+b") as f:
        f.truncate(100)
    with pytest.raises(stoker.Error, match="shrink.bin"):
        for _ in L:
            pass
    L.close()


# ---- rows ----

def _epoch(loader):
    return [{k: _arr(v).copy() for k, v in b.items()} for b in loader]


def _cat(batches, key):
    return np.concatenate([b[key] for b in batches])


@pytest.mark.parametrize("shuffle", [False, True])
def test_windows_every_token_once_per_epoch(tmp_path, shuffle):
    n = 8 * 61 + 5
    p = write_nanogpt(tmp_path / "w.bin", np.arange(n))
    L = stoker.Loader(p, batch_size=7, seq_len=T, shuffle=shuffle, seed=3, num_workers=2)
    orders = []
    for _ in range(2):
        b = _epoch(L)
        x = _cat(b, "input_ids")
        assert np.array_equal(np.sort(x.ravel()), np.arange(61 * T))  # the tail: (n-1) mod T
        assert np.array_equal(_cat(b, "labels"), x + 1)
        orders.append(_cat(b, "index"))
    assert shuffle == (not np.array_equal(orders[0], orders[1]))
    assert L.dataset.info["n_unused"] == n - 61 * T
    L.close()


def test_random_offsets_per_seed_and_epoch(tmp_path):
    n = 5000
    p = write_nanogpt(tmp_path / "r.bin", np.arange(n))

    def run(seed, epochs=2, world=1):
        Ls = [stoker.Loader(p, batch_size=8 // world, seq_len=T, tokens="random", seed=seed,
                            shuffle=True, rank=r, world_size=world, num_workers=1 + r % 2)
              for r in range(world)]
        out = []
        for _ in range(epochs):
            per = [_epoch(L) for L in Ls]
            out.append(np.concatenate([np.concatenate([per[r][s]["input_ids"]
                                                       for r in range(world)])
                                       for s in range(len(per[0]))]))
        for L in Ls:
            L.close()
        return out

    a = run(1)
    x = a[0]
    assert x.shape[1] == T and len(x) == (n - 1) // T
    assert np.all(np.diff(x, axis=1) == 1) and x.min() >= 0 and x.max() < n - 1
    assert not np.array_equal(np.sort(x[:, 0]), np.sort(a[1][:, 0]))  # new offsets each epoch
    assert len(np.unique(x[:, 0])) > len(x) * 0.8  # not the windows' grid
    assert np.any(x[:, 0] % T != 0)
    b = run(1, world=2)
    assert all(np.array_equal(u, v) for u, v in zip(a, b))
    assert not np.array_equal(run(2, epochs=1)[0], a[0])


def _packed_corpus(tmp_path, n_docs=120, seed=6, mean=6):
    """Documents whose tokens are consecutive numbers (token = its stream position + 1), with a
    document index (Megatron): a token's label is itself + 1 inside its document."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 4 * mean, n_docs)
    lens[3] = 3 * T + 2  # longer than a row: split
    lens[10] = 2 * T
    pos = np.concatenate([[0], np.cumsum(lens)])
    docs = [np.arange(pos[d], pos[d + 1]) + 1 for d in range(n_docs)]
    prefix = write_megatron(tmp_path / "packed", docs)
    return prefix, docs


def _check_packed_batch(b, ends, T):
    x, y, pos = b["input_ids"], b["labels"], b["position_ids"]
    assert x.shape[1] == T
    for r in range(len(x)):
        for j in range(T):
            if x[r, j] == -1:  # padding: its own piece, never a target
                assert y[r, j] == -100
                assert pos[r, j] == (0 if j == 0 or x[r, j - 1] != -1 else pos[r, j - 1] + 1)
                continue
            if pos[r, j] > 0:
                assert x[r, j] == x[r, j - 1] + 1 and pos[r, j] == pos[r, j - 1] + 1
            assert y[r, j] == (-100 if x[r, j] in ends else x[r, j] + 1), (r, j)
    lens = b["seq_lens"]  # each row's piece lengths (padding one), then zeros
    assert lens.dtype == np.int32 and np.all(lens.sum(axis=1) == T)
    for r in range(len(x)):
        starts = np.flatnonzero(pos[r] == 0)
        want = np.diff(np.append(starts, T))
        assert np.array_equal(lens[r][:len(want)], want) and not lens[r][len(want):].any()
    cu = b["cu_seqlens"]
    flat = pos.reshape(-1)
    assert cu.dtype == np.int32 and cu[-1] == flat.size
    assert np.array_equal(cu[:-1], np.flatnonzero(flat == 0))


@pytest.mark.parametrize("packing", ["best-fit", "first-fit"])
def test_packed_documents_once_per_epoch(tmp_path, packing):
    prefix, docs = _packed_corpus(tmp_path)
    ends = {int(d[-1]) for d in docs}
    total = sum(len(d) for d in docs)
    L = stoker.Loader(prefix, batch_size=5, seq_len=T, tokens="packed", packing=packing,
                      pad_id=-1, shuffle=True, seed=1, num_workers=2, output="numpy")
    info = L.dataset.info
    assert info["n_padding"] == info["n_rows"] * T - total and info["packing"] == packing
    for _ in range(2):
        batches = _epoch(L)
        for b in batches:
            _check_packed_batch(b, ends, T)
        x = _cat(batches, "input_ids")
        got = np.sort(x[x != -1])
        assert np.array_equal(got, np.arange(1, total + 1))  # every token exactly once
    L.close()


def test_packing_waste_best_fit_not_worse(tmp_path):
    docs = documents(3000, seed=7, mean=T * 8 // 4, lognormal=True)
    prefix = write_megatron(tmp_path / "ln", docs)
    bf = stoker.tokens.open_tokens(prefix, 8 * T, tokens="packed").info
    ff = stoker.tokens.open_tokens(prefix, 8 * T, tokens="packed", packing="first-fit").info
    assert bf["n_row_tokens"] == ff["n_row_tokens"] == sum(len(d) for d in docs)
    for i in (bf, ff):
        assert i["n_padding"] == i["n_rows"] * 8 * T - i["n_row_tokens"]
        assert i["n_padding"] < 0.1 * i["n_rows"] * 8 * T
    assert bf["n_rows"] <= ff["n_rows"] + 1


def test_packed_from_eos_and_bos(tmp_path):
    docs = documents(60, seed=8, eos=0, vocab=500)
    p = write_nanogpt(tmp_path / "e.bin", stream(docs))
    info = stoker.tokens.open_tokens(p, T, tokens="packed", eos=0).info
    assert info["n_documents"] == 60 and info["boundaries"]
    ds = stoker.tokens.open_tokens(p, T, tokens="packed", eos=0, pad_id=-1)
    # the eos token ends its document: its label is -100; the one before it predicts it
    n_eos = 0
    for r in range(len(ds)):
        rec = ds[r]
        x, y, pos = rec["input_ids"], rec["labels"], rec["position_ids"]
        for j in range(T):
            piece_end = j + 1 == T or pos[j + 1] == 0
            if x[j] == -1:
                assert y[j] == -100  # padding
            elif x[j] == 0 and piece_end:
                assert y[j] == -100, (r, j)  # a document's last token predicts nothing
                n_eos += 1
            elif not piece_end:
                assert y[j] == x[j + 1], (r, j)
    assert n_eos == 60  # every document's eos
    # llm.c's convention: the separator starts each document (bos=)
    bos_docs = [np.concatenate([[50256], d[:-1]]) for d in documents(30, seed=9, vocab=500)]
    pb = write_llmc(tmp_path / "b.bin", stream(bos_docs))
    ib = stoker.tokens.open_tokens(pb, T, tokens="packed", bos=50256).info
    assert ib["n_documents"] == 30


# ---- mixtures ----

def _mix_corpora(tmp_path, sizes=(300, 200, 100)):
    paths = []
    for k, n in enumerate(sizes):  # corpus k's tokens: k * 100000 + position (int32 ids)
        ids = np.arange(n * T + 1) + k * 100000
        paths.append(write_nanogpt(tmp_path / f"c{k}.bin", ids, np.uint32))
    return paths


def test_mix_exact_over_every_window_and_counts(tmp_path):
    paths = _mix_corpora(tmp_path)
    w = (0.7, 0.2, 0.1)
    m = stoker.mix({paths[0]: w[0], paths[1]: w[1], paths[2]: w[2]})
    L = stoker.Loader(m, batch_size=10, seq_len=T, token_dtype="uint32", shuffle=True, seed=4,
                      num_workers=2)
    assert len(L.dataset) == 600
    seen = [[], [], []]
    for epoch in range(3):
        batches = _epoch(L)
        src = _cat(batches, "source")
        x = _cat(batches, "input_ids")
        assert np.array_equal(x[:, 0] // 100000, src)  # each row from its source
        # every window of positions holds each source within 2 of its share
        c = np.zeros((len(src) + 1, 3))
        c[1:] = np.cumsum(np.eye(3)[src], axis=0)
        for d in range(3):
            for size in range(1, len(src) + 1, 7):
                cnt = c[size:, d] - c[:-size, d]
                assert np.all(np.abs(cnt - w[d] * size) <= 2), (d, size)
        for d in range(3):
            seen[d].extend((x[src == d, 0] % 100000 // T).tolist())
    # each corpus' rows: every row once per pass over it (web repeats, books is subsampled)
    for d, n in enumerate((300, 200, 100)):
        per = {0: 420, 1: 120, 2: 60}[d]
        rows = seen[d]
        assert len(rows) == 3 * per
        for k in range(len(rows) // n):
            assert sorted(rows[k * n:(k + 1) * n]) == list(range(n)), (d, k)
    st = L.stats()["sources"]
    assert st == {paths[0]: 1260, paths[1]: 360, paths[2]: 180}
    info = L.dataset.info
    assert [p["per_epoch"] for p in info["parts"]] == [420, 120, 60]
    L.close()


def test_mix_of_packed_corpora(tmp_path):
    """Packed corpora of different document lengths mix (their seq_lens widths differ: the
    mixture's is the widest, zeros after a corpus' own), and resume like any mixture."""
    a = write_megatron(tmp_path / "short", documents(200, seed=14, mean=3, eos=None))
    b = write_megatron(tmp_path / "long", documents(100, seed=15, mean=20, eos=None))
    m = stoker.mix({a: 1, b: 1})
    L = stoker.Loader(m, batch_size=4, seq_len=T, tokens="packed", shuffle=True, num_workers=2,
                      output="numpy")
    P = L.dataset.fields[3]["shape"][0]
    assert L.dataset.fields[3]["name"] == "seq_lens"
    parts = [stoker.tokens.open_tokens(p, T, tokens="packed").fields[3]["shape"][0] for p in (a, b)]
    assert P == max(parts) and min(parts) < P
    n = 0
    for bt in L:
        pos, lens = bt["position_ids"], bt["seq_lens"]
        assert lens.shape[1] == P and np.all(lens.sum(axis=1) == T)
        for r in range(len(pos)):
            want = np.diff(np.append(np.flatnonzero(pos[r] == 0), T))
            assert np.array_equal(lens[r][:len(want)], want) and not lens[r][len(want):].any()
        assert np.array_equal(bt["cu_seqlens"][:-1], np.flatnonzero(pos.reshape(-1) == 0))
        n += len(pos)
    assert n == len(L.dataset)
    L.close()


def test_mix_refuses_mismatched_parts(tmp_path):
    paths = _mix_corpora(tmp_path, (20, 20, 20))
    with pytest.raises(stoker.StokerInvalidError, match="every weight is 0"):
        stoker.mix({paths[0]: 0, paths[1]: 0})
    with pytest.raises(stoker.StokerInvalidError, match="needs seq_len"):
        stoker.Loader(stoker.mix({paths[0]: 1}), batch_size=2)
    with pytest.raises(stoker.StokerInvalidError, match="weight"):
        stoker.mix({paths[0]: -1})
    m = stoker.mix({paths[0]: 1, stoker.Corpus(paths[1], token_dtype="uint16"): 1})
    L = stoker.Loader(m, batch_size=4, seq_len=T, token_dtype="uint32")  # per-corpus options
    assert L.dataset.info["n_parts"] == 2
    L.close()


# ---- the loader's guarantees ----

def _global_steps(loaders, its, k):
    """k global batches from world = len(loaders) ranks in lockstep (a rank's epoch ends with
    the others': the next epoch starts on all). Each global batch is the ranks' batches
    concatenated in rank order."""
    out = []
    while len(out) < k:
        parts = []
        for r, L in enumerate(loaders):
            b = next(its[r], None)
            if b is None:
                its[r] = iter(L)
                b = next(its[r], None)
            parts.append({key: _arr(v).copy() for key, v in b.items()})
        g = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
        if "cu_seqlens" in g:  # the global batch's boundaries (each rank has its own)
            g["cu_seqlens"] = stoker.tokens.cu_seqlens(g["position_ids"])
        out.append(g)
    return out


def _loaders(data, world, G, kw, threads):
    return [stoker.Loader(data, batch_size=G // world, rank=r, world_size=world,
                          num_workers=threads[r % len(threads)], **kw) for r in range(world)]


def _corpus_for(tmp_path, mode):
    if mode == "mix":
        paths = _mix_corpora(tmp_path, (40, 30, 20))
        return stoker.mix({paths[0]: 5, paths[1]: 3, paths[2]: 2}, samples=60), \
            {"tokens": "windows", "token_dtype": "uint32"}
    if mode == "packed":
        # Its row count is no multiple of 6: an epoch's last global step is padded by wrapping
        # (DistributedSampler's rule), differently for each world size; drop_last keeps every
        # world size to the same whole steps.
        prefix, _ = _packed_corpus(tmp_path, n_docs=60)
        return prefix, {"tokens": "packed", "drop_last": True}
    p = write_nanogpt(tmp_path / "g.bin", np.arange(60 * T + 1))
    return p, {"tokens": mode}


@pytest.mark.parametrize("mode", ["windows", "random", "packed", "mix"])
def test_three_resumes_on_1_2_3_2_ranks_equal_uninterrupted(tmp_path, mode):
    """The issue's resume check: an uninterrupted run on one rank against a run stopped at
    random steps and resumed from state_dict() three times, on 1 -> 2 -> 3 -> 2 ranks with
    varying thread counts: the same global batches, bit for bit, across epoch boundaries."""
    data, kw = _corpus_for(tmp_path, mode)
    kw = dict(kw, seq_len=T, shuffle=True, seed=11)
    G = 6
    ref_L = _loaders(data, 1, G, kw, [2])
    n_steps = 3 * len(ref_L[0])  # three epochs
    ref = _global_steps(ref_L, [iter(L) for L in ref_L], n_steps)
    ref_L[0].close()
    rnd = random.Random(5)
    for trial in range(2):
        cuts = sorted(rnd.sample(range(1, n_steps), 3))
        got, state = [], None
        for world, threads, (lo, hi) in zip((1, 2, 3, 2), ([1], [2, 1], [1, 3, 2], [3, 1]),
                                            zip([0] + cuts, cuts + [n_steps])):
            Ls = _loaders(data, world, G, kw, threads)
            if state is not None:
                for L in Ls:
                    L.load_state_dict(state)
            its = [iter(L) for L in Ls]
            got += _global_steps(Ls, its, hi - lo)
            states = [L.state_dict() for L in Ls]
            assert all(s == states[0] for s in states)  # the position is global
            state = states[0]
            for L in Ls:
                L.close()
        assert len(got) == len(ref)
        for s, (a, b) in enumerate(zip(ref, got)):
            assert a.keys() == b.keys()
            for key in a:
                assert a[key].dtype == b[key].dtype and np.array_equal(a[key], b[key]), \
                    (trial, s, key, cuts)


def test_ranks_from_torchrun_environment(tmp_path, monkeypatch):
    p = write_nanogpt(tmp_path / "t.bin", np.arange(40 * T + 1))
    explicit = stoker.Loader(p, batch_size=4, seq_len=T, shuffle=True, rank=1, world_size=2)
    want = _epoch(explicit)
    explicit.close()
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    L = stoker.Loader(p, batch_size=4, seq_len=T, shuffle=True)
    assert (L.rank, L.world_size) == (1, 2)
    got = _epoch(L)
    assert all(np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(want, got))
    L.close()


def test_pinned_request_and_batches_are_plain_tensors(tmp_path):
    """pin_memory=True without CUDA warns and stays pageable (the GPU run checks the pinned,
    copied-ahead path: tests/gpu and bench/RESULTS.md "Issue 26")."""
    if torch.cuda.is_available():
        pytest.skip("with CUDA the ring is pinned: tests/gpu checks it")
    p = write_nanogpt(tmp_path / "p.bin", np.arange(20 * T + 1))
    with pytest.warns(UserWarning, match="pin_memory"):
        L = stoker.Loader(p, batch_size=4, seq_len=T, pin_memory=True)
    b = next(iter(L))
    assert isinstance(b["input_ids"], torch.Tensor) and b["input_ids"].dtype == torch.int64
    L.close()


# ---- remote corpora (s3:// and http:// through the byte sources) ----

@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    from s3util import S3Server, s3rver_command
    cmd = s3rver_command()
    if not cmd:
        pytest.skip("s3rver cannot be installed here (npm)")
    tmp = tmp_path_factory.mktemp("s3tok")
    srv = S3Server(cmd, tmp / "root").start()
    try:
        local = tmp / "local"
        local.mkdir()
        docs = documents(200, seed=12, eos=None)
        write_megatron(local / "corpus", docs, split=2)
        ids = stream(docs, np.int64)
        for k in range(2):
            write_llmc(local / f"fw_{k:06d}.bin", ids[k * 2000:(k + 1) * 2000])
        srv.put_dir(local, "tok")
        srv.local, srv.ids = local, ids
        yield srv
    finally:
        srv.stop()


def test_remote_megatron_and_llmc_over_s3_and_http(s3, monkeypatch):
    from s3util import anonymous_endpoint
    endpoint = anonymous_endpoint(monkeypatch, s3.endpoint)
    local = stoker.tokens.open_tokens(str(s3.local / "corpus"), T, tokens="packed")
    for data in ("s3://data/tok/corpus", "s3://data/tok/corpus.idx",
                 f"{endpoint}/data/tok/corpus.idx"):
        ds = stoker.tokens.open_tokens(data, T, tokens="packed")
        assert ds.format == "megatron" and len(ds) == len(local)
        for r in range(0, len(ds), 7):
            assert all(np.array_equal(ds[r][k], local[r][k]) for k in ds[r])
    L = stoker.Loader("s3://data/tok/fw_{000000..000001}.bin", batch_size=5, seq_len=T,
                      shuffle=True, num_workers=2)
    assert L.dataset.format == "llmc"
    x = np.concatenate([_arr(b["input_ids"]).copy() for b in L])
    n = (4000 - 1) // T
    assert np.array_equal(np.sort(x.ravel()), np.sort(s3.ids[:n * T]))
    L.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (GPU run)")
def test_device_batches_copied_ahead_equal_host(tmp_path):
    """On a GPU the ring is pinned and each batch copied ahead on stoker's stream, as for
    images: the device batches equal the host ones, packed rows and cu_seqlens included."""
    prefix, _ = _packed_corpus(tmp_path)
    kw = dict(batch_size=6, seq_len=T, tokens="packed", shuffle=True, seed=2)
    host = _epoch(stoker.Loader(prefix, **kw))
    L = stoker.Loader(prefix, device="cuda", **kw)
    dev = [{k: v.cpu().numpy() for k, v in b.items()} for b in L]
    st = L.stats()
    assert st["pinned"] and st["copies"] >= len(dev) and st["device"] >= 0
    assert len(host) == len(dev)
    for a, b in zip(host, dev):
        for k in a:
            assert np.array_equal(a[k], b[k]), k
    L.close()

"""Writers of the token corpus formats stoker reads, from their published layouts (docs/formats.md
"Token corpora"), for the tests and bench/bench_tokens.py: nanoGPT's raw ids, llm.c shards,
Megatron indexed datasets (.idx + .bin), numpy token arrays (raw or .npy), and a document stream
whose every token says where it is."""
import struct

import numpy as np

LLMC_GPT2, LLMC_LLAMA3 = 20240520, 20240801
MEGATRON_CODES = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5,
                  np.float64: 6, np.float32: 7, np.uint16: 8}


def documents(n_docs, seed=0, mean=40, eos=0, vocab=60000, lognormal=False):
    """n_docs documents (lists of ids in 1..vocab-1, each ending with `eos` unless eos is None);
    lengths uniform in 1..2*mean (or log-normal with that mean)."""
    rng = np.random.default_rng(seed)
    if lognormal:
        sigma = 1.0
        lens = np.maximum(1, rng.lognormal(np.log(mean) - sigma ** 2 / 2, sigma, n_docs)).astype(
            np.int64)
    else:
        lens = rng.integers(1, 2 * mean + 1, n_docs)
    docs = []
    for n in lens:
        d = rng.integers(1, vocab, int(n)).astype(np.int64)
        if eos is not None:
            d[-1] = eos
        docs.append(d)
    return docs


def stream(docs, dtype=np.uint16):
    return np.concatenate(docs).astype(dtype) if docs else np.zeros(0, dtype)


def write_nanogpt(path, ids, dtype=np.uint16):
    np.asarray(ids, dtype=dtype).tofile(path)
    return str(path)


def write_llmc(path, ids, magic=LLMC_GPT2, version=None, count=None):
    """llm.c's write_datafile: 256 int32 (magic, version, token count), then the ids."""
    dtype = np.uint16 if magic == LLMC_GPT2 else np.uint32
    version = version if version is not None else (1 if magic == LLMC_GPT2 else 7)
    ids = np.asarray(ids, dtype=dtype)
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [magic, version, len(ids) if count is None else count]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(ids.tobytes())
    return str(path)


def write_megatron(prefix, docs, dtype=np.uint16, split=1, version=1, multimodal=False):
    """Megatron's _IndexWriter: each document as `split` sequences (back to back in the .bin),
    the index header, lengths, pointers, document index (and modes). Returns the prefix."""
    seqs, doc_idx = [], [0]
    for d in docs:
        parts = np.array_split(np.asarray(d), split) if len(d) >= split else [np.asarray(d)]
        seqs.extend(parts)
        doc_idx.append(len(seqs))
    width = np.dtype(dtype).itemsize
    lengths = np.array([len(s) for s in seqs], dtype=np.int32)
    pointers = np.zeros(len(seqs), dtype=np.int64)
    if len(seqs) > 1:
        pointers[1:] = np.cumsum(lengths[:-1].astype(np.int64) * width)
    with open(f"{prefix}.bin", "wb") as f:
        for s in seqs:
            f.write(np.asarray(s, dtype=dtype).tobytes())
    with open(f"{prefix}.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", version))
        f.write(struct.pack("<B", MEGATRON_CODES[np.dtype(dtype).type]))
        f.write(struct.pack("<Q", len(seqs)))
        f.write(struct.pack("<Q", len(doc_idx)))
        f.write(lengths.tobytes())
        f.write(pointers.tobytes())
        f.write(np.array(doc_idx, dtype=np.int64).tobytes())
        if multimodal:
            f.write(np.zeros(len(seqs), dtype=np.int8).tobytes())
    return str(prefix)


def write_numpy(path, ids, dtype=np.uint16, header=False):
    """OLMo's raw memmap (no header) or a real .npy."""
    ids = np.asarray(ids, dtype=dtype)
    if header:
        np.save(path, ids)
    else:
        ids.tofile(path)
    return str(path)

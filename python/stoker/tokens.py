"""Token corpora for language-model pretraining (docs/tokens.md).

``stoker.Loader(corpus, batch_size=B, seq_len=T, tokens="windows" | "random" | "packed")``
reads a tokenized corpus in place and yields dicts of ``input_ids`` and ``labels`` (int64
``[B, T]``, labels shifted by one), with packing also ``position_ids`` ``[B, T]`` and
``cu_seqlens`` (int32, the flattened document boundaries of the batch, as varlen attention takes
them). ``corpus`` is a path of a format stoker detects (nanoGPT ``.bin``, llm.c shards, a
Megatron ``.idx``/``.bin`` pair or its prefix, numpy token arrays, a ``.stk`` token column;
``format=`` overrides) or ``stoker.mix({corpus: weight, ...})``. Tokenizing text is not part of
stoker: the input is token ids.

The rows are records like any other: epochs, shuffle, rank slices and ``state_dict()`` resume
work as for every stoker loader.
"""
import os
import sys

import numpy as np

from . import _core
from .dataset import Dataset

__all__ = ["mix", "Mix", "Corpus", "TokenDataset", "open_tokens", "MODES", "PACKINGS"]

MODES = {"windows": 0, "random": 1, "packed": 2, "documents": 3}
PACKINGS = {"best-fit": 0, "first-fit": 1}
_TOKEN_DTYPES = {None: 0, "uint16": 2, "uint32": 4, np.uint16: 2, np.uint32: 4}
_IDS_DTYPES = ("int64", "int32")


def _invalid(msg):
    return _core.StokerInvalidError(msg)


class Corpus:
    """Corpus(data, format=None, eos=None, bos=None, token_dtype=None, token_field=None,
    name=None): one corpus of a mixture with its own options (a plain path takes the Loader's).
    ``name`` labels it in ``stats()["sources"]`` (default: the path)."""

    __slots__ = ("data", "options", "name")

    def __init__(self, data, *, format=None, eos=None, bos=None, token_dtype=None,
                 token_field=None, name=None):
        self.data = data
        self.options = {k: v for k, v in dict(format=format, eos=eos, bos=bos,
                                               token_dtype=token_dtype,
                                               token_field=token_field).items() if v is not None}
        self.name = name if name is not None else _name_of(data)

    def __repr__(self):
        return f"stoker.Corpus({self.data!r}, {self.options})"


def _name_of(data):
    if isinstance(data, (list, tuple)):
        return ",".join(os.fsdecode(os.fspath(d)) for d in data)
    return os.fsdecode(os.fspath(data))


class Mix:
    """A blend of corpora by weight, made by :func:`mix`; give it to stoker.Loader with a
    seq_len. Not a dataset by itself (it has no rows until seq_len and tokens= are known)."""

    __slots__ = ("parts", "samples")

    def __init__(self, parts, samples):
        self.parts, self.samples = parts, samples

    def __repr__(self):
        inner = ", ".join(f"{c.name!r}: {w}" for c, w in self.parts)
        return f"stoker.mix({{{inner}}}, samples={self.samples})"


def mix(weights, samples=None):
    """mix({corpus: weight, ...}, samples=None): corpora blended by weight (need not sum to 1).

    Position p of every epoch reads a row of the corpus that Megatron's blending rule picks
    (the one furthest below its share so far), so any window of the epoch holds each corpus
    within a couple of rows of its share. ``samples``: rows per epoch (default: the corpora's
    rows summed); a corpus whose share exceeds its rows repeats (a new permutation each pass),
    one whose share is smaller is subsampled and continued the next epoch. Keys are paths (or
    lists of paths) or :class:`Corpus` objects; batches get ``source`` (int64: the corpus'
    position in the dict) and ``loader.stats()["sources"]`` counts the rows each delivered."""
    if not isinstance(weights, dict) or not weights:
        raise _invalid(f"mix() takes a dict {{corpus: weight}}, not {weights!r}")
    parts = []
    for corpus, w in weights.items():
        if not isinstance(corpus, Corpus):
            corpus = Corpus(corpus)
        try:
            w = float(w)
        except (TypeError, ValueError):
            raise _invalid(f"mix(): the weight of {corpus.name!r} is {w!r}, not a number") \
                from None
        if not (w >= 0) or w == float("inf"):
            raise _invalid(f"mix(): the weight of {corpus.name!r} is {w} (weights are finite "
                           "and >= 0)")
        parts.append((corpus, w))
    if sum(w for _, w in parts) <= 0:
        raise _invalid("mix(): every weight is 0")
    if len(parts) > 255:
        raise _invalid(f"mix(): {len(parts)} corpora (at most 255)")
    if samples is not None:
        samples = int(samples)
        if samples < 1:
            raise _invalid(f"mix(samples={samples}): at least 1 row per epoch")
    return Mix(parts, samples)


class TokenDataset(Dataset):
    """A token corpus as a stoker Dataset of rows (or documents): ``ds.info`` has its facts
    (tokens, documents, rows, padding, the document-length histogram, ...)."""

    @property
    def info(self):
        return _core.tokens_info(self)

    def __repr__(self):
        if self.closed:
            return "<stoker.TokenDataset (closed)>"
        i = self.info
        return (f"<stoker.TokenDataset {i['format']}: {i['n_tokens']} tokens, {i['n_documents']} "
                f"documents, {i['n_rows']} {i['mode']} rows of {i['seq_len']}>")


def _options(format=None, eos=None, bos=None, token_dtype=None, token_field=None):
    if token_dtype is not None and not isinstance(token_dtype, str):
        token_dtype = np.dtype(token_dtype).name
    if token_dtype not in _TOKEN_DTYPES:
        raise _invalid(f"token_dtype={token_dtype!r}: 'uint16' or 'uint32' (the stored ids of "
                       "headerless files)")
    for name, v in (("eos", eos), ("bos", bos)):
        if v is not None and (not isinstance(v, (int, np.integer)) or isinstance(v, bool) or
                              v < 0):
            raise _invalid(f"{name}={v!r}: a token id (int >= 0)")
    return dict(format=format, eos=-1 if eos is None else int(eos),
                bos=-1 if bos is None else int(bos), token_bytes=_TOKEN_DTYPES[token_dtype],
                token_field=token_field)


def open_tokens(data, seq_len=None, tokens="windows", *, packing="best-fit", format=None,
                eos=None, bos=None, token_dtype=None, token_field=None, ids_dtype="int64",
                pad_id=0, verify=True, cache_dir=None, cache_limit=None):
    """A :class:`TokenDataset` of a corpus (a path, list of paths, or :class:`Corpus`) or of a
    :func:`mix`: rows of ``seq_len`` tokens made as ``tokens=`` says ("windows", "random",
    "packed"; "documents": the documents themselves, no seq_len)."""
    if tokens not in MODES:
        raise _invalid(f"tokens={tokens!r}: 'windows', 'random', 'packed' (or 'documents')")
    if packing not in PACKINGS:
        raise _invalid(f"packing={packing!r}: 'best-fit' or 'first-fit'")
    if ids_dtype not in _IDS_DTYPES:
        raise _invalid(f"ids_dtype={ids_dtype!r}: 'int64' or 'int32'")
    if tokens != "documents":
        if seq_len is None:
            raise _invalid("a token corpus needs seq_len= (tokens per row)")
        if not isinstance(seq_len, (int, np.integer)) or isinstance(seq_len, bool) or \
                not 1 <= seq_len <= 1 << 30:
            raise _invalid(f"seq_len={seq_len!r}: an int from 1 to 2**30")
    if not isinstance(pad_id, (int, np.integer)) or isinstance(pad_id, bool):
        raise _invalid(f"pad_id={pad_id!r}: an int")
    if cache_dir is not None:
        cache_dir = os.fsdecode(os.fspath(cache_dir))
    if cache_limit is not None:
        cache_limit = str(cache_limit)
    common = dict(format=format, eos=eos, bos=bos, token_dtype=token_dtype,
                  token_field=token_field)

    def one(corpus):
        opts = dict(common)
        if isinstance(corpus, Corpus):
            opts.update(corpus.options)
            corpus = corpus.data
        return _core.tokens_open(
            TokenDataset, corpus, seq_len=int(seq_len or 0), mode=MODES[tokens],
            packing=PACKINGS[packing], ids_dtype=ids_dtype, pad_id=int(pad_id),
            verify=bool(verify), cache_dir=cache_dir, cache_limit=cache_limit,
            **_options(**opts))

    if not isinstance(data, Mix):
        return one(data)
    if tokens == "documents":
        raise _invalid("a mixture is made of rows: give seq_len= and tokens='windows', "
                       "'random' or 'packed'")
    parts = []
    try:
        for corpus, _ in data.parts:
            parts.append(one(corpus))
        ds = _core.tokens_mix(TokenDataset, parts, [w for _, w in data.parts],
                              samples=data.samples or 0)
    finally:
        for p in parts:
            if not p.closed:
                p.close()
    ds._names = [c.name for c, _ in data.parts]
    return ds


class LoaderTokens:
    """The Loader's side of a token corpus (the hook in loader.py): the dataset, and per batch
    cu_seqlens (packed rows) and the rows of each source (mixtures)."""

    def __init__(self, dataset, packed, names):
        self.dataset = dataset
        self._packed = packed
        self._names = names
        self._counts = np.zeros(len(names), dtype=np.int64) if names else None

    @property
    def finishes(self):
        """Whether finish() has anything to do (packed rows, a mixture)."""
        return self._packed or self._counts is not None

    def finish(self, batch):
        """Add cu_seqlens to a packed batch; count a mixture's sources."""
        if self._packed:
            batch["cu_seqlens"] = cu_seqlens_of(batch["seq_lens"])
        if self._counts is not None:
            src = batch["source"]
            src = src.cpu().numpy() if hasattr(src, "cpu") else np.asarray(src)
            self._counts += np.bincount(src, minlength=len(self._counts))[:len(self._counts)]

    def stats(self):
        if self._counts is None:
            return {}
        return {"sources": {n: int(c) for n, c in zip(self._names, self._counts)}}


def cu_seqlens_of(seq_lens):
    """cu_seqlens from a packed batch's seq_lens ([B, P], each row's piece lengths then
    zeros): int32 [n + 1], 0 then the running sum of the non-zero lengths (the same as
    cu_seqlens(position_ids), at a fraction of the cost). On the host the sum is one loop in
    the extension: numpy's mask, zeros and cumsum cost several times more per batch."""
    if isinstance(seq_lens, np.ndarray):
        return _host_cu_seqlens(seq_lens)
    if not seq_lens.is_cuda:  # a torch CPU tensor (torch is imported: it made it)
        return sys.modules["torch"].from_numpy(_host_cu_seqlens(seq_lens.numpy()))
    import torch
    s = seq_lens.reshape(-1)
    s = s[s > 0]
    return torch.cat([s.new_zeros(1), torch.cumsum(s, 0, dtype=torch.int32)])


def _host_cu_seqlens(s):
    try:  # a loader's seq_lens: C-contiguous int32
        return np.frombuffer(_core.tokens_cu_seqlens(s), dtype=np.int32)
    except (TypeError, BufferError, ValueError):  # any other array
        s = np.asarray(s).reshape(-1)
        s = s[s > 0]
        out = np.zeros(len(s) + 1, dtype=np.int32)
        np.cumsum(s, out=out[1:])
        return out


def cu_seqlens(position_ids):
    """The cumulative sequence lengths of a packed batch, as flash-attention's varlen kernels
    take them: int32 [n + 1], the offsets in the flattened [B * T] batch where each piece
    (a document, a piece of one, or a row's padding) starts, then B * T. Pieces start where
    position_ids is 0."""
    if hasattr(position_ids, "new_tensor"):  # torch
        import torch
        flat = position_ids.reshape(-1)
        starts = torch.nonzero(flat == 0, as_tuple=False).reshape(-1)
        end = torch.tensor([flat.numel()], device=flat.device, dtype=starts.dtype)
        return torch.cat([starts, end]).to(torch.int32)
    flat = np.asarray(position_ids).reshape(-1)
    return np.concatenate([np.flatnonzero(flat == 0), [flat.size]]).astype(np.int32)


def loader_corpus(data, seq_len, tokens, options, format, verify, cache_dir, cache_limit):
    """For stoker.Loader: a LoaderTokens when ``data`` is a token corpus (seq_len given, or a
    Mix, or a TokenDataset), else None (and token options are refused)."""
    given = {k: v for k, v in options.items() if v is not None}
    if isinstance(data, TokenDataset):
        if seq_len is not None or tokens is not None or given:
            raise _invalid("a TokenDataset already has its rows: give seq_len=/tokens=/... to "
                           "stoker.tokens.open_tokens, not to the Loader")
        info = data.info
        return LoaderTokens(data, info["mode"] == "packed", getattr(data, "_names", None))
    if seq_len is None and not isinstance(data, Mix):
        if tokens is not None or given:
            raise _invalid(f"{', '.join(sorted(given) + (['tokens'] if tokens else []))}= "
                           "read a token corpus: give seq_len= (tokens per row) too")
        return None
    if seq_len is None:
        raise _invalid("stoker.mix(...) needs seq_len= (tokens per row)")
    ds = open_tokens(data, seq_len, tokens or "windows", format=format, verify=verify,
                     cache_dir=cache_dir, cache_limit=cache_limit,
                     **{k: v for k, v in given.items()})
    return LoaderTokens(ds, (tokens or "windows") == "packed", getattr(ds, "_names", None))

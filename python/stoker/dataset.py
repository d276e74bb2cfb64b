"""Reading datasets and writing .stk shards from Python.

``Dataset`` opens a dataset of any format stoker reads (``.stk`` shards: a file, a
directory, a glob, a brace range or a list; an ImageFolder tree; ``.npy`` files) as records
0..N-1; the format is detected, ``format=`` overrides it. ``Writer`` writes one shard;
``write_shard`` writes records in one call; ``pack`` converts any dataset to ``.stk`` shards
with the library's one packer (the one ``stoker pack`` runs); ``pack_records`` writes shards
from Python dicts (records C cannot read: pickled LMDB values, Caffe Datums); ``pack_image_folder`` packs an
ImageFolder tree (one subfolder per class) with the schema ``stoker pack`` uses: ``image``
(the encoded file, bytes), ``label`` (int64, the class's position in the sorted class list,
as torchvision's ImageFolder numbers them) and ``path`` (bytes, relative to the root).
"""
import json
import os

import numpy as np

from . import _core

__all__ = ["Dataset", "Writer", "write_shard", "pack", "pack_records", "pack_image_folder",
           "formats", "IMAGE_EXTENSIONS"]

# torchvision's IMG_EXTENSIONS, so that records and labels line up with ImageFolder's samples
# (the loader decodes all of them: JPEG, PNG, WebP, TIFF, BMP, binary PPM/PGM)
IMAGE_EXTENSIONS = _core.image_extensions()  # the library's list (stk_image_extension)


def formats():
    """The formats stoker reads, as format= names them ("stk", "npy", "imagefolder", ...)."""
    return list(_core.formats())


class Dataset(_core.Dataset):
    """Dataset(data, verify=True, format=None, concat=False, *, cache_dir=None, cache_limit=None):
    a dataset opened as records 0..N-1.

    ``data`` is a path, a glob, a brace range ("train-{000..127}.stk") or a list of them, or a
    dict of ``.npy`` files ``{"image": "x.npy", "label": "y.npy"}`` (one field per key, named by
    it; the files share their first dimension);
    ``format`` names the format (see :func:`formats`) instead of detecting it; ``ds.format``
    says which was used. ``ds.describe(i)`` names where record i lives.

    ``len(ds)``, ``ds.fields`` (the schema), ``ds.shards``, ``ds.metadata`` (the first shard's
    writer metadata, parsed), ``ds.classes`` (ImageFolder class names, if recorded) and
    ``ds[i]``: record i as a dict (bytes fields as bytes, int64 as int, float32 as float, array
    fields as numpy arrays of their dtype and shape). Checksums are verified on read unless
    ``verify=False``. Shards of different packs (another dataset id or class list in their
    metadata) are refused together unless ``concat=True``.

    ``data`` may be s3:// or http(s):// URLs (docs/remote.md). Their bytes are cached on local
    disk in ``cache_dir`` (default ``STOKER_CACHE_DIR``; none when unset; ``""``: none), at most
    ``cache_limit`` bytes (an int or "20G", "512MB"; default ``STOKER_CACHE_LIMIT``, else 10G;
    at least one 4 MiB block, else StokerInvalidError at open).
    """

    def __getitem__(self, i):
        rec = self.read(i)
        for f in self.fields:
            if f["kind"] == "array":
                dtype = np.uint16 if f["dtype"] == "bfloat16" else np.dtype(f["dtype"])
                rec[f["name"]] = np.frombuffer(rec[f["name"]], dtype=dtype).reshape(f["shape"])
        return rec

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    @property
    def metadata(self):
        shards = self.shards
        if not shards:
            return {}
        try:
            return json.loads(shards[0]["metadata"])
        except ValueError as e:
            raise _core.StokerFormatError(
                "%s: writer metadata is not valid JSON (%s)" % (shards[0]["path"], e)) from None

    @property
    def classes(self):
        return self.metadata.get("classes")

    def __repr__(self):
        if self.closed:
            return "<stoker.Dataset (closed)>"
        names = ", ".join(f"{f['name']}:{f['kind']}" for f in self.fields)
        return f"<stoker.Dataset {len(self)} records, {len(self.shards)} shards, [{names}]>"


def _field_spec(name, spec):
    """A user's field spec -> the tuple _core.Writer takes."""
    if isinstance(spec, str):
        if spec in ("bytes", "int64", "float32"):
            return (name, spec)
        raise _core.StokerInvalidError(
            f"field {name!r}: kind {spec!r} is not bytes, int64, float32 or (dtype, shape)")
    try:
        dtype, shape = spec
    except (TypeError, ValueError):
        raise _core.StokerInvalidError(
            f"field {name!r}: an array field is (dtype, shape), got {spec!r}") from None
    if isinstance(shape, int):
        shape = (shape,)
    return (name, "array", _dtype_str(dtype), tuple(int(s) for s in shape))


def _dtype_str(dtype):
    s = str(dtype)
    if s.startswith("torch."):
        return s[6:]
    return s if s == "bfloat16" else np.dtype(dtype).name


class Writer:
    """Writer(path, fields, metadata=None, align=None): write one .stk shard.

    ``fields`` maps each field name to ``"bytes"``, ``"int64"``, ``"float32"`` or a
    ``(dtype, shape)`` pair for a fixed-shape array (a dict keeps its order; a list of
    (name, spec) pairs works too). ``metadata`` is a JSON-serialisable dict stored in the
    header. ``add(record)`` takes a dict (or a sequence in schema order); bytes fields take
    bytes-like objects, array fields numpy arrays (or anything numpy converts) of that shape.
    The shard appears under ``path`` only on ``close()`` (or leaving a ``with`` block without
    an exception); an abandoned writer leaves nothing.
    """

    def __init__(self, path, fields, metadata=None, align=None):
        items = list(fields.items()) if isinstance(fields, dict) else list(fields)
        self._specs = [_field_spec(n, s) for n, s in items]
        self._names = [s[0] for s in self._specs]
        meta = None if metadata is None else (
            metadata if isinstance(metadata, str) else json.dumps(metadata))
        self._w = _core.Writer(os.fspath(path), self._specs, meta, int(align or 0))

    @property
    def fields(self):
        return list(self._names)

    @property
    def n_records(self):
        """Records added so far."""
        return self._w.n_records

    count = n_records  # the name before 0.3

    @property
    def path(self):
        return self._w.path

    def add(self, record):
        if isinstance(record, dict):
            missing = [n for n in self._names if n not in record]
            if missing:
                raise _core.StokerInvalidError(f"record has no value for {missing}")
            values = [record[n] for n in self._names]
        else:
            values = list(record)
        for k, spec in enumerate(self._specs):
            if spec[1] == "array":
                dt = np.uint16 if spec[2] == "bfloat16" else np.dtype(spec[2])
                a = np.ascontiguousarray(values[k], dtype=dt)
                if a.shape != spec[3]:
                    raise _core.StokerInvalidError(
                        f"field {spec[0]!r}: expected shape {spec[3]}, got {a.shape}")
                values[k] = a
        self._w.add(values)

    def close(self):
        self._w.close()

    def abort(self):
        self._w.abort()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False


def write_shard(path, fields, records, metadata=None, align=None):
    """Write `records` (an iterable of dicts or sequences) to the shard `path`; returns the
    number of records written."""
    with Writer(path, fields, metadata, align) as w:
        for r in records:
            w.add(r)
        n = w.n_records
    return n


def pack(src, out, format=None, shard_size=0, align=64, force=False, progress=None):
    """Write every record of `src` (a Dataset, or anything Dataset() opens, of any format) to
    ``.stk`` shards at `out`, all fields in order: one file when `out` ends with ".stk" and no
    `shard_size` is given, else the directory `out` of shard-00000.stk, ... of at most about
    `shard_size` bytes each (default 1 GiB). The same packer as ``stoker pack SRC OUT``.
    ``progress(done, total, bytes)`` is called about 100 times. Returns a dict: records,
    shards, bytes, file_bytes."""
    ds = src if isinstance(src, _core.Dataset) else Dataset(src, format=format)
    try:
        return ds.pack(os.fspath(out), shard_size=int(shard_size), align=int(align),
                       force=bool(force), tool=f"stoker.pack {_core.version()}",
                       progress=progress)
    finally:
        if ds is not src:
            ds.close()


def pack_image_folder(src, out, shard_size=1 << 30, force=False):
    """Pack an ImageFolder tree into `out`, as ``stoker pack SRC OUT`` does: a single shard
    when `out` ends with ".stk", else a directory of shards ``shard-00000.stk``, ... of at most
    about `shard_size` bytes each. Files are stored as they are (not re-encoded), in
    torchvision ImageFolder's order (classes sorted, files sorted, the same extensions), so
    record i is ``ImageFolder(src).samples[i]``. Returns the number of records."""
    out = os.fspath(out)
    size = 0 if out.endswith(".stk") else int(shard_size)
    return pack(os.fspath(src), out, format="imagefolder", shard_size=size,
                force=force)["records"]


DEFAULT_SHARD_SIZE = 1 << 30  # stoker.pack's default for a directory of shards


def _infer_spec(name, value):
    """The Writer field spec for a record's value: bytes-like (and str, stored as UTF-8) ->
    bytes, int -> int64, float -> float32, numpy arrays -> (dtype, shape)."""
    if isinstance(value, (bytes, bytearray, memoryview, str)):
        return "bytes"
    if isinstance(value, (bool, int, np.integer)):
        return "int64"
    if isinstance(value, (float, np.floating)) and np.ndim(value) == 0:
        return "float32"
    if isinstance(value, np.ndarray) or hasattr(value, "numpy"):
        a = value.numpy() if hasattr(value, "numpy") else value
        if a.dtype == object:
            raise _core.StokerInvalidError(f"field {name!r}: object arrays cannot be stored")
        return (a.dtype, tuple(a.shape) if a.ndim else (1,))
    raise _core.StokerInvalidError(
        f"field {name!r}: cannot store a {type(value).__name__} (bytes, str, int, float or a "
        "numpy array)")


def _value_size(value):
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    return getattr(value, "nbytes", 8)


def pack_records(records, out, shard_size=0, metadata=None, force=False):
    """Write `records` (an iterable of dicts with the same keys) to ``.stk`` shards at `out`:
    one file when `out` ends with ".stk" and no `shard_size` is given, else the directory
    `out` of shard-00000.stk, ... of at most about `shard_size` bytes of values each (default
    1 GiB), as :func:`pack` does. The schema comes from the first record, field order from its
    keys: bytes/bytearray/memoryview -> bytes, str -> bytes (UTF-8), int -> int64, float ->
    float32, numpy arrays -> array fields of their dtype and shape (every record the same).
    For what C cannot read, e.g. an LMDB of ``pickle.dumps((jpeg_bytes, label))``::

        env = lmdb.open("train_lmdb", readonly=True, lock=False)
        recs = ({"image": img, "label": lab} for k, v in env.begin().cursor()
                if not k.startswith(b"__") for img, lab in [pickle.loads(v)])
        stoker.pack_records(recs, "train-stk/")

    Returns a dict: records, shards, bytes (values written)."""
    out = os.fspath(out)
    single = out.endswith(".stk") and not shard_size
    limit = 0 if single else int(shard_size or DEFAULT_SHARD_SIZE)
    if os.path.exists(out) and not force:
        if single or not os.path.isdir(out):
            raise _core.StokerStateError(f"{out} already exists (force=True replaces it)")
        if os.listdir(out):
            raise _core.StokerStateError(f"{out} is not empty (force=True writes into it)")
    if not single:
        os.makedirs(out, exist_ok=True)
    it = iter(records)
    try:
        first = next(it)
    except StopIteration:
        raise _core.StokerInvalidError("pack_records: no records") from None
    fields = {k: _infer_spec(k, v) for k, v in first.items()}
    enc = [k for k, v in first.items() if isinstance(v, str)]
    n = shards = total = size = 0
    w = None
    try:
        for rec in ([first], it):
            for r in rec:
                if enc:
                    r = dict(r)
                    for k in enc:
                        if isinstance(r.get(k), str):
                            r[k] = r[k].encode()
                rsize = sum(_value_size(v) for v in r.values())
                if w is not None and limit and size and size + rsize > limit:
                    w.close()
                    w = None
                if w is None:
                    path = out if single else os.path.join(out, f"shard-{shards:05d}.stk")
                    w = Writer(path, fields, metadata)
                    shards += 1
                    size = 0
                w.add(r)
                n += 1
                size += rsize
                total += rsize
        w.close()
    except BaseException:
        if w is not None:
            w.abort()
        raise
    return {"records": n, "shards": shards, "bytes": total}

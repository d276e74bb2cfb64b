"""HDF5 files read directly (format "hdf5"): row i of every dataset is record i. Files are
written here with h5py (Debian's python3-h5py)."""
import struct

import numpy as np
import pytest

import stoker
from source_checks import check_equals_packed, check_exactly_once, check_resume

h5py = pytest.importorskip("h5py")

N = 37


def _write(path, n=N):
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        img = f.create_dataset("image", (n,), dtype=h5py.vlen_dtype(np.uint8))
        for i in range(n):
            img[i] = rng.integers(0, 256, 50 + 13 * i, dtype=np.uint8)
        f["label"] = np.arange(n, dtype=np.int64) * 3 - 5
        f["w"] = np.linspace(-1, 1, n, dtype=np.float32)
        f["meta/rgb"] = rng.integers(0, 256, (n, 2, 3, 3), dtype=np.uint8)
        f["meta/id16"] = np.arange(n, dtype=np.int16)  # a [1] array: not int64/float32
        f.create_dataset("feat", data=rng.standard_normal((n, 5)).astype(np.float64),
                         compression="gzip", shuffle=True, chunks=(4, 5))
        f.create_dataset("be", data=np.arange(n * 2, dtype=">i4").reshape(n, 2))
        blob = f.create_dataset("g/blob", (n,), dtype=h5py.vlen_dtype(np.uint8), chunks=(8,),
                                compression="gzip")  # vlen through the library
        for i in range(n):
            blob[i] = np.full(i % 5, i, np.uint8)
        some = f.create_dataset("g/some", (n,), dtype=h5py.vlen_dtype(np.uint8))
        for i in range(n):
            some[i] = np.full(0 if i % 3 == 0 else i, i, np.uint8)  # empty rows too
        f["version"] = 3  # scalar: metadata, not a column
    return str(path)


@pytest.fixture
def h5(tmp_path):
    return _write(tmp_path / "d.h5")


def test_fields_and_values(h5):
    ds = stoker.Dataset(h5)
    assert ds.format == "hdf5" and len(ds) == N
    kinds = {f["name"]: (f["kind"], f["dtype"], tuple(f["shape"])) for f in ds.fields}
    assert kinds == {"be": ("array", "int32", (2,)), "feat": ("array", "float64", (5,)),
                     "g/blob": ("bytes", "uint8", (None,)), "g/some": ("bytes", "uint8", (None,)),
                     "image": ("bytes", "uint8", (None,)), "label": ("int64", "int64", ()),
                     "meta/id16": ("array", "int16", (1,)),
                     "meta/rgb": ("array", "uint8", (2, 3, 3)),
                     "w": ("float32", "float32", ())}
    with h5py.File(h5, "r") as f:
        for i in (0, 17, N - 1):
            r = ds[i]
            assert r["image"] == f["image"][i].tobytes()
            assert r["label"] == f["label"][i] and r["w"] == f["w"][i]
            assert np.array_equal(r["meta/rgb"], f["meta/rgb"][i])
            assert np.array_equal(r["feat"], f["feat"][i])  # gzip + shuffle, chunked
            assert r["be"].tolist() == f["be"][i].tolist()  # big-endian converted
            assert r["meta/id16"].tolist() == [f["meta/id16"][i]]
            assert r["g/blob"] == bytes([i]) * (i % 5)
            assert r["g/some"] == (b"" if i % 3 == 0 else bytes([i]) * i)
    # contiguous ones (vlen bytes too) are read by offset from the workers, the rest serialised
    # (big-endian data is converted by the library)
    assert ds.metadata == {"by_offset": ["g/some", "image", "label", "meta/id16", "meta/rgb",
                                         "w"], "library": ["be", "feat", "g/blob"]}
    assert ds.describe(4) == f"{h5} row 4"
    assert stoker.Dataset(h5, format="hdf5").fingerprint == ds.fingerprint


def test_detection_by_magic_and_extension(h5, tmp_path):
    other = tmp_path / "renamed.bin"
    other.write_bytes(open(h5, "rb").read())
    assert stoker.Dataset(str(other)).format == "hdf5"
    assert "hdf5" in stoker.formats() and stoker.formats()[-1] == "imagefolder"


def test_exactly_once_shuffled_two_ranks(h5):
    check_exactly_once(h5, N)


def test_equals_packed_and_resume_with_fingerprint(h5, tmp_path):
    packed = check_equals_packed(h5, tmp_path, N)
    state = check_resume(h5)
    other = stoker.Loader(packed, 4, shuffle=True, rank=0, world_size=1)
    with pytest.raises(stoker.Error, match="fingerprint|different dataset"):
        other.load_state_dict(state)
    other.close()


def test_datasets_of_different_lengths(tmp_path):
    p = tmp_path / "bad.h5"
    with h5py.File(p, "w") as f:
        f["a"] = np.zeros((5, 2), np.float32)
        f["g/b"] = np.zeros(6, np.int64)
    with pytest.raises(stoker.StokerInvalidError,
                       match=r"bad.h5: dataset 'g/b' has 6 rows but 'a' has 5"):
        stoker.Dataset(str(p))


@pytest.mark.parametrize("kw,name", [(dict(compression="lzf"), "lzf"),
                                     (dict(scaleoffset=0), "scaleoffset")])
def test_unsupported_filter(tmp_path, kw, name):
    p = tmp_path / "f.h5"
    with h5py.File(p, "w") as f:
        f["ok"] = np.zeros(8, np.int64)
        f.create_dataset("packed", data=np.arange(16, dtype=np.int32).reshape(8, 2),
                         chunks=(4, 2), **kw)
    with pytest.raises(stoker.StokerNotSupportedError,
                       match=rf"f.h5: dataset 'packed' uses the HDF5 filter '{name}"):
        stoker.Dataset(str(p))


def test_other_bad_inputs(tmp_path):
    p = tmp_path / "u.h5"
    with h5py.File(p, "w") as f:
        f["u32"] = np.zeros(4, np.uint32)
    with pytest.raises(stoker.StokerNotSupportedError, match="'u32' has unsigned 4-byte"):
        stoker.Dataset(str(p))
    s = tmp_path / "s.h5"
    with h5py.File(s, "w") as f:
        f["n"] = 4
    with pytest.raises(stoker.StokerInvalidError, match="no datasets of rank >= 1"):
        stoker.Dataset(str(s))
    fake = tmp_path / "fake.h5"
    fake.write_bytes(b"not hdf5 at all" * 10)
    with pytest.raises(stoker.StokerFormatError, match="fake.h5: not an HDF5 file"):
        stoker.Dataset(str(fake))


def test_truncated_and_corrupt_files(tmp_path):
    p = tmp_path / "t.h5"
    with h5py.File(p, "w") as f:
        d = f.create_dataset("image", (20,), dtype=h5py.vlen_dtype(np.uint8))
        for i in range(20):
            d[i] = np.full(3000, i, np.uint8)
        f["label"] = np.arange(20)
    data = p.read_bytes()
    (tmp_path / "trunc.h5").write_bytes(data[:len(data) * 2 // 3])
    with pytest.raises(stoker.StokerFormatError, match="trunc.h5: cannot open as HDF5: .*trunc"):
        stoker.Dataset(str(tmp_path / "trunc.h5"))
    bad = bytearray(data)
    bad[data.find(b"GCOL")] = ord("X")  # the first heap collection's signature
    (tmp_path / "heap.h5").write_bytes(bytes(bad))
    # refused before the library reads the heap (its reader copies between overlapping buffers
    # on some damaged heaps: fuzz_hdf5)
    with pytest.raises(stoker.StokerFormatError,
                       match=r"heap.h5: dataset 'image' row \d+: .*global heap collection"):
        stoker.Dataset(str(tmp_path / "heap.h5"))



def test_empty_rows_beside_full_ones_in_one_heap(tmp_path):
    """Rows whose descriptors say "empty" but point into the same heap collection as a full row
    (a writer that keeps the heap id of an emptied row): the full row's bytes are still found in
    the heap. stoker once took a collection whose first and last objects were empty rows for an
    all-empty one and read the row between them from byte 0 of the file (the superblock)."""
    p = tmp_path / "e.h5"
    with h5py.File(p, "w") as f:
        d = f.create_dataset("image", (3,), dtype=h5py.vlen_dtype(np.uint8))
        for i, row in enumerate([b"abc", b"de", b"fgh"]):
            d[i] = np.frombuffer(row, np.uint8)
        off = d.id.get_offset()
    raw = bytearray(p.read_bytes())
    for row in (0, 2):  # descriptor: u32 length, u64 collection, u32 object
        assert struct.unpack_from("<I", raw, off + 16 * row)[0] == 3
        struct.pack_into("<I", raw, off + 16 * row, 0)
    p.write_bytes(bytes(raw))
    ds = stoker.Dataset(str(p))
    assert [ds[i]["image"] for i in range(3)] == [b"", b"de", b""]


def _part(path, lo, hi, **kw):
    """Rows lo..hi-1 of one logical dataset (the same values whichever file holds them)."""
    with h5py.File(path, "w") as f:
        img = f.create_dataset("image", (hi - lo,), dtype=h5py.vlen_dtype(np.uint8))
        for i in range(lo, hi):
            img[i - lo] = np.full(3 + i % 7, i, np.uint8)
        f["label"] = np.arange(lo, hi, dtype=np.int64)
        f.create_dataset("x", data=np.arange(lo * 6, hi * 6, dtype=kw.get("dtype", np.float32))
                         .reshape(hi - lo, *kw.get("shape", (2, 3))))
        if kw.get("extra"):
            f["extra"] = np.zeros(hi - lo, np.int8)
    return str(path)


def test_multiple_files_are_one_dataset(tmp_path):
    """A list, glob or brace range of .h5 files: records concatenated in the listed order; the
    usual semantics hold over them (exactly once, equal to packed, resume)."""
    bounds = [(0, 10), (10, 11), (11, 11), (11, 25)]  # one file of one row, one of none
    paths = [_part(tmp_path / f"p-{k}.h5", lo, hi) for k, (lo, hi) in enumerate(bounds)]
    n = 25
    for data in (paths, str(tmp_path / "p-*.h5"), str(tmp_path / "p-{0..3}.h5")):
        ds = stoker.Dataset(data)
        assert ds.format == "hdf5" and len(ds) == n and len(ds.shards) == 4
        assert [s["n_records"] for s in ds.shards] == [10, 1, 0, 14]
        for i in range(n):
            r = ds[i]
            assert r["label"] == i and r["image"] == bytes([i]) * (3 + i % 7)
            assert r["x"].ravel().tolist() == list(range(i * 6, i * 6 + 6))
    assert ds.describe(12) == f"{paths[3]} row 1 (global 12)"
    # the listed order, not the names' order
    rev = stoker.Dataset([paths[3], paths[0]])
    assert rev[0]["label"] == 11 and rev[14]["label"] == 0
    check_exactly_once(paths, n)
    check_equals_packed(paths, tmp_path, n)
    check_resume(paths)
    assert stoker.Dataset(paths).fingerprint != stoker.Dataset(paths[:1]).fingerprint


def test_multiple_files_that_differ(tmp_path):
    a = _part(tmp_path / "a.h5", 0, 4)
    cases = [(dict(dtype=np.float64), r"dataset 'x' has rows of float64 \[2, 3\] but in .*a.h5 "
                                      r"of float32 \[2, 3\]"),
             (dict(shape=(3, 2)), r"dataset 'x' has rows of float32 \[3, 2\] but in .*a.h5 of "
                                  r"float32 \[2, 3\]"),
             (dict(extra=True), r"dataset 'extra' is in .*b.h5 but not in .*a.h5")]
    for kw, msg in cases:
        b = _part(tmp_path / "b.h5", 4, 8, **kw)
        with pytest.raises(stoker.StokerInvalidError, match=r"b.h5: " + msg):
            stoker.Dataset([a, b])
    with pytest.raises(stoker.StokerInvalidError, match=r"dataset 'extra' is in .*b.h5 but not "
                                                        r"in .*a.h5"):
        stoker.Dataset([b, a])  # the first file has one the second lacks
    bad = tmp_path / "c.h5"
    bad.write_bytes(open(a, "rb").read()[:1000])  # truncated: named, whatever its position
    with pytest.raises(stoker.Error, match="c.h5"):
        stoker.Dataset([a, str(bad)])


def test_open_work_is_bounded_by_what_the_file_holds(tmp_path):
    """A chunked vlen dataset declaring far more rows than were ever written (a 1.7 KB file
    declaring 10^8 rows; issue 30: 10^6 took 53 s to open, 10^7 and more never finished, one
    library read per declared row). Open reads only the written chunks, so it is instant and
    exact: unwritten rows are the fill value (empty bytes), written ones their bytes, the
    field's largest row the largest written."""
    p = str(tmp_path / "sparse.h5")
    n = 10 ** 8
    with h5py.File(p, "w") as f:
        f.create_dataset("x", (n,), dtype=h5py.vlen_dtype(np.uint8), chunks=(1000,),
                         maxshape=(None,))
        f.create_dataset("y", (n,), dtype=np.int64, chunks=(1000,), maxshape=(None,))
    ds = stoker.Dataset(p)
    assert len(ds) == n
    assert {f["name"]: f["max_size"] for f in ds.fields}["x"] == 0
    assert ds[123_456_789 % n]["x"] == b"" and ds[7]["y"] == 0
    ds.close()
    with h5py.File(p, "a") as f:  # three chunks written, far apart
        for row, k in ((5, 3), (n // 2 + 17, 900), (n - 1, 41)):
            f["x"][row] = np.full(k, k % 251, np.uint8)
    ds = stoker.Dataset(p)
    assert {f["name"]: f["max_size"] for f in ds.fields}["x"] == 900
    assert ds[5]["x"] == bytes([3]) * 3 and ds[n - 1]["x"] == bytes([41]) * 41
    assert ds[n // 2 + 17]["x"] == bytes([900 % 251]) * 900 and ds[6]["x"] == b""
    ds.close()
    big = str(tmp_path / "huge.h5")  # 10^10 rows, nothing written
    with h5py.File(big, "w") as f:
        f.create_dataset("x", (10 ** 10,), dtype=h5py.vlen_dtype(np.uint8), chunks=(4096,),
                         maxshape=(None,))
    assert len(stoker.Dataset(big)) == 10 ** 10
    contig = str(tmp_path / "contig.h5")  # contiguous, 10^9 rows, never written: no storage
    with h5py.File(contig, "w") as f:
        f.create_dataset("x", (10 ** 9,), dtype=h5py.vlen_dtype(np.uint8))
    ds = stoker.Dataset(contig)
    assert len(ds) == 10 ** 9 and ds.fields[0]["max_size"] == 0
    assert ds[10 ** 9 - 1]["x"] == b""
    ds.close()
    lying = tmp_path / "lying.h5"  # 7 rows written, the dataspace edited to declare 10^9
    with h5py.File(lying, "w") as f:
        d = f.create_dataset("x", (7,), dtype=h5py.vlen_dtype(np.uint8))
        for i in range(7):
            d[i] = np.arange(5, dtype=np.uint8)
    raw = bytearray(lying.read_bytes())
    at = raw.find(struct.pack("<QQ", 7, 7))  # the dataspace's size and maximum size
    assert at > 0
    raw[at:at + 8] = struct.pack("<Q", 10 ** 9)
    lying.write_bytes(raw)
    with pytest.raises(stoker.StokerFormatError, match=r"lying\.h5: dataset 'x' declares "
                       r"1000000000 rows but its storage holds 112 bytes"):
        stoker.Dataset(str(lying))
    many = str(tmp_path / "many.h5")  # 4097 one-row chunks written of 200,000 declared rows
    with h5py.File(many, "w") as f:
        d = f.create_dataset("x", (200_000,), dtype=h5py.vlen_dtype(np.uint8), chunks=(1,))
        d[:4097] = [np.full(2, 1, np.uint8)] * 4097
    with pytest.raises(stoker.StokerLimitError, match=r"many\.h5: dataset 'x' declares 200000 "
                       r"rows but its 4097 written chunks hold at most 4097"):
        stoker.Dataset(many)

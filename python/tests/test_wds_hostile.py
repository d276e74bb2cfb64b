"""WebDataset shards crafted against the reader, each found by the fuzz campaign
(docs/reliability.md): an error naming the shard and the member, never a crash or an allocation
sized by a lie."""
import gzip
import io
import struct
import tarfile

import pytest

import stoker


def _tar(path, members, fmt=tarfile.USTAR_FORMAT, pax=None):
    with tarfile.open(path, "w", format=fmt) as tf:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            if pax:
                ti.pax_headers = dict(pax)
            tf.addfile(ti, io.BytesIO(data))
    return str(path)


def test_gzip_trailer_claiming_more_than_deflate_can_expand(tmp_path):
    gz = bytearray(gzip.compress(b'{"a": 1}'))
    struct.pack_into("<I", gz, len(gz) - 4, 3_586_002_176)  # ISIZE: 3.5 GB from ~30 bytes
    path = _tar(tmp_path / "bomb.tar", [("k0.json.gz", bytes(gz)), ("k0.cls", b"1"),
                                        ("k1.json.gz", gzip.compress(b"{}")), ("k1.cls", b"2")])
    ds = stoker.Dataset(path)  # the lie sizes nothing: the field's largest value is the honest one
    assert {f["name"]: f for f in ds.fields}["json"]["max_size"] < 4096
    with pytest.raises(stoker.StokerFormatError, match=r"bomb\.tar sample 'k0'.*member "
                       r"'k0\.json\.gz'.*gzip trailer"):
        ds[0]  # a corrupt member, named, skippable under on_error="skip"
    assert ds[1]["json"] == b"{}"


def test_gzip_trailer_at_the_limit_is_read_exactly(tmp_path):
    # a highly compressible member (a ~1000:1 ratio is legitimate) still reads back exactly
    plain = b"\0" * (1 << 20)
    path = _tar(tmp_path / "zeros.tar", [("k0.bin.gz", gzip.compress(plain, 9)), ("k0.cls", b"3")])
    ds = stoker.Dataset(path)
    assert ds[0]["bin"] == plain and ds[0]["cls"] == 3


def test_two_pax_headers_before_one_member(tmp_path):
    """A second PAX extended header before the same member replaced the first one's buffer
    while its path still pointed into it (use after free under ASan)."""
    first = _tar(tmp_path / "a.tar", [("k0.txt", b"hello")], fmt=tarfile.PAX_FORMAT,
                 pax={"path": "elsewhere/k9.txt", "comment": "x" * 40})
    rest = _tar(tmp_path / "b.tar", [("k0.txt", b"hello"), ("k0.cls", b"2")],
                fmt=tarfile.PAX_FORMAT, pax={"comment": "y" * 40})
    head = open(first, "rb").read()[:1024]  # its PAX header block and the record block (path)
    assert head[156:157] == b"x" and b"path=elsewhere" in head
    path = tmp_path / "pax.tar"
    path.write_bytes(head + open(rest, "rb").read())
    ds = stoker.Dataset(str(path))  # the later header wins: it names no path, the member's does
    assert len(ds) == 1 and ds[0]["__key__"] == b"k0"
    assert ds[0]["txt"] == b"hello" and ds[0]["cls"] == 2

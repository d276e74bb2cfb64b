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


@pytest.mark.parametrize("version", ["0.0", "0.1", "1.0"])
def test_pax_sparse_members_are_refused(tmp_path, version):
    """`tar --sparse --format=pax` (GNU tar's PAX sparse formats 0.0, 0.1 and 1.0: the map in
    GNU.sparse.* records or in the data, the name ./GNUSparseFile.N/NAME) is refused like a GNU
    'S' member, at open, by read, `stoker verify` and `stoker pack`: never the packed data and
    the map delivered as the field's bytes (issue 30)."""
    import os
    import shutil
    import subprocess
    if not shutil.which("tar"):
        pytest.skip("GNU tar is not installed")
    src = tmp_path / "src"
    src.mkdir()
    with open(src / "s0.bin", "wb") as f:  # 1 MiB with 5 bytes of data: a sparse file
        f.truncate(1 << 20)
        f.seek(500000)
        f.write(b"hello")
    (src / "s0.txt").write_bytes(b"first")
    (src / "s1.bin").write_bytes(b"dense")
    (src / "s1.txt").write_bytes(b"second")
    path = tmp_path / "sparse.tar"
    subprocess.run(["tar", "--sparse", f"--sparse-version={version}", "--format=pax", "-C",
                    str(src), "-cf", str(path), "s0.bin", "s0.txt", "s1.bin", "s1.txt"],
                   check=True)
    assert b"GNU.sparse." in path.read_bytes()  # tar did make a PAX sparse member
    with pytest.raises(stoker.StokerNotSupportedError,
                       match=r"sparse\.tar: member '.*s0\.bin' at byte \d+: sparse file"):
        stoker.Dataset(str(path))
    with pytest.raises(stoker.StokerNotSupportedError, match="sparse file"):
        stoker.pack(str(path), str(tmp_path / "out.stk"))
    assert not os.path.exists(tmp_path / "out.stk")
    cli = os.path.join(os.path.dirname(os.path.dirname(stoker.__file__)), "..", "stoker")
    if os.path.exists(cli):
        r = subprocess.run([cli, "verify", str(path)], capture_output=True, text=True)
        assert r.returncode != 0 and "sparse file" in r.stderr, (r.returncode, r.stderr)

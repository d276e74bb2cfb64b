"""Hostile LMDB files: liblmdb trusts its file (a zero page size divides by zero in
mdb_env_open, a page past the end of the file is SIGBUS), so stoker checks the structure first
(src/source/lmdb/stk_lmdb_check.c). Each corruption here is an error naming the file, never a crash;
a large, deep environment with overflow values still opens and reads back exactly."""
import os
import struct
import subprocess
import sys

import pytest

import stoker

lmdb = pytest.importorskip("lmdb")

PAGE = 4096


def _write(path, items):
    env = lmdb.open(str(path), map_size=1 << 28, subdir=False)
    with env.begin(write=True) as t:
        for k, v in items.items():
            t.put(k, v)
    env.close()
    return str(path)


def _items(n=3000):
    # small values (inline in leaves) and some large ones (overflow pages); n keys make a tree
    # of several levels
    return {b"%06d" % i: (b"v%d" % i) * (1 + (2000 if i % 97 == 0 else i % 7)) for i in range(n)}


@pytest.fixture
def big(tmp_path):
    return _write(tmp_path / "big.mdb", _items())


def _open_in_child(path):
    """Open and read every record in a child process: a crash shows as a signal, not a hang of
    this test (each child is bounded)."""
    code = ("import stoker,sys\n"
            "try:\n"
            "    ds = stoker.Dataset(sys.argv[1], format='lmdb')\n"
            "    [ds[i] for i in range(len(ds))]\n"
            "    print('OPENED', len(ds))\n"
            "except stoker.Error as e:\n"
            "    print('ERROR', e)\n")
    r = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ))
    assert r.returncode == 0, f"child died ({r.returncode}): {r.stderr[-2000:]}"
    return r.stdout.strip()


def _patch(src, dst, off, fmt, value):
    data = bytearray(open(src, "rb").read())
    struct.pack_into(fmt, data, off, value)
    open(dst, "wb").write(bytes(data))
    return dst


def _meta(path):
    """(txnid, main depth, main root, last_pg) of the current meta page, and its page index."""
    data = open(path, "rb").read()
    metas = []
    for page in (0, 1):
        m = page * PAGE + 16
        depth, = struct.unpack_from("<H", data, m + 24 + 48 + 6)
        root, = struct.unpack_from("<Q", data, m + 24 + 48 + 40)
        last_pg, txnid = struct.unpack_from("<QQ", data, m + 120)
        metas.append((txnid, depth, root, last_pg, page))
    return max(metas)


def test_big_environment_checks_and_reads(big):
    txnid, depth, root, last_pg, _ = _meta(big)
    assert depth >= 2  # the walk goes through branch pages
    ds = stoker.Dataset(big)
    items = _items()
    assert len(ds) == len(items)
    for i in (0, 97, 1940, len(items) - 1):
        assert ds[i]["value"] == items[b"%06d" % i]


@pytest.mark.parametrize("case", ["psize0", "psize_odd", "root_past_end", "truncated",
                                  "last_pg_past_end", "bad_magic", "node_offset", "overflow_past_end",
                                  "depth_deeper", "entries"])
def test_corrupt_is_an_error_naming_the_file(big, tmp_path, case):
    txnid, depth, root, last_pg, mp = _meta(big)
    meta = mp * PAGE + 16
    dst = str(tmp_path / f"{case}.mdb")
    data = open(big, "rb").read()
    if case == "psize0":
        for p in (0, 1):
            _patch(big if p == 0 else dst, dst, p * PAGE + 16 + 24, "<I", 0)
    elif case == "psize_odd":
        _patch(big, dst, 16 + 24, "<I", 4097)
    elif case == "root_past_end":
        _patch(big, dst, meta + 24 + 48 + 40, "<Q", 1 << 40)
    elif case == "truncated":
        open(dst, "wb").write(data[:len(data) // 2 // PAGE * PAGE])
    elif case == "last_pg_past_end":
        _patch(big, dst, meta + 120, "<Q", len(data) // PAGE + 10)
    elif case == "bad_magic":
        _patch(big, dst, 16, "<I", 0x12345678)
    elif case == "node_offset":
        _patch(big, dst, root * PAGE + 16, "<H", 2)  # first node pointer into the header
    elif case == "overflow_past_end":
        # find a leaf node with F_BIGDATA and point it past the end
        buf = bytearray(data)
        done = False
        for pg in range(2, len(buf) // PAGE):
            base = pg * PAGE
            flags, lower = struct.unpack_from("<HH", buf, base + 10)
            if not flags & 0x02 or flags & 0x04:
                continue
            for i in range((lower - 16) // 2):
                off, = struct.unpack_from("<H", buf, base + 16 + 2 * i)
                nflags, ksize = struct.unpack_from("<HH", buf, base + off + 4)
                if nflags & 0x01:
                    struct.pack_into("<Q", buf, base + off + 8 + ksize, 1 << 40)
                    done = True
                    break
            if done:
                break
        assert done
        open(dst, "wb").write(bytes(buf))
    elif case == "depth_deeper":
        _patch(big, dst, meta + 24 + 48 + 6, "<H", depth + 1)
    elif case == "entries":
        _patch(big, dst, meta + 24 + 48 + 32, "<Q", 7)
    out = _open_in_child(dst)
    assert out.startswith("ERROR") and dst in out, out


def test_dupsort_refused(big, tmp_path):
    """A main database with MDB_DUPSORT (py-lmdb cannot create one: the flag is set here in the
    meta page, as a C writer's mdb_dbi_open(NULL, MDB_DUPSORT) stores it) is refused by name."""
    mp = _meta(big)[4]
    dst = _patch(big, str(tmp_path / "dup.mdb"), mp * PAGE + 16 + 24 + 48 + 4, "<H", 0x04)
    out = _open_in_child(dst)
    assert out.startswith("ERROR") and "MDB_DUPSORT" in out, out


def test_empty_environment(tmp_path):
    path = _write(tmp_path / "empty.mdb", {})
    out = _open_in_child(path)
    # an empty dataset is the loader's error to give; the check itself accepts an empty tree
    assert "corrupt" not in out, out

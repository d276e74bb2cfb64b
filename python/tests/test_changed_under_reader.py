"""A file rewritten under a reader is a named error, never a mix of two versions (issue 30).

Each format's file is rewritten in place, with the same size and layout (how shards get
regenerated: the same names re-packed), while a loader reads it: every sample delivered comes
from the version opened, and the batches read after the rewrite fail naming the file and the
change. The same over s3:// (s3rver; skipped when it cannot be installed): an object replaced
on the server mid-epoch, read directly (the answer's ETag is checked) and through a proxy that
honours If-Match (412), with and without the block cache.

The files' modification time is set back before the open, as for a dataset written before the
run: a rewrite within the file system's timestamp granularity (a few ms) of the original write
would not show in the modification time (docs/remote.md, docs/reliability.md)."""
import io
import os
import tarfile

import numpy as np
import pytest

import stoker
from s3util import anonymous_endpoint, FaultProxy, S3Server, s3rver_command
from test_tfrecord import example, write_tfrecord

N = 40
OLD, NEW = 1000, 5000  # label of sample i: OLD + i, then NEW + i (varints of one length)


def _tar(path, base):
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
        for i in range(N):
            for ext, data in (("cls", b"%04d" % (base + i)), ("bin", bytes([i % 251]) * 300)):
                ti = tarfile.TarInfo(f"s{i:03d}.{ext}")
                ti.size, ti.mtime = len(data), 0
                t.addfile(ti, io.BytesIO(data))


def _npy(path, base):
    np.save(path, np.arange(base, base + N, dtype=np.int64))


def _stk(path, base):
    stoker.write_shard(path, {"label": "int64", "data": ("float32", (4,))},
                       ({"label": base + i, "data": np.full(4, i, np.float32)} for i in range(N)))


def _tfrecord(path, base):
    write_tfrecord(path, [example({"label": base + i, "pad": b"x" * 50}) for i in range(N)])


FORMATS = {"wds": (_tar, "s.tar", "cls"), "npy": (_npy, "label.npy", "label"),
           "stk": (_stk, "s.stk", "label"), "tfrecord": (_tfrecord, "s.tfrecord", "label")}


def _bytes(make, tmp_path, name, base):
    p = tmp_path / ("v%d-" % base + name)
    make(str(p), base)
    return p.read_bytes()


def _read_across_a_rewrite(data, field, rewrite, after=2, **kw):
    """Iterate one epoch in batches of 4, calling rewrite() after `after` batches; returns the
    labels delivered and the errors raised."""
    loader = stoker.Loader(data, 4, num_workers=1, prefetch=1, rank=0, world_size=1, **kw)
    it = iter(loader)
    labels, errors, n = [], [], 0
    while True:
        try:
            b = next(it)
        except StopIteration:
            break
        except stoker.Error as e:
            errors.append(str(e))
            continue
        labels.extend(np.asarray(b[field]).reshape(-1).tolist())
        del b  # the ring slot goes back
        n += 1
        if n == after:
            rewrite()
    loader.close()
    return labels, errors


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_local_file_rewritten_in_place(tmp_path, fmt):
    make, name, field = FORMATS[fmt]
    old, new = (_bytes(make, tmp_path, name, b) for b in (OLD, NEW))
    assert len(old) == len(new) and old != new  # same size, other content
    path = tmp_path / name
    path.write_bytes(old)
    os.utime(path, (1e9, 1e9))  # written before the run

    def rewrite():
        with open(path, "r+b") as f:  # in place: the same inode
            f.write(new)

    labels, errors = _read_across_a_rewrite(str(path), field, rewrite, format=fmt)
    assert labels and all(x < NEW for x in labels), labels  # only the version opened
    assert errors, "the rewrite went unnoticed"
    assert all(name in e and "changed while open" in e for e in errors), errors[:2]
    assert len(labels) < N  # the rest failed, by name


def test_local_file_replaced_by_rename_reads_the_version_opened(tmp_path):
    """A shard replaced by a rename (a writer's temp file + rename, as stoker pack does) leaves
    the open file as it was: the epoch is the version opened, whole, with no error."""
    make, name, field = FORMATS["wds"]
    path = tmp_path / name
    path.write_bytes(_bytes(make, tmp_path, name, OLD))

    def replace():
        tmp = tmp_path / "new.tmp"
        tmp.write_bytes(_bytes(make, tmp_path, name, NEW))
        os.replace(tmp, path)

    labels, errors = _read_across_a_rewrite(str(path), field, replace, format="wds")
    assert not errors and sorted(labels) == list(range(OLD, OLD + N))


# ---- over S3 ----

@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    cmd = s3rver_command()
    if not cmd:
        pytest.skip("s3rver cannot be installed here (npm)")
    tmp = tmp_path_factory.mktemp("s3changed")
    srv = S3Server(cmd, tmp / "root").start()
    srv.blobs = {}
    for fmt in ("wds", "stk"):
        make, name, _ = FORMATS[fmt]
        srv.blobs[fmt] = [_bytes(make, tmp, name, b) for b in (OLD, NEW)]
    try:
        yield srv
    finally:
        srv.stop()


@pytest.mark.parametrize("fmt", ["wds", "stk"])
@pytest.mark.parametrize("route", ["direct", "if-match", "cache"])
def test_remote_object_replaced_mid_epoch(s3, monkeypatch, tmp_path, fmt, route):
    """The object replaced on the server (same size, same layout) after two batches: batches
    read afterwards fail naming the URL and the change; no sample of the new version. All
    requests go through a proxy that runs them one at a time, so that the replacement is atomic
    for readers as on S3; "if-match": the proxy also answers 412 to a stale If-Match, as S3
    does; "cache": the shard's block was cached whole at the first read, so the epoch is the
    version opened, whole."""
    key = f"changed/{fmt}-{route}/{FORMATS[fmt][1]}"
    old, new = s3.blobs[fmt]
    s3.put(key, old)
    anonymous_endpoint(monkeypatch, s3.endpoint)
    monkeypatch.setenv("STOKER_HTTP_READAHEAD", "0")  # reads after the rewrite reach the server
    kw = {"format": fmt}
    if route == "cache":
        kw["cache_dir"] = str(tmp_path / "cache")
    with FaultProxy(s3.endpoint.split("//")[1], if_match=route == "if-match",
                    serialize=True) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        via = S3Server(None, tmp_path, bucket="data", port=proxy.port)  # PUTs through the proxy
        labels, errors = _read_across_a_rewrite(f"s3://data/{key}", FORMATS[fmt][2],
                                                lambda: via.put(key, new), **kw)
    assert labels and all(x < NEW for x in labels), labels
    if route == "cache":
        assert not errors and sorted(labels) == list(range(OLD, OLD + N))
        return
    assert errors, "the replacement went unnoticed"
    for e in errors:
        assert key in e and "changed since it was opened" in e, e
    if route == "if-match":
        assert proxy.precondition_failed > 0 and all("412" in e for e in errors)

"""The remote transport over loopback: coalescing neighbouring records into one ranged GET, many
requests in flight (curl multi, bounded by STOKER_HTTP_INFLIGHT), a failed coalesced piece
retried record by record, the block cache filled by coalesced fetches, and TLS (a self-signed CA
made with openssl at test time, taken from AWS_CA_BUNDLE / CURL_CA_BUNDLE / SSL_CERT_FILE, or
from a hashed directory in SSL_CERT_DIR).
Requests are counted by a proxy in front of s3rver (python/tests/s3util.py); every sample exactly
once per epoch."""
import os
import shutil
import signal
import ssl
import subprocess

import numpy as np
import pytest

import stoker
from conftest import write_dataset
from s3util import anonymous_endpoint, FaultProxy, S3Server, s3rver_command

N = 200  # one shard
URL = "s3://data/t/shard-00000.stk"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    cmd = s3rver_command()
    if not cmd:
        pytest.skip("s3rver cannot be installed here (npm)")
    tmp = tmp_path_factory.mktemp("s3t")
    srv = S3Server(cmd, tmp / "root").start()
    try:
        srv.put_dir(write_dataset(tmp / "t", N), "t")
        srv.shard_size = os.path.getsize(tmp / "t" / "shard-00000.stk")
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def proxy(s3, monkeypatch):
    """s3:// through a counting proxy to the local server, anonymously, no cache."""
    anonymous_endpoint(monkeypatch, s3.endpoint)
    monkeypatch.setenv("STOKER_HTTP_BACKOFF_MS", "5")
    with FaultProxy(s3.endpoint.split("//")[1]) as p:
        monkeypatch.setenv("AWS_ENDPOINT_URL", p.endpoint)
        yield p


def epoch(loader):
    got = []
    for b in loader:
        idx = np.asarray(b["index"]).tolist()
        assert np.asarray(b["label"]).tolist() == [i * 7 for i in idx]
        got += idx
    return got


def requests_of_one_epoch(proxy, **kw):
    loader = stoker.Loader(URL, num_workers=2, **kw)
    before = proxy.requests
    got = epoch(loader)
    assert sorted(got) == list(range(N))
    return proxy.requests - before


def test_coalescing_merges_a_batch_into_few_requests(proxy, monkeypatch):
    monkeypatch.setenv("STOKER_HTTP_PREFETCH", "0")  # as before: one GET per record
    plain = requests_of_one_epoch(proxy, batch_size=50)
    assert plain >= N, plain
    monkeypatch.delenv("STOKER_HTTP_PREFETCH")
    # in order: each batch's 50 neighbouring records are one ranged GET (read-ahead included)
    merged = requests_of_one_epoch(proxy, batch_size=50)
    assert merged <= N // 50 + 8, merged  # + the opens (HEAD, header, index)
    # shuffled over one small shard: the gaps are small, a batch is still a few requests
    shuffled = requests_of_one_epoch(proxy, batch_size=50, shuffle=True, seed=4)
    assert shuffled <= N // 50 + 8, shuffled


def test_read_ahead_follows_a_sampler(proxy):
    """Read-ahead hints the records the loader's order reads (here an index list: every other
    record), not the plain permutation's: each batch of 25 is still about one ranged GET."""
    loader = stoker.Loader(URL, batch_size=25, num_workers=2, sampler=list(range(0, N, 2)))
    before = proxy.requests
    got = epoch(loader)
    assert got == list(range(0, N, 2))
    assert proxy.requests - before <= N // 2 // 25 + 4, proxy.requests - before


def test_requests_in_flight_are_bounded(proxy, monkeypatch):
    # no coalescing (gap 0, tiny max): each record its own GET, 4 at once, 20 ms each
    monkeypatch.setenv("STOKER_HTTP_COALESCE_GAP", "0")
    monkeypatch.setenv("STOKER_HTTP_COALESCE_MAX", "1")
    monkeypatch.setenv("STOKER_HTTP_INFLIGHT", "4")
    proxy.latency = 0.02
    n = requests_of_one_epoch(proxy, batch_size=40, shuffle=True, seed=2)
    assert n >= N, n
    # the fetcher's 4, plus the two workers' own reads of records not prefetched yet
    assert 2 <= proxy.max_in_flight <= 4 + 2, proxy.max_in_flight


def test_failed_coalesced_piece_is_retried_on_its_own(s3, proxy, monkeypatch):
    proxy.error_rate, proxy.truncate_rate, proxy.drop_rate = 0.2, 0.1, 0.05
    monkeypatch.setenv("STOKER_HTTP_RETRIES", "12")
    for kw in ({}, {"shuffle": True, "seed": 9}):
        requests_of_one_epoch(proxy, batch_size=25, **kw)
    assert proxy.faults > 3, proxy.faults


def test_every_piece_failing_names_url_record_and_status(proxy, monkeypatch):
    loader = stoker.Loader(URL, batch_size=20, num_workers=2)
    proxy.error_rate = 1.0  # every ranged GET: 503 SlowDown or 500
    monkeypatch.setenv("STOKER_HTTP_RETRIES", "2")
    with pytest.raises(stoker.Error) as e:
        epoch(loader)
    msg = str(e.value)
    assert URL in msg and "record" in msg and "after 2 attempt" in msg, msg
    assert "last HTTP status 50" in msg, msg


def test_cache_filled_by_coalesced_fetches(s3, proxy, monkeypatch, tmp_path):
    monkeypatch.setenv("STOKER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("STOKER_CACHE_LIMIT", "64M")
    before, bytes_before = proxy.requests, proxy.bytes
    loader = stoker.Loader(URL, batch_size=50, shuffle=True, seed=1, num_workers=2)
    assert sorted(epoch(loader)) == list(range(N))
    cold = proxy.requests - before
    assert cold <= 8, cold  # one small shard: its blocks, not its records
    assert s3.shard_size < 4 << 20  # one block, fetched once (prefetched or not, never twice)
    assert proxy.bytes - bytes_before == s3.shard_size, proxy.bytes - bytes_before
    before = proxy.requests
    assert sorted(epoch(loader)) == list(range(N))
    assert proxy.requests == before  # warm: every byte from the cache


def test_forked_child_prefetches_on_its_own(proxy):
    # the parent's fetcher thread does not exist in a child of fork: the child must not wait
    # for the parent's transfers, and its own hints start a thread of its own
    loader = stoker.Loader(URL, batch_size=50, shuffle=True, seed=6, num_workers=2)
    it = iter(loader)
    next(it)  # the parent has transfers queued or done now
    pid = os.fork()
    if pid == 0:
        signal.alarm(60)  # a hang would fail the test, not stall it
        ok = False
        try:
            child = stoker.Loader(URL, batch_size=50, shuffle=True, seed=7, num_workers=2)
            ok = sorted(epoch(child)) == list(range(N))
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0 and not os.WIFSIGNALED(status), status
    rest = [i for b in it for i in np.asarray(b["index"]).tolist()]
    assert len(rest) == N - 50


# ---- TLS ----


def make_ca(d):
    """A self-signed certificate for 127.0.0.1 (its own CA), and a second, unrelated one."""
    if not shutil.which("openssl"):
        pytest.skip("no openssl")
    out = []
    for name in ("server", "other"):
        key, crt = d / f"{name}.key", d / f"{name}.crt"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", str(key), "-out", str(crt)],
                       check=True, capture_output=True, timeout=60)
        out.append((str(crt), str(key)))
    return out


@pytest.fixture
def tls(proxy, tmp_path, monkeypatch):
    """The counting proxy behind TLS: https://127.0.0.1:PORT; returns (endpoint, CA, other CA)."""
    (crt, key), (other, _) = make_ca(tmp_path)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    proxy.server.socket = ctx.wrap_socket(proxy.server.socket, server_side=True)
    ep = f"https://127.0.0.1:{proxy.port}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", ep)
    return ep, crt, other


def test_https_with_ca_from_the_environment(tls, monkeypatch):
    ep, crt, _ = tls
    url = f"{ep}/data/t/shard-00000.stk"
    for var in ("CURL_CA_BUNDLE", "SSL_CERT_FILE"):
        monkeypatch.setenv(var, crt)
        got = epoch(stoker.Loader(url, batch_size=50, shuffle=True, seed=3, num_workers=2))
        assert sorted(got) == list(range(N))
        monkeypatch.delenv(var)
    monkeypatch.setenv("AWS_CA_BUNDLE", crt)  # S3 over https
    assert sorted(epoch(stoker.Loader(URL, batch_size=50, num_workers=2))) == list(range(N))
    monkeypatch.delenv("AWS_CA_BUNDLE")


def test_https_with_a_ca_directory(tls, tmp_path, monkeypatch):
    """SSL_CERT_DIR: a directory of CAs under OpenSSL's hashed names (`openssl rehash`)."""
    ep, crt, other = tls
    url = f"{ep}/data/t/shard-00000.stk"
    cas = tmp_path / "cas"
    cas.mkdir()
    shutil.copy(other, cas / "other.pem")
    subprocess.run(["openssl", "rehash", str(cas)], check=True, capture_output=True, timeout=60)
    monkeypatch.setenv("SSL_CERT_DIR", str(cas))  # only a CA that did not sign it: refused
    with pytest.raises(stoker.StokerIOError, match="TLS certificate verification failed.*"
                       "CA directory: " + str(cas)):
        stoker.Dataset(url)
    shutil.copy(crt, cas / "server.pem")
    subprocess.run(["openssl", "rehash", str(cas)], check=True, capture_output=True, timeout=60)
    got = epoch(stoker.Loader(url, batch_size=50, shuffle=True, seed=3, num_workers=2))
    assert sorted(got) == list(range(N))


def test_tls_verification_failure_names_the_url(tls, monkeypatch):
    ep, crt, other = tls
    url = f"{ep}/data/t/shard-00000.stk"
    with pytest.raises(stoker.StokerIOError) as e:  # the system's CAs do not know it
        stoker.Dataset(url)
    msg = str(e.value)
    assert url in msg and "TLS certificate verification failed" in msg, msg
    monkeypatch.setenv("CURL_CA_BUNDLE", other)  # a CA that did not sign it
    with pytest.raises(stoker.StokerIOError, match="TLS certificate verification failed.*" +
                       os.path.basename(other)):
        stoker.Dataset(url)
    # S3 takes AWS_CA_BUNDLE first: a wrong one fails even with a right CURL_CA_BUNDLE
    monkeypatch.setenv("CURL_CA_BUNDLE", crt)
    monkeypatch.setenv("AWS_CA_BUNDLE", other)
    with pytest.raises(stoker.StokerIOError, match=URL + ".*TLS certificate verification"):
        stoker.Dataset(URL)
    monkeypatch.setenv("STOKER_HTTP_INSECURE", "1")  # test endpoints only
    assert len(stoker.Dataset(URL)) == N

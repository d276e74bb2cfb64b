"""Remote byte sources over loopback: .stk shards served by a local S3 server (s3rver from npm,
installed by scripts/s3rver.sh on first use; the tests skip when it cannot be installed), read
as s3:// and http:// URLs, through a fault-injecting proxy, and through the shared on-disk cache.
Every sample exactly once per epoch, whatever the faults; errors name the URL."""
import json
import os
import threading

import numpy as np
import pytest

import stoker
from conftest import PYTHONPATH, record, run_python, write_dataset
from s3util import FaultProxy, S3Server, s3rver_command

N = 600
BIG_N = 300  # records of the cache tests: 32 KiB each, ~9.4 MiB in all
BLOCK = 4 << 20


def big_record(i):
    data = np.random.default_rng(i).integers(0, 256, 32 << 10, dtype=np.uint8)  # incompressible
    return {"data": data.tobytes(), "label": i}


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    cmd = s3rver_command()
    if not cmd:
        pytest.skip("s3rver cannot be installed here (npm)")
    tmp = tmp_path_factory.mktemp("s3")
    srv = S3Server(cmd, tmp / "root").start()
    try:
        srv.put_dir(write_dataset(tmp / "train", N, shards=3), "train")
        big = write_dataset(tmp / "big", BIG_N, shards=3, fields={"data": "bytes",
                                                                  "label": "int64"},
                            make=big_record)
        srv.put_dir(big, "big")
        srv.big_bytes = sum(os.path.getsize(os.path.join(big, n)) for n in os.listdir(big))
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def endpoint(s3, monkeypatch):
    """s3:// goes to the local server, anonymously, with few retries; no cache."""
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
              "STOKER_CACHE_DIR", "STOKER_CACHE_LIMIT"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    monkeypatch.setenv("STOKER_HTTP_RETRIES", "3")
    return s3.endpoint


def epoch(loader, first=0):
    """Indices of one pass; each batch's labels checked against its records (`first`: the
    global number of the dataset's record 0)."""
    got = []
    for b in loader:
        idx = np.asarray(b["index"]).tolist()
        labels = np.asarray(b["label"]).tolist()
        assert labels == [(first + i) * 7 for i in idx] or labels == idx
        got += idx
    return got


def test_prefix_exactly_once_each_epoch(endpoint):
    ds = stoker.Dataset("s3://data/train/")
    assert len(ds) == N
    r = ds[123]
    assert r["data"] == record(123)["data"] and r["label"] == 123 * 7
    loader = stoker.Loader("s3://data/train/", batch_size=32, shuffle=True, seed=3, num_workers=2)
    for _ in range(2):
        got = epoch(loader)
        assert sorted(got) == list(range(N))


def test_brace_glob_and_signed(endpoint, monkeypatch):
    # credentials: requests are signed (s3rver does not check signatures, test_sigv4 does)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "S3RVER")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "S3RVER")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token")
    assert len(stoker.Dataset("s3://data/train/shard-{00000..00002}.stk")) == N
    assert len(stoker.Dataset("s3://data/train/shard-0000[12].stk")) == 400
    with pytest.raises(stoker.StokerIOError, match="s3://data/train/shard-00003.stk"):
        stoker.Dataset("s3://data/train/shard-{00000..00003}.stk")
    with pytest.raises(stoker.StokerIOError, match="s3://data/nope/.*no object or prefix"):
        stoker.Dataset("s3://data/nope/")
    with pytest.raises(stoker.StokerIOError, match="no object matches"):
        stoker.Dataset("s3://data/train/*.tar")


def test_profile_credentials(endpoint, monkeypatch, tmp_path):
    creds = tmp_path / "credentials"
    creds.write_text("[default]\naws_access_key_id = A\naws_secret_access_key = B\n"
                     "[other]\naws_access_key_id = S3RVER\naws_secret_access_key = S3RVER\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_PROFILE", "other")
    assert len(stoker.Dataset("s3://data/train/shard-00000.stk")) == 200


def test_http_urls(endpoint):
    url = f"{endpoint}/data/train/shard-00001.stk"
    ds = stoker.Dataset(url)
    assert len(ds) == 200 and ds[3]["label"] == 203 * 7
    got = epoch(stoker.Loader(url, batch_size=50, shuffle=True, seed=1), first=200)
    assert sorted(got) == list(range(200))
    with pytest.raises(stoker.Error, match="cannot list.*brace range"):
        stoker.Dataset(f"{endpoint}/data/train/*.stk")
    with pytest.raises(stoker.StokerIOError, match="shard-00009.stk.*not found.*404"):
        stoker.Dataset(f"{endpoint}/data/train/shard-00009.stk")


def test_faults_every_sample_exactly_once(s3, endpoint, monkeypatch):
    host = endpoint.split("//")[1]
    with FaultProxy(host, error_rate=0.1, truncate_rate=0.05, drop_rate=0.05, seed=7) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        monkeypatch.setenv("STOKER_HTTP_RETRIES", "12")
        monkeypatch.setenv("STOKER_HTTP_BACKOFF_MS", "5")  # exactness is checked, not waiting
        monkeypatch.setenv("STOKER_HTTP_PREFETCH", "0")  # one GET per record: many faults drawn
        loader = stoker.Loader("s3://data/train/shard-00000.stk", batch_size=25, shuffle=True,
                               seed=5, num_workers=2)
        got = epoch(loader)
        assert sorted(got) == list(range(200))
        assert proxy.faults > 10, proxy.faults


def test_server_down_error_names_url_and_offset(s3, endpoint, monkeypatch):
    host = endpoint.split("//")[1]
    with FaultProxy(host) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        monkeypatch.setenv("STOKER_HTTP_RETRIES", "2")
        loader = stoker.Loader("s3://data/train/shard-00002.stk", batch_size=10, num_workers=1)
        proxy.down = True
        with pytest.raises(stoker.Error) as e:
            epoch(loader)
        msg = str(e.value)
        assert "s3://data/train/shard-00002.stk" in msg and "record" in msg, msg
        assert "after 2 attempt" in msg and " at " in msg, msg


def cache_env(monkeypatch, d, limit):
    monkeypatch.setenv("STOKER_CACHE_DIR", str(d))
    monkeypatch.setenv("STOKER_CACHE_LIMIT", str(limit))


def test_cache_limit_too_small(endpoint, monkeypatch, tmp_path):
    cache_env(monkeypatch, tmp_path / "c", 1 << 20)
    with pytest.raises(stoker.StokerInvalidError, match="smaller than one cache block"):
        stoker.Dataset("s3://data/big/shard-00000.stk")


def test_cache_warm_epoch_fetches_nothing_and_two_loaders_race(s3, endpoint, monkeypatch,
                                                               tmp_path):
    host = endpoint.split("//")[1]
    cache = tmp_path / "cache"
    limit = 3 * BLOCK  # below the dataset (~9.4 MiB): eviction runs while the loaders race
    cache_env(monkeypatch, cache, limit)
    seen, stop = [], threading.Event()

    def sample():
        while not stop.wait(0.02):
            seen.append(dir_bytes(cache))

    with FaultProxy(host) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        t = threading.Thread(target=sample)
        t.start()
        try:
            results = [None, None]

            def run(k):
                results[k] = epoch(stoker.Loader("s3://data/big/", batch_size=20, shuffle=True,
                                                 seed=k, num_workers=2))

            threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
            for th in threads:
                th.start()
            for th in threads:
                th.join(timeout=60)
        finally:
            stop.set()
            t.join()
        for r in results:
            assert r is not None and sorted(r) == list(range(BIG_N))
        assert seen and max(seen) <= limit, max(seen)
        assert dir_bytes(cache) <= limit

    # a cache that holds everything: the second epoch reads no byte from the server
    cache2 = tmp_path / "cache2"
    cache_env(monkeypatch, cache2, 64 << 20)
    with FaultProxy(host) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        loader = stoker.Loader("s3://data/big/", batch_size=20, shuffle=True, seed=1)
        assert sorted(epoch(loader)) == list(range(BIG_N))
        cold = proxy.bytes
        assert cold >= s3.big_bytes  # whole blocks: every shard's bytes once
        assert sorted(epoch(loader)) == list(range(BIG_N))
        assert proxy.bytes == cold


def dir_bytes(cache):
    d = os.path.join(str(cache), "entries")
    total = 0
    for name in os.listdir(d) if os.path.isdir(d) else []:
        try:
            total += os.stat(os.path.join(d, name)).st_size
        except FileNotFoundError:
            pass
    return total


def test_ranks_share_one_cache_exactly_once(endpoint, tmp_path):
    world = 3
    code = (
        "import json, os, numpy as np, stoker\n"
        "l = stoker.Loader('s3://data/big/', batch_size=10, shuffle=True, seed=9, num_workers=1)\n"
        "got = [i for b in l for i in np.asarray(b['index']).tolist()]\n"
        "print(json.dumps(got))\n")
    import subprocess
    import sys
    procs = []
    for r in range(world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world),
                   STOKER_CACHE_DIR=str(tmp_path / "cache"), STOKER_CACHE_LIMIT=str(4 * BLOCK),
                   PYTHONPATH=PYTHONPATH)
        procs.append(subprocess.Popen([sys.executable, "-c", code], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    parts = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        parts.append(json.loads(out.strip().splitlines()[-1]))
    allidx = [i for part in parts for i in part]
    assert sorted(allidx) == list(range(BIG_N))  # disjoint and complete
    assert dir_bytes(tmp_path / "cache") <= 4 * BLOCK


def test_cli_inspect_and_verify_take_urls(endpoint):
    import subprocess
    from conftest import REPO
    cli = os.path.join(REPO, "build", "stoker")
    if not os.path.exists(cli):
        pytest.skip("build/stoker not built")
    r = subprocess.run([cli, "inspect", "s3://data/train/"], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    assert "600" in r.stdout, r.stdout
    r = subprocess.run([cli, "verify", "s3://data/train/shard-00001.stk"], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ))
    assert r.returncode == 0, r.stderr + r.stdout

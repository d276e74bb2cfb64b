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
from conftest import CHILD_LIMIT, PYTHONPATH, record, run_python, torchrun, write_dataset
from s3util import anonymous_endpoint, FaultProxy, S3Server, s3rver_command

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
        sizes = [os.path.getsize(os.path.join(big, n)) for n in os.listdir(big)]
        srv.big_bytes = sum(sizes)
        srv.big_blocks = sum(-(-n // BLOCK) for n in sizes)  # cache blocks of the dataset
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def endpoint(s3, monkeypatch):
    """s3:// goes to the local server, anonymously, with few retries; no cache."""
    return anonymous_endpoint(monkeypatch, s3.endpoint)


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
    """4 ranks (processes with RANK/WORLD_SIZE) share one cache directory whose limit (4 blocks)
    is far below the dataset: the epoch is exact and the cache, sampled while they run, never
    holds more than its limit."""
    world = 4
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
    import time
    # sampled until every rank has ended (once only for 60 s: ranks still importing then, on a
    # loaded machine, left the sample empty); the limit only guards against a hang
    peak, t0 = 0, time.monotonic()
    while any(p.poll() is None for p in procs) and time.monotonic() - t0 < CHILD_LIMIT:
        peak = max(peak, dir_bytes(tmp_path / "cache"))
        time.sleep(0.002)
    parts = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        parts.append(json.loads(out.strip().splitlines()[-1]))
    allidx = [i for part in parts for i in part]
    assert sorted(allidx) == list(range(BIG_N))  # disjoint and complete
    assert dir_bytes(tmp_path / "cache") <= 4 * BLOCK
    assert 0 < peak <= 4 * BLOCK, peak  # sampled while the ranks ran


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


def test_cli_cache_options(endpoint, tmp_path):
    import subprocess
    from conftest import REPO
    cli = os.path.join(REPO, "build", "stoker")
    if not os.path.exists(cli):
        pytest.skip("build/stoker not built")
    cache = tmp_path / "cache"
    for cmd in (["verify"], ["bench", "--max-samples", "50", "--quiet"]):
        r = subprocess.run([cli, *cmd, "--cache-dir", str(cache), "--cache-limit", "64M",
                            "s3://data/big/shard-00002.stk"], capture_output=True, text=True,
                           timeout=60, env=dict(os.environ))
        assert r.returncode == 0, r.stderr + r.stdout
        assert dir_bytes(cache) > 0
    r = subprocess.run([cli, "inspect", "--cache-dir", str(cache), "--cache-limit", "1M",
                        "s3://data/big/"], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ))
    assert r.returncode == 1 and "smaller than one cache block" in r.stderr, r.stderr


# ---- cache_dir= / cache_limit= ----

def test_cache_kwargs_override_the_environment(s3, endpoint, monkeypatch, tmp_path):
    host = endpoint.split("//")[1]
    env_dir, kw_dir = tmp_path / "env", tmp_path / "kw"
    cache_env(monkeypatch, env_dir, 64 << 20)  # the default, overridden by the arguments
    with FaultProxy(host) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        loader = stoker.Loader("s3://data/big/", batch_size=20, shuffle=True, seed=1,
                               num_workers=2, cache_dir=kw_dir, cache_limit="64MB")
        assert sorted(epoch(loader)) == list(range(BIG_N))
        cold = proxy.bytes
        assert sorted(epoch(loader)) == list(range(BIG_N))
        assert proxy.bytes == cold  # the warm epoch reads every byte from kw_dir
        assert dir_bytes(kw_dir) >= s3.big_bytes and not os.path.exists(env_dir)
        # cache_dir="" turns the cache off whatever the environment says
        ds = stoker.Dataset("s3://data/big/shard-00000.stk", cache_dir="")
        assert ds[5]["label"] == 5 and not os.path.exists(env_dir)
        # no arguments: the environment's cache
        ds = stoker.Dataset("s3://data/big/shard-00000.stk")
        assert ds[5]["label"] == 5 and dir_bytes(env_dir) > 0
        # an int limit (bytes) with the environment's directory
        ds = stoker.Dataset("s3://data/big/shard-00001.stk", cache_limit=8 << 20)
        assert ds[5]["label"] == 105


def test_cache_kwargs_bad_values(endpoint, monkeypatch, tmp_path):
    d = tmp_path / "c"
    # smaller than one block: refused at start, before anything is read
    for limit in ("1MB", 4096, "0"):
        with pytest.raises(stoker.StokerInvalidError, match="smaller than one cache block"):
            stoker.Loader("s3://data/big/", batch_size=4, cache_dir=d, cache_limit=limit)
    with pytest.raises(stoker.StokerInvalidError, match="cache_limit=lots: not a size"):
        stoker.Dataset("s3://data/big/", cache_dir=d, cache_limit="lots")
    with pytest.raises(TypeError, match="cache_limit"):
        stoker.Dataset("s3://data/big/", cache_dir=d, cache_limit=1.5)
    ds = stoker.Dataset("s3://data/big/shard-00000.stk")
    with pytest.raises(stoker.StokerInvalidError, match="pass them to stoker.Dataset"):
        stoker.Loader(ds, batch_size=4, cache_dir=d)
    assert not os.path.exists(d)
    # the environment's limit, too small, with the directory given here
    monkeypatch.setenv("STOKER_CACHE_LIMIT", "1M")
    with pytest.raises(stoker.StokerInvalidError, match="smaller than one cache block"):
        stoker.Dataset("s3://data/big/shard-00000.stk", cache_dir=d)


# ---- resume and outages ----

def test_resume_mid_epoch_from_s3(endpoint, tmp_path):
    args = dict(batch_size=32, shuffle=True, seed=8, num_workers=2)
    full = [np.asarray(b["index"]).tolist() for b in stoker.Loader("s3://data/train/", **args)]
    loader = stoker.Loader("s3://data/train/", cache_dir=tmp_path / "c", **args)
    it = iter(loader)
    head = [np.asarray(next(it)["index"]).tolist() for _ in range(7)]
    state = json.loads(json.dumps(loader.state_dict()))
    loader.close()
    resumed = stoker.Loader("s3://data/train/", cache_dir=tmp_path / "c",
                            **dict(args, seed=99, num_workers=1))  # the seed comes from the state
    resumed.load_state_dict(state)
    tail = [np.asarray(b["index"]).tolist() for b in resumed]
    assert head + tail == full
    got = [i for b in head + tail for i in b]
    assert sorted(got) == list(range(N))  # the epoch, each sample exactly once


def test_server_stops_mid_epoch_and_comes_back(s3, endpoint, monkeypatch):
    host = endpoint.split("//")[1]
    with FaultProxy(host) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        # the retry budget (12 attempts from 50 ms, doubling to 5 s: at least 13 s of waiting)
        # outlasts the 1 s outage many times over
        monkeypatch.setenv("STOKER_HTTP_RETRIES", "12")
        monkeypatch.setenv("STOKER_HTTP_BACKOFF_MS", "50")
        # one GET per record, so "after 60 GETs" is mid-epoch whatever the timing; the same
        # faults with read-ahead and coalescing on are test_remote_transport.py's
        monkeypatch.setenv("STOKER_HTTP_PREFETCH", "0")
        loader = stoker.Loader("s3://data/train/shard-00001.stk", batch_size=10, shuffle=True,
                               seed=2, num_workers=2)
        proxy.outage(after=60, seconds=1.0)  # dropped connections, once 60 GETs went through
        got = epoch(loader, first=200)
        assert sorted(got) == list(range(200))
        assert proxy.refused > 0 and proxy.outage_start is not None
        assert proxy.range_gets > 60  # reads went on after the outage


@pytest.mark.parametrize("status", [503, None])
def test_server_down_past_the_retry_budget_names_url_record_status(s3, endpoint, monkeypatch,
                                                                   status):
    host = endpoint.split("//")[1]
    with FaultProxy(host) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        monkeypatch.setenv("STOKER_HTTP_RETRIES", "3")
        monkeypatch.setenv("STOKER_HTTP_BACKOFF_MS", "10")
        monkeypatch.setenv("STOKER_HTTP_PREFETCH", "0")  # one GET per record (as above)
        loader = stoker.Loader("s3://data/train/shard-00002.stk", batch_size=10, num_workers=1)
        proxy.outage(after=40, status=status)  # mid-epoch, for good
        got = []
        with pytest.raises(stoker.Error) as e:
            for b in loader:
                got += np.asarray(b["index"]).tolist()
        msg = str(e.value)
        assert got and got == list(range(len(got))) and len(got) < 200  # stopped mid-epoch
        assert "s3://data/train/shard-00002.stk" in msg and "record" in msg, msg
        assert "after 3 attempt" in msg, msg
        if status:
            assert "last HTTP status 503 SlowDown" in msg, msg
        assert proxy.refused >= 3


# ---- torchrun: 2 ranks, one cache directory ----

TORCHRUN_JOB = r"""
import json, os, sys
import numpy as np, torch.distributed as dist, stoker
dist.init_process_group("gloo")
rank = dist.get_rank()
out, cache = sys.argv[1], sys.argv[2]
if rank == 1:
    dist.barrier()  # rank 0 reads its share first: rank 1 then finds every block it needs cached
loader = stoker.Loader("s3://data/big/", batch_size=10, shuffle=True, seed=9, num_workers=1,
                       cache_dir=cache, cache_limit="64MB")
assert (loader.rank, loader.world_size) == (rank, 2)
got = [i for b in loader for i in np.asarray(b["index"]).tolist()]
if rank == 0:
    dist.barrier()
with open(os.path.join(out, "rank%d.json" % rank), "w") as f:
    json.dump(got, f)
dist.destroy_process_group()
"""


def test_torchrun_two_ranks_share_one_cache(s3, endpoint, monkeypatch, tmp_path):
    host = endpoint.split("//")[1]
    with FaultProxy(host) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        torchrun(TORCHRUN_JOB, 2, [tmp_path, tmp_path / "cache"], tmp_path)
        parts = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
        assert not set(parts[0]) & set(parts[1])  # disjoint
        assert sorted(parts[0] + parts[1]) == list(range(BIG_N))  # and together the epoch
        # each block was fetched once for both ranks (rank 1 read them all from the cache)
        assert proxy.range_gets == s3.big_blocks, (proxy.range_gets, s3.big_blocks)

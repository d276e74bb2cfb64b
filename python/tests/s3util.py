"""Loopback doubles for the remote tests: a local S3 server (s3rver from npm, installed by
scripts/s3rver.sh), a tiny S3 PUT, and a fault-injecting HTTP proxy (latency, 500/503 answers,
truncated bodies, dropped connections), all on 127.0.0.1 and bounded in time."""
import http.client
import http.server
import os
import random
import socket
import subprocess
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def s3rver_command():
    """The s3rver command, installing it on first use; None when npm cannot install it."""
    prefix = os.environ.get("STOKER_S3RVER_PREFIX", os.path.join(REPO, "build", "s3rver"))
    try:
        out = subprocess.run(["bash", os.path.join(REPO, "scripts", "s3rver.sh"), prefix],
                             capture_output=True, text=True, timeout=120, check=True)
    except (subprocess.SubprocessError, OSError):
        return None
    return out.stdout.strip().splitlines()[-1]


class S3Server:
    """s3rver on a free loopback port serving a temporary directory, with `bucket` created."""

    def __init__(self, command, directory, bucket="data", port=None):
        self.command, self.directory, self.bucket = command, str(directory), bucket
        self.port = port or free_port()
        self.proc = None

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout=30):
        os.makedirs(self.directory, exist_ok=True)
        self.log = open(self.directory.rstrip("/") + ".log", "ab")
        self.proc = subprocess.Popen(
            [self.command, "-d", self.directory, "-a", "127.0.0.1", "-p", str(self.port),
             "--configure-bucket", self.bucket],
            stdout=self.log, stderr=subprocess.STDOUT,
            # s3rver's continuation tokens use DES: OpenSSL 3 has it in the legacy provider
            env=dict(os.environ, NODE_OPTIONS="--openssl-legacy-provider"))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.endpoint}/{self.bucket}?list-type=2",
                                            timeout=2):
                    return self
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError("s3rver exited at start")
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("s3rver did not start in %s s" % timeout)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if getattr(self, "log", None):
            self.log.close()
            self.log = None

    def put(self, key, data):
        """PUT one object (s3rver checks no signature: an unsigned request)."""
        req = urllib.request.Request(f"{self.endpoint}/{self.bucket}/{key}", data=data,
                                     method="PUT")
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 200, r.status

    def put_dir(self, directory, prefix):
        """Upload every file of `directory` under `prefix`/; returns the keys."""
        keys = []
        for name in sorted(os.listdir(directory)):
            with open(os.path.join(directory, name), "rb") as f:
                self.put(f"{prefix}/{name}", f.read())
            keys.append(f"{prefix}/{name}")
        return keys


class FaultProxy:
    """A reverse proxy to `upstream` ("host:port") on a free loopback port. For each GET that
    carries a body it draws, with a seeded RNG: an error answer (500 or 503 SlowDown) with
    probability `error_rate`, a truncated body with `truncate_rate`, a dropped connection with
    `drop_rate`; every request waits `latency` seconds first. `down` makes it refuse everything
    (connections closed at once). `outage(after, seconds, status)` schedules a stop mid-epoch:
    once `after` ranged GETs went through, every request for `seconds` (None: for good) has its
    connection dropped (`status` None) or is answered `status` (503: SlowDown), then the server
    comes back. `if_match` makes it honour If-Match as S3 does (s3rver ignores it): a GET whose
    If-Match is not the object's ETag is answered 412 Precondition Failed (counted in
    `precondition_failed`). `serialize` runs one request at a time, PUTs included (forwarded
    like GETs): an object replaced through the proxy is then replaced atomically for readers,
    as on S3 (s3rver writes the new bytes before their ETag). Counts requests, HEADs, faults,
    refused requests and ranged GETs served."""

    def __init__(self, upstream, error_rate=0.0, truncate_rate=0.0, drop_rate=0.0, latency=0.0,
                 seed=1, if_match=False, serialize=False):
        self.upstream = upstream
        self.error_rate, self.truncate_rate, self.drop_rate = error_rate, truncate_rate, drop_rate
        self.latency = latency
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.down = False
        self.requests = self.faults = self.bytes = self.range_gets = self.refused = 0
        self.heads = 0
        self.if_match, self.precondition_failed = if_match, 0
        self.one_at_a_time = threading.Lock() if serialize else None
        self.outage_after = self.outage_seconds = self.outage_status = self.outage_start = None
        self.in_flight = self.max_in_flight = 0
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_HEAD(self):
                with proxy.lock:
                    proxy.heads += 1
                self.forward(body=False)

            def do_GET(self):
                self.forward(body=True)

            def do_PUT(self):
                self.forward(body=False, upload=True)

            def forward(self, body, upload=False):
                with proxy.lock:
                    proxy.requests += 1
                    proxy.in_flight += 1
                    proxy.max_in_flight = max(proxy.max_in_flight, proxy.in_flight)
                    r = proxy.rng.random()
                try:
                    if proxy.one_at_a_time:
                        with proxy.one_at_a_time:
                            self._forward(body, r, upload)
                    else:
                        self._forward(body, r, upload)
                finally:
                    with proxy.lock:
                        proxy.in_flight -= 1

            def _forward(self, body, r, upload=False):
                if upload:
                    data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                    conn = http.client.HTTPConnection(proxy.upstream, timeout=30)
                    try:
                        conn.request("PUT", self.path, body=data,
                                     headers={"Content-Length": str(len(data))})
                        resp = conn.getresponse()
                        resp.read()
                    finally:
                        conn.close()
                    self.send_response(resp.status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if proxy.latency:
                    time.sleep(proxy.latency)
                status = proxy.outage_now()
                if proxy.down or status == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if status:
                    msg = b"<Error><Code>SlowDown</Code></Error>"
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(msg)))
                    self.end_headers()
                    self.wfile.write(msg)
                    return
                fault = None
                if body and "Range" in self.headers:
                    if r < proxy.error_rate:
                        fault = "error"
                    elif r < proxy.error_rate + proxy.truncate_rate:
                        fault = "truncate"
                    elif r < proxy.error_rate + proxy.truncate_rate + proxy.drop_rate:
                        fault = "drop"
                if fault:
                    with proxy.lock:
                        proxy.faults += 1
                if fault == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if fault == "error":
                    code = 503 if r < proxy.error_rate / 2 else 500
                    msg = (b"<Error><Code>SlowDown</Code></Error>" if code == 503
                           else b"<Error><Code>InternalError</Code></Error>")
                    self.send_response(code)
                    self.send_header("Content-Length", str(len(msg)))
                    self.end_headers()
                    self.wfile.write(msg)
                    return
                conn = http.client.HTTPConnection(proxy.upstream, timeout=30)
                try:
                    headers = {k: v for k, v in self.headers.items()
                               if k.lower() not in ("connection", "keep-alive")}
                    conn.request(self.command, self.path, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                finally:
                    conn.close()
                want = self.headers.get("If-Match")
                if (proxy.if_match and want and body and resp.status < 300 and
                        resp.getheader("ETag") != want):
                    with proxy.lock:
                        proxy.precondition_failed += 1
                    msg = b"<Error><Code>PreconditionFailed</Code></Error>"
                    self.send_response(412)
                    self.send_header("Content-Length", str(len(msg)))
                    self.end_headers()
                    self.wfile.write(msg)
                    return
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("connection", "keep-alive", "transfer-encoding",
                                         "content-length"):
                        self.send_header(k, v)
                length = resp.getheader("Content-Length") if not body else str(len(data))
                self.send_header("Content-Length", length or "0")
                self.end_headers()
                if not body:
                    return
                if fault == "truncate" and len(data) > 1:
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(data)
                with proxy.lock:
                    proxy.bytes += len(data)
                    proxy.range_gets += "Range" in self.headers

        class Server(http.server.ThreadingHTTPServer):
            request_queue_size = 256  # a short backlog drops SYNs: 1 s, 3 s connect stalls
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def outage(self, after, seconds=None, status=None):
        with self.lock:
            self.outage_after, self.outage_seconds = after, seconds
            self.outage_status, self.outage_start = status, None

    def outage_now(self):
        """None when the server is up for this request, else "drop" or the status to answer."""
        with self.lock:
            if self.outage_after is None or self.range_gets < self.outage_after:
                return None
            now = time.monotonic()
            if self.outage_start is None:
                self.outage_start = now
            if self.outage_seconds is not None and now - self.outage_start >= self.outage_seconds:
                return None
            self.refused += 1
            return self.outage_status or "drop"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


# every variable that changes how stoker reaches S3: the tests start from none of them
_S3_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
           "STOKER_CACHE_DIR", "STOKER_CACHE_LIMIT", "STOKER_HTTP_PREFETCH",
           "STOKER_HTTP_INFLIGHT", "STOKER_HTTP_COALESCE_GAP", "STOKER_HTTP_COALESCE_MAX",
           "AWS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "STOKER_HTTP_INSECURE")


def _anonymous(setenv, delenv, endpoint):
    for k in _S3_ENV:
        delenv(k)
    setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    setenv("AWS_ENDPOINT_URL", endpoint)


def anonymous_endpoint(monkeypatch, endpoint, retries=3):
    """Point s3:// at `endpoint` (the local server or a proxy in front of it), anonymously, with
    no cache, the transport's defaults and `retries` attempts; returns endpoint."""
    _anonymous(monkeypatch.setenv, lambda k: monkeypatch.delenv(k, raising=False), endpoint)
    monkeypatch.setenv("STOKER_HTTP_RETRIES", str(retries))
    return endpoint


def anonymous_process(endpoint):
    """anonymous_endpoint for the whole process (the benches, which have no monkeypatch): the
    same settings in os.environ, the retries left at the transport's default."""
    _anonymous(os.environ.__setitem__, lambda k: os.environ.pop(k, None), endpoint)

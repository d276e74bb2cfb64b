#!/usr/bin/env python3
"""Token corpora (issue 26): stoker's rows against nanoGPT's get_batch and the copy ceilings, packed
rows against windows, opening a 10^9-token Megatron corpus, and packing waste.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_tokens.py windows [--tokens 2e8]
        [--batches 1500] [--rounds 3] [--base OTHER/build] [--only "1 thread,pread"]
    PYTHONPATH=build/python /usr/bin/python3 bench/bench_tokens.py packed [--tokens 2e8]
        [--base OTHER/build]
    PYTHONPATH=build/python /usr/bin/python3 bench/bench_tokens.py open [--tokens 1e9]
    PYTHONPATH=build/python /usr/bin/python3 bench/bench_tokens.py waste

Data is generated under bench/data/tokens/ (git-ignored) on first use: a nanoGPT uint16 file of
random ids (windows), a Megatron corpus of log-normal documents with mean T/4 (packed, waste),
a 10^9-token Megatron corpus (open: 2 GB + its index). B=32, T=2048 throughout. Every figure is
tokens/s of wall time and tokens per CPU-second of the process (the machine is shared: the
CPU-second figure moves less with the load); each round runs every method once, interleaved,
and the table gives medians. `uptime` is printed with each run. The loader's rows also give the
consumer's CPU per batch (the thread taking the batches: the training loop's share), in
microseconds. `--base OTHER/build`: the same loader rows, from Python and from C, with another
build (its build/python and build/libstoker.a), in the same rounds: a before/after.

Local files are read with io_uring or pread by default; the rows marked "mapped" set
STOKER_MMAP=1 (mapped and read in place, src/io/stk_mapped.c), those marked "read"
STOKER_MMAP=0 (the default's path). "first pass": a fresh process (each
page of the mapping touched for the first time, which on this VM costs about 2 us a page);
"later epoch": after an untimed epoch in the same process. The windows table gives each figure
against the ceilings: a pread of the rows' bytes, a memcpy of them from a populated mapping
(the issue's "memcpy of the same bytes"), the mapping widened with no loader, and a memcpy of
the delivered int64 bytes.
"""
import argparse
import json
import os
import resource
import statistics
import struct
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "bench", "data", "tokens")

B, T = 32, 2048
COPY = os.path.join(ROOT, "build", "bench_tokcopy")
LIBS = ("libturbojpeg", "spng", "libxxhash", "libwebp", "libtiff-4", "hdf5", "lmdb", "libcurl",
        "libcrypto", "zlib")  # the Makefile's PKGS
AUDIO_LIBS = ("sndfile", "libmpg123", "fftw3f")  # the Makefile's optional ones, where found
VIDEO_LIBS = ("libavformat", "libavcodec", "libavutil", "libswscale")  # all or none, as there


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def gen_nanogpt(n):
    path = os.path.join(DATA, f"train_{n}.bin")
    if not os.path.exists(path):
        os.makedirs(DATA, exist_ok=True)
        rng = np.random.default_rng(0)
        with open(path + ".tmp", "wb") as f:
            for at in range(0, n, 50_000_000):
                rng.integers(0, 50257, min(50_000_000, n - at), dtype=np.uint16).tofile(f)
        os.rename(path + ".tmp", path)
    return path


def gen_megatron(n, name, mean=T // 4, sigma=1.0):
    """A Megatron corpus of ~n tokens in log-normal documents (mean `mean`), written piecewise:
    the same layout as token_corpora.write_megatron (used for the index), without holding the
    tokens."""
    prefix = os.path.join(DATA, name)
    if os.path.exists(prefix + ".idx"):
        return prefix
    os.makedirs(DATA, exist_ok=True)
    rng = np.random.default_rng(1)
    lens = []
    total = 0
    while total < n:
        x = np.maximum(1, rng.lognormal(np.log(mean) - sigma ** 2 / 2, sigma, 1_000_000)
                       ).astype(np.int64)
        lens.append(x)
        total += int(x.sum())
    lens = np.concatenate(lens)
    lens = lens[:int(np.searchsorted(np.cumsum(lens), n)) + 1]
    with open(prefix + ".bin.tmp", "wb") as f:
        left = int(lens.sum())
        while left:
            k = min(left, 50_000_000)
            rng.integers(1, 50257, k, dtype=np.uint16).tofile(f)
            left -= k
    # the index: one sequence per document, back to back (python/tests/token_corpora.py's
    # write_megatron writes the same layout from documents in memory)
    with open(prefix + ".idx.tmp", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", 8))
        f.write(struct.pack("<Q", len(lens)))
        f.write(struct.pack("<Q", len(lens) + 1))
        f.write(lens.astype(np.int32).tobytes())
        ptr = np.zeros(len(lens), np.int64)
        ptr[1:] = np.cumsum(lens[:-1]) * 2
        f.write(ptr.tobytes())
        f.write(np.arange(len(lens) + 1, dtype=np.int64).tobytes())
    os.rename(prefix + ".bin.tmp", prefix + ".bin")
    os.rename(prefix + ".idx.tmp", prefix + ".idx")
    return prefix


def warm(path):
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def nanogpt_get_batch(path, K):
    """nanoGPT train.py's get_batch (device 'cpu'), K times: a fresh memmap per batch, random
    offsets from torch.randint, x and y stacked as int64."""
    import torch
    torch.manual_seed(1337)
    t0, c0 = time.perf_counter(), cpu()
    for _ in range(K):
        data = np.memmap(path, dtype=np.uint16, mode="r")
        ix = torch.randint(len(data) - T, (B,))
        x = torch.stack([torch.from_numpy((data[i:i + T]).astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy((data[i + 1:i + 1 + T]).astype(np.int64)) for i in ix])
        del x, y
    return K * B * T / (time.perf_counter() - t0), K * B * T / (cpu() - c0)


ROWS_CHILD = r"""
import json, resource, sys, time
import numpy, torch  # imported first, as a training script has them
import stoker
a = json.loads(sys.argv[1])
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
L = stoker.Loader(a["data"], batch_size=a["B"], seq_len=a["T"], tokens=a["tokens"], shuffle=True,
                  seed=0, num_workers=a["threads"], **a["kw"])
if a["epoch"]:
    L.set_epoch(a["epoch"])
it = iter(L)
for _ in range(a["warm"]):  # untimed: a later epoch (the files touched by this process)
    if next(it, None) is None:
        it = iter(L)
K = a["K"]
t0, c0, th0 = time.perf_counter(), cpu(), time.thread_time()
for _ in range(K):
    b = next(it, None)
    if b is None:  # the epoch ended: the next one goes on
        it = iter(L)
        b = next(it)
    del b
w, c, th = time.perf_counter() - t0, cpu() - c0, time.thread_time() - th0
L.close()
n = K * a["B"] * a["T"]
print(json.dumps([n / w, n / c, th / K * 1e6]))
"""


def env_for(mapped, **more):
    """The environment of a child: files mapped (STOKER_MMAP=1) or read (the default, named
    STOKER_MMAP=0 in the rows)."""
    env = dict(os.environ, **more)
    env["STOKER_MMAP"] = "1" if mapped else "0"
    return env


def stoker_rows(data, K, threads, tokens="windows", epoch=0, build=None, mapped=True, warm=0,
                **kw):
    """The Loader from Python, in a process of its own (build: another build directory's
    python package; mapped=False: STOKER_MMAP=0; warm: batches taken before the clock):
    (tokens/s, tokens/cpu-s, consumer us/batch)."""
    env = env_for(mapped, PYTHONPATH=os.path.join(build or os.path.join(ROOT, "build"), "python"))
    arg = json.dumps(dict(data=data, K=K, threads=threads, tokens=tokens, epoch=epoch, kw=kw,
                          B=B, T=T, warm=warm))
    out = subprocess.run([sys.executable, "-c", ROWS_CHILD, arg], check=True, env=env,
                         capture_output=True, text=True).stdout
    return tuple(json.loads(out.strip().splitlines()[-1]))


def ceiling(path, method, K):
    out = subprocess.run([COPY, path, method, str(B), str(T), str(K)], check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[1]), float(out[3])


def table(res, *bases):
    """One row a method: medians (wall [min-max]), per CPU-second, and the ratio of its tokens
    per CPU-second to each of `bases` (the ones measured)."""
    bases = [b for b in bases if b in res]
    print("| method | Mtokens/s (wall) | Mtokens/cpu-s | " +
          " | ".join(f"vs {b} (cpu-s)" for b in bases) + " | consumer us/batch |")
    print("|---|---|---|" + "---|" * len(bases) + "---|")
    bs = [statistics.median(r[1] for r in res[b]) for b in bases]
    for m, rs in res.items():
        w = statistics.median(r[0] for r in rs)
        c = statistics.median(r[1] for r in rs)
        cons = [r[2] for r in rs if len(r) > 2]
        cons = f"{statistics.median(cons):.1f}" if cons else ""
        print(f"| {m} | {w / 1e6:.1f} [{min(r[0] for r in rs) / 1e6:.1f}-"
              f"{max(r[0] for r in rs) / 1e6:.1f}] | {c / 1e6:.1f} | " +
              " | ".join(f"{c / b:.2f}x" for b in bs) + f" | {cons} |")


def cmd_windows(a):
    build_copy()
    base = []
    if a.base:  # the same loader rows with another build, in the same rounds
        exe = build_base(a.base)
        base = [("base: stoker windows, 1 thread", lambda: stoker_rows(path, K, 1, build=a.base)),
                ("base: stoker windows, 2 threads",
                 lambda: stoker_rows(path, K, 2, build=a.base)),
                ("base: C loop, windows, 1 thread", lambda: c_loop(path, 0, 1, K, exe)),
                ("base: C loop, windows, 2 threads", lambda: c_loop(path, 0, 2, K, exe))]
    path = gen_nanogpt(int(a.tokens))
    warm(path)
    K = a.batches
    E = (int(a.tokens) - 1) // T // B + 1  # batches in an epoch: the warm-up of "later epoch"
    print(uptime())
    res = {}
    loader = []  # the loader's rows: Python and C, 1 and 2 threads, mapped and read
    for t in (1, 2):
        th = f"{t} thread{'s' if t > 1 else ''}"
        for first, w in (("first pass", 0), ("later epoch", E)):
            for mp, how in ((True, "mapped"), (False, "read (STOKER_MMAP=0)")):
                loader.append((f"stoker windows, {th}, {first}, {how}",
                               lambda t=t, w=w, mp=mp: stoker_rows(path, K, t, mapped=mp, warm=w)))
                loader.append((f"C loop: windows, {th}, {first}, {how}",
                               lambda t=t, w=w, mp=mp: c_loop(path, 0, t, K, mapped=mp, warm=w)))
    for r in range(a.rounds):
        for name, fn in base + [
            ("nanoGPT get_batch (1 process)", lambda: nanogpt_get_batch(path, K)),
            *loader,
            ("stoker random, 1 thread, first pass, mapped",
             lambda: stoker_rows(path, K, 1, "random")),
            ("stoker windows int32, 1 thread, first pass, mapped",
             lambda: stoker_rows(path, K, 1, ids_dtype="int32")),
            ("ceiling: pread of the rows' bytes (2/token)", lambda: ceiling(path, "pread", K)),
            ("ceiling: pread + widen (no loader)", lambda: ceiling(path, "widen", K)),
            ("ceiling: io_uring reads, a batch a submission (2/token)",
             lambda: ceiling(path, "uring", K)),
            ("ceiling: io_uring reads + widen (no loader)", lambda: ceiling(path, "uring-widen", K)),
            ("ceiling: memcpy of the rows' bytes from an mmap (2/token)",
             lambda: ceiling(path, "mmap", K)),
            ("ceiling: mmap + widen (no loader, no system call)",
             lambda: ceiling(path, "mmap-widen", K)),
            ("ceiling: memcpy of the rows' bytes from a fresh mmap (first touch, 2/token)",
             lambda: ceiling(path, "mmap-first", K)),
            ("ceiling: memcpy of the delivered bytes (16/token)",
             lambda: ceiling(path, "memcpy", K)),
        ]:
            if a.only and "pread of the rows" not in name and \
                    not any(o in name for o in a.only.split(",")):
                continue
            res.setdefault(name, []).append(fn())
        print(f"round {r + 1}: {uptime()}", file=sys.stderr)
    print(uptime())
    if "nanoGPT get_batch (1 process)" in res:
        table(res, "nanoGPT get_batch (1 process)")
        print()
    table(res, "ceiling: pread of the rows' bytes (2/token)",
          "ceiling: memcpy of the rows' bytes from an mmap (2/token)",
          "ceiling: mmap + widen (no loader, no system call)",
          "ceiling: memcpy of the delivered bytes (16/token)")


def build_copy(lib=None, out=COPY):
    """bench_tokcopy.c linked with build/libstoker.a (or `lib`: another build's, for an A/B of
    the loader's C loop in the same rounds). -O3 -march=native: the ceilings' loops as fast as
    the compiler makes them on this machine (the library itself is built as the Makefile does)."""
    audio = [p for p in AUDIO_LIBS if subprocess.run(["pkg-config", "--exists", p]).returncode == 0]
    if subprocess.run(["pkg-config", "--exists", *VIDEO_LIBS]).returncode == 0:
        audio += VIDEO_LIBS
    libs = subprocess.run(["pkg-config", "--libs", *LIBS, *audio], check=True,
                          capture_output=True, text=True).stdout.split()
    subprocess.run(["cc", "-O3", "-march=native", "-I", os.path.join(ROOT, "include"), "-o", out,
                    os.path.join(ROOT, "bench", "bench_tokcopy.c"),
                    lib or os.path.join(ROOT, "build", "libstoker.a"), *libs, "-ljpeg",
                    "-lpthread", "-ldl", "-lm"], check=True)


def build_base(build):
    """bench_tokcopy linked with another build's libstoker.a (for --base)."""
    exe = COPY + "_base"
    build_copy(os.path.join(build, "libstoker.a"), exe)
    return exe


def c_loop(prefix, mode, threads, K, exe=COPY, mapped=True, warm=0, fills="vector"):
    """The loader from C (bench_tokcopy loop): mapped=False: STOKER_MMAP=0; warm: batches
    before the clock; fills: "plain" or "none" (a packed row's computed ids; see the C file)."""
    out = subprocess.run([exe, prefix, "loop", str(B), str(T), str(K), str(mode), str(threads),
                          str(warm), fills], check=True, capture_output=True, text=True,
                         env=env_for(mapped)).stdout.split()
    return float(out[1]), float(out[3]), float(out[5])


def cmd_packed(a):
    prefix = gen_megatron(int(a.tokens), f"ln_{int(a.tokens)}")
    warm(prefix + ".bin")
    build_copy()
    K = a.batches
    exe = build_base(a.base) if a.base else None
    print(uptime())
    res = {}
    for r in range(a.rounds):
        for t in (1, 2):
            res.setdefault(f"windows, {t} thread(s)", []).append(stoker_rows(prefix, K, t))
            res.setdefault(f"packed best-fit, {t} thread(s)", []).append(
                stoker_rows(prefix, K, t, "packed"))
            res.setdefault(f"windows, {t} thread(s), read (STOKER_MMAP=0)", []).append(
                stoker_rows(prefix, K, t, mapped=False))
            res.setdefault(f"packed best-fit, {t} thread(s), read (STOKER_MMAP=0)", []).append(
                stoker_rows(prefix, K, t, "packed", mapped=False))
            res.setdefault(f"C loop: windows, {t} thread(s)", []).append(
                c_loop(prefix, 0, t, K))
            res.setdefault(f"C loop: packed best-fit, {t} thread(s)", []).append(
                c_loop(prefix, 2, t, K))
            res.setdefault(f"C loop: packed best-fit, {t} thread(s), fills by the plain loop",
                           []).append(c_loop(prefix, 2, t, K, fills="plain"))
            res.setdefault(f"C loop: packed best-fit, {t} thread(s), NO fills (rows wrong: "
                           f"their share)", []).append(c_loop(prefix, 2, t, K, fills="none"))
            if exe:
                res.setdefault(f"base: packed best-fit, {t} thread(s)", []).append(
                    stoker_rows(prefix, K, t, "packed", build=a.base))
                res.setdefault(f"base: C loop: packed best-fit, {t} thread(s)", []).append(
                    c_loop(prefix, 2, t, K, exe))
        print(f"round {r + 1}: {uptime()}", file=sys.stderr)
    print(uptime())
    table(res, "windows, 1 thread(s)")


OPEN_CHILD = r"""
import json, resource, sys, time
import numpy, torch  # imported first: what they take is not the corpus'
import stoker
def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
prefix, mode = sys.argv[1], sys.argv[2]
r0 = rss()
t0 = time.perf_counter()
ds = stoker.tokens.open_tokens(prefix, 2048, tokens=mode)
t1 = time.perf_counter()
r1 = rss()
L = stoker.Loader(ds, batch_size=32, shuffle=True, num_workers=1)
b = next(iter(L))
t2 = time.perf_counter()
info = ds.info
print(json.dumps({"open_s": t1 - t0, "first_batch_s": t2 - t1, "rss_before": r0,
                  "rss_open": r1, "rss_after": rss(), "n_documents": info["n_documents"],
                  "n_rows": info["n_rows"], "n_tokens": info["n_tokens"], "n_padding": info["n_padding"]}))
"""


def cmd_open(a):
    prefix = gen_megatron(int(a.tokens), f"mega_{int(a.tokens)}")
    idx = os.path.getsize(prefix + ".idx")
    print(uptime())
    print(f"corpus: {prefix}.bin {os.path.getsize(prefix + '.bin') / 1e9:.2f} GB, .idx "
          f"{idx / 1e6:.1f} MB")
    print("| rows | open (s) | loader + first batch (s) | peak RSS growth: open / + loader "
          "(MB) | documents | rows | bytes per document (open) |")
    print("|---|---|---|---|---|---|---|")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "build", "python"))
    for mode in ("windows", "packed"):
        for _ in range(a.rounds):
            out = subprocess.run([sys.executable, "-c", OPEN_CHILD, prefix, mode], check=True,
                                 capture_output=True, text=True, env=env).stdout
            d = json.loads(out)
            grown = d["rss_open"] - d["rss_before"]
            total = d["rss_after"] - d["rss_before"]
            print(f"| {mode} | {d['open_s']:.2f} | {d['first_batch_s']:.3f} | "
                  f"{grown / 1e6:.0f} / {total / 1e6:.0f} | {d['n_documents']} | {d['n_rows']} | "
                  f"{grown / d['n_documents']:.1f} |")
    print(uptime())


def cmd_waste(a):
    import stoker
    print(uptime())
    print("| documents (log-normal) | T | mean length | rule | rows | padding |")
    print("|---|---|---|---|---|---|")
    for sigma in (0.5, 1.0, 1.5):
        for t in (2048, 8192):
            prefix = gen_megatron(int(a.tokens), f"waste_{sigma}_{t}_{int(a.tokens)}", t // 4,
                                  sigma)
            for rule in ("best-fit", "first-fit"):
                i = stoker.tokens.open_tokens(prefix, t, tokens="packed", packing=rule).info
                print(f"| {i['n_documents']} (sigma {sigma}) | {t} | "
                      f"{i['n_tokens'] / i['n_documents']:.0f} | {rule} | {i['n_rows']} | "
                      f"{100 * i['n_padding'] / (i['n_rows'] * t):.2f}% |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["windows", "packed", "open", "waste"])
    ap.add_argument("--tokens", type=float, default=None)
    ap.add_argument("--batches", type=int, default=1500)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--base", default=None,
                    help="windows, packed: also run the loader rows with this build directory "
                         "(its python package and libstoker.a), in the same rounds (an A/B)")
    ap.add_argument("--only", default=None,
                    help="windows: only the methods whose name contains one of these "
                         "comma-separated strings (the pread ceiling is always wanted)")
    a = ap.parse_args()
    if a.tokens is None:
        a.tokens = {"open": 1e9, "waste": 2e7}.get(a.what, 2e8)
    {"windows": cmd_windows, "packed": cmd_packed, "open": cmd_open, "waste": cmd_waste}[a.what](a)


if __name__ == "__main__":
    main()

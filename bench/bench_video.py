#!/usr/bin/env python3
"""Video clips side by side (issue 28): stoker against a DataLoader with torchvision.io/PyAV and
against decoding every frame of the same files with libavcodec alone.

The recipe is Kinetics-style: a clip of 16 frames at stride 4 (a random start), the short side
resized to 256, RandomResizedCrop(224), a horizontal flip, ToTensor and Normalize, batches of
float32 [B, 3, 16, 224, 224]. The data is a class-per-folder tree made by bench/gen_videos.py
(pans and zooms over photo-like images, H.264 in MP4).

  stoker:      stoker.Loader(tree, frames_per_clip=16, frame_step=4, transforms=the Compose)
  DataLoader:  a map-style Dataset: torchvision.io.read_video(path, t0, t1, pts_unit="sec")
               (PyAV: seeks, decodes and converts every frame of the span), every 4th frame,
               the same torchvision transforms on the [T, C, H, W] tensor (one set of
               parameters per clip, as torchvision applies them to a batch of frames),
               num_workers from --workers, the best taken
  ceiling:     every frame of every file decoded by libavcodec through PyAV's decode loop, no
               colour conversion, one process per core: what decoding whole files costs

Each runs in its own process (its peak RSS is its own). Samples/s: epoch 1 and epochs 2.. apart.
--clips-per-video K takes K clips of each video per epoch (a long video), in stoker by
clips_per_video=K, in the DataLoader by listing each video K times. Variants of stoker, side by
side in the same run: --before PYTHONPATH (another build, e.g. main's before a change),
--variants cold (the tree's frame index files, <video>.stkvidx, removed first: a first-ever
loader, which writes them; the plain "stoker" row runs after it and finds them: a new process
on an indexed tree), whole (STOKER_READ_WHOLE=1: each video read whole into memory, as before
ranged reads), dthreads1 (decoder_threads=1 instead of the thread plan), tar / stk (the tree
packed into a WebDataset tar / a .stk shard, read in place) and tar-whole / stk-whole (the same
read whole; the tar / stk rows remove the shard's index table, <shard>.stkvidx, first: a
first-ever loader), tar-beside / stk-beside (a "cold" row without the table beside the shard,
which writes it, then the plain row, a new process finding it; no cache directory),
tar-cache / stk-cache (the shard's directory taking no table, its name taken by a directory: a
"cold" row with an empty cache directory, which then holds the table, then a new process
finding it there). --stoker-only leaves out the DataLoader and
ceiling rows (for bytes-read comparisons). Bytes read per epoch are stoker's stats()["bytes_read"]; "open" is the time to
create the Loader, "first batch" from creating it to its first batch.

    /usr/bin/python3 bench/bench_video.py --videos 32 --epochs 3 --workers 0,1,2,3
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
T, STEP = 16, 4
BATCH = int(os.environ.get("BENCH_BATCH", "8"))  # batches of 2: few clips in flight
MEAN, STD = [0.43216, 0.394666, 0.37645], [0.22803, 0.22145, 0.216989]


def tv_transforms():
    import torchvision.transforms as TT
    return TT.Compose([TT.Resize(256), TT.RandomResizedCrop(224), TT.RandomHorizontalFlip(),
                       TT.ToTensor(), TT.Normalize(MEAN, STD)])


def videos_of(tree):
    """(class number, path) of the tree's videos, in ImageFolder's order (stoker's index files,
    <video>.stkvidx, left out)."""
    return [(c, os.path.join(tree, cls, f)) for c, cls in enumerate(sorted(os.listdir(tree)))
            for f in sorted(os.listdir(os.path.join(tree, cls))) if not f.endswith(".stkvidx")]


def drop_index_files(tree):
    """Remove the frame indexes kept beside the videos (<video>.stkvidx): the next loader is a
    first-ever one (cold)."""
    for d, _, names in os.walk(tree):
        for n in names:
            if n.endswith(".stkvidx"):
                os.remove(os.path.join(d, n))


def run_stoker(tree, epochs, threads):
    import stoker
    if os.environ.get("BENCH_DECODER_THREADS"):  # the dthreads1 variant
        import functools
        import stoker.video
        stoker.video.compile = functools.partial(
            stoker.video.compile, decoder_threads=int(os.environ["BENCH_DECODER_THREADS"]))
    data = os.environ.get("BENCH_DATA", tree)  # the tree, or a tar / .stk packed from it
    if os.environ.get("BENCH_COLD"):
        drop_index_files(tree)
    if os.environ.get("BENCH_DROP_TABLE") and os.path.isfile(data + ".stkvidx"):
        os.unlink(data + ".stkvidx")  # a shard's index table beside it: a first-ever loader
    times, bytes_read = [], []
    tf = tv_transforms()  # imports torchvision: not the loader's open
    t0 = time.perf_counter()
    loader = stoker.Loader(data, batch_size=BATCH, shuffle=True, seed=0, num_workers=threads,
                           frames_per_clip=T, frame_step=STEP, clips_per_video=CLIPS,
                           transforms=tf)
    t_open = time.perf_counter() - t0
    t_first = None
    with loader:
        for _ in range(epochs):
            t0, n = time.perf_counter(), 0
            for b in loader:
                n += b["video"].shape[0]
                if t_first is None:
                    t_first = t_open + time.perf_counter() - t0
                assert tuple(b["video"].shape[1:]) == (3, T, 224, 224)
            times.append((n, time.perf_counter() - t0))
            bytes_read.append(loader.stats()["bytes_read"] - sum(bytes_read))
        st = loader.stats()
    times.append(("bytes", bytes_read))
    times.append(("open", [t_open, t_first]))
    times.append(("index", [st.get("indexed", 0), st.get("index_loaded", 0)]))
    return times


def pack_sources(tree, out_dir, which):
    """The tree as a WebDataset tar (sample k: <k>.mp4 and <k>.cls) and as a .stk shard
    (stoker.pack), for the rows that read those."""
    import tarfile
    out = {}
    items = videos_of(tree)
    if "tar" in which:
        out["tar"] = os.path.join(out_dir, "videos.tar")
        with tarfile.open(out["tar"], "w") as t:
            for k, (c, p) in enumerate(items):
                t.add(p, arcname=f"{k:06d}.{p.rsplit('.', 1)[1]}")
                info = tarfile.TarInfo(f"{k:06d}.cls")
                data = str(c).encode()
                info.size = len(data)
                import io
                t.addfile(info, io.BytesIO(data))
    if "stk" in which:
        import stoker
        drop_index_files(tree)
        out["stk"] = os.path.join(out_dir, "videos.stk")
        stoker.pack(tree, out["stk"])
    return out


class ReadVideoClips:
    """torchvision.io.read_video of a random span, every STEP-th frame, the transforms on
    [T, C, H, W] (float in [0, 1]: ToTensor's work done by hand on the tensor)."""

    def __init__(self, tree):
        import av
        self.items = []
        for c, p in videos_of(tree):
            with av.open(p) as ct:
                st = ct.streams.video[0]
                n, rate = st.frames, float(st.average_rate)
            self.items += [(p, c, n, rate)] * CLIPS
        import torchvision.transforms as TT
        self.tf = TT.Compose([TT.Resize(256), TT.RandomResizedCrop(224),
                              TT.RandomHorizontalFlip(), TT.Normalize(MEAN, STD)])

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        import torch
        import torchvision.io
        p, c, n, rate = self.items[i]
        span = (T - 1) * STEP + 1
        start = int(torch.randint(0, max(1, n - span + 1), ()))
        v, _, _ = torchvision.io.read_video(p, start / rate, (start + span - 1) / rate,
                                            pts_unit="sec")
        v = v[::STEP][:T]
        if v.shape[0] < T:  # pad as stoker does
            v = torch.cat([v, v[-1:].expand(T - v.shape[0], *v.shape[1:])])
        x = v.permute(0, 3, 1, 2).float().div_(255)
        return self.tf(x).permute(1, 0, 2, 3).contiguous(), c


def run_dataloader(tree, epochs, workers):
    import torch
    torch.set_num_threads(1)
    ds = ReadVideoClips(tree)
    kw = dict(persistent_workers=True, prefetch_factor=2) if workers else {}
    dl = torch.utils.data.DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=workers, **kw)
    times = []
    for _ in range(epochs):
        t0, n = time.perf_counter(), 0
        for x, _ in dl:
            n += x.shape[0]
            assert tuple(x.shape[1:]) == (3, T, 224, 224)
        times.append((n, time.perf_counter() - t0))
    return times


def _decode_all(path):
    import av
    with av.open(path) as c:
        st = c.streams.video[0]
        st.thread_type = "NONE"
        return sum(1 for _ in c.decode(st))


def run_ceiling(tree, epochs, procs):
    from multiprocessing import Pool
    paths = [p for _, p in videos_of(tree)]
    times = []
    with Pool(procs) as pool:
        for _ in range(epochs):
            t0 = time.perf_counter()
            frames = sum(pool.map(_decode_all, paths, chunksize=1))
            times.append((len(paths), time.perf_counter() - t0))
    times.append(("frames", frames))
    return times


CLIPS = int(os.environ.get("BENCH_CLIPS", "1"))


def child(mode, tree, epochs, arg):
    fn = {"stoker": run_stoker, "dataloader": run_dataloader, "ceiling": run_ceiling}[mode]
    cpu0 = time.process_time()
    times = fn(tree, epochs, arg)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    ruc = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"times": times, "rss_mb": ru.ru_maxrss / 1024,
                      "cpu_s": time.process_time() - cpu0 + ruc.ru_utime + ruc.ru_stime}))


def measure(mode, tree, epochs, arg, env=None):
    out = subprocess.run([sys.executable, __file__, "--child", mode, "--tree", tree,
                          "--epochs", str(epochs), "--arg", str(arg)],
                         capture_output=True, text=True, env=dict(os.environ, **(env or {})))
    if out.returncode:
        raise RuntimeError(f"{mode} {arg}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def rate(times, first):
    times = [t for t in times if not isinstance(t[0], str)]
    sel = times[:1] if first else times[1:]
    n = sum(t[0] for t in sel)
    s = sum(t[1] for t in sel)
    return n / s if s else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--videos", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=10.0)  # Kinetics clips are 10 s
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--workers", default="0,1,2,3")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--data", help="an existing tree (else generated in a temporary folder)")
    ap.add_argument("--clips-per-video", type=int, default=1)
    ap.add_argument("--before", help="PYTHONPATH of another stoker build: a row of its own")
    ap.add_argument("--variants", default="",
                    help="comma list: cold (the tree's index files removed first), whole, "
                         "dthreads1, tar, tar-whole, stk, stk-whole (the tree packed so)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="stoker rows run this many times, interleaved; the median shown")
    ap.add_argument("--stoker-only", action="store_true")
    ap.add_argument("--child")
    ap.add_argument("--tree")
    ap.add_argument("--arg", type=int, default=0)
    a = ap.parse_args()
    if a.child:
        return child(a.child, a.tree, a.epochs, a.arg)
    tree = a.data
    if not tree:
        tree = tempfile.mkdtemp(prefix="stk_bench_video_")
        per = max(1, a.videos // 4)
        subprocess.run([sys.executable, os.path.join(HERE, "gen_videos.py"), tree, "--classes",
                        "4", "--per-class", str(per), "--seconds", str(a.seconds)], check=True)
    os.environ["BENCH_CLIPS"] = str(a.clips_per_video)
    load = os.getloadavg()
    rows = {}
    variants = [x for x in a.variants.split(",") if x]
    packed = pack_sources(tree, tempfile.mkdtemp(prefix="stk_bench_video_packed_"),
                          {v.split("-")[0] for v in variants})
    runs = {}  # stoker rows: one result per round, the rows interleaved round after round
    for rnd in range(a.rounds):
        if a.before:  # first: another build keeps no index files, and finds none it reads
            runs.setdefault("stoker before", []).append(
                measure("stoker", tree, a.epochs, a.threads, dict(PYTHONPATH=a.before)))
        if "cold" in variants:  # a first-ever loader: it indexes every video, writing the files
            runs.setdefault("stoker cold", []).append(
                measure("stoker", tree, a.epochs, a.threads, dict(BENCH_COLD="1")))
        runs.setdefault("stoker", []).append(  # finds the index files (after a cold row)
            measure("stoker", tree, a.epochs, a.threads))
        for v in variants:
            if v == "cold":
                continue
            if v.endswith("-beside"):  # no table beside the shard (a cold row, which writes
                # it), then a new process finding it; no cache directory
                env = dict(BENCH_DATA=packed.get(v.split("-")[0], ""), STOKER_CACHE_DIR="")
                runs.setdefault(f"stoker {v} cold", []).append(
                    measure("stoker", tree, a.epochs, a.threads, dict(env, BENCH_DROP_TABLE="1")))
                runs.setdefault(f"stoker {v}", []).append(
                    measure("stoker", tree, a.epochs, a.threads, env))
                continue
            if v.endswith("-cache"):  # the shard's directory takes no table (its name taken by
                # a directory, as a read-only one would): a cold row (empty cache dir), then a
                # new process finding the table in the cache directory
                shard = packed.get(v.split("-")[0], "")
                if os.path.isfile(shard + ".stkvidx"):
                    os.unlink(shard + ".stkvidx")
                os.makedirs(shard + ".stkvidx", exist_ok=True)
                cache = tempfile.mkdtemp(prefix="stk_bench_video_cache_")
                env = dict(BENCH_DATA=shard, STOKER_CACHE_DIR=cache)
                runs.setdefault(f"stoker {v} cold", []).append(
                    measure("stoker", tree, a.epochs, a.threads, env))
                runs.setdefault(f"stoker {v}", []).append(
                    measure("stoker", tree, a.epochs, a.threads, env))
                os.rmdir(shard + ".stkvidx")
                continue
            env = {"whole": dict(STOKER_READ_WHOLE="1"),
                   "dthreads1": dict(BENCH_DECODER_THREADS="1"),
                   "tar": dict(BENCH_DATA=packed.get("tar", ""), BENCH_DROP_TABLE="1",
                               STOKER_CACHE_DIR=""),
                   "tar-whole": dict(BENCH_DATA=packed.get("tar", ""), STOKER_READ_WHOLE="1"),
                   "stk": dict(BENCH_DATA=packed.get("stk", ""), BENCH_DROP_TABLE="1",
                               STOKER_CACHE_DIR=""),
                   "stk-whole": dict(BENCH_DATA=packed.get("stk", ""),
                                     STOKER_READ_WHOLE="1")}[v]
            runs.setdefault(f"stoker {v}", []).append(
                measure("stoker", tree, a.epochs, a.threads, env))
    for k, rs in runs.items():  # the median round by epochs 2+ (each round printed below)
        rows[k] = sorted(rs, key=lambda r: rate(r["times"], False))[len(rs) // 2]
    if a.stoker_only:
        print(f"load average before: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; after: "
              f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        for k, r in rows.items():
            extra = dict((t[0], t[1]) for t in r["times"] if isinstance(t[0], str))
            print(f"{k:24s} clips/s epoch 1 {rate(r['times'], True):.2f}, epochs 2+ "
                  f"{rate(r['times'], False):.2f}; MB read per epoch: "
                  f"{' '.join(f'{x / 1e6:.2f}' for x in extra.get('bytes', []))}; epoch 1 "
                  f"{r['times'][0][1]:.2f} s; first batch {extra.get('open', [0, 0])[1]:.2f} s; "
                  f"indexed, index_loaded: {extra.get('index', '-')}")
        if a.rounds > 1:
            for k, rs in runs.items():
                first_mb = [dict(t for t in r["times"] if isinstance(t[0], str))["bytes"][0]
                            / 1e6 for r in rs]
                print(f"{k:24s} rounds (epoch 1 s, MB epoch 1): " + "; ".join(
                    f"{r['times'][0][1]:.2f}, {mb:.2f}" for r, mb in zip(rs, first_mb)))
        return
    best = None
    for w in [int(x) for x in a.workers.split(",")]:
        r = measure("dataloader", tree, a.epochs, w)
        rows[f"dataloader w={w}"] = r
        if best is None or rate(r["times"], False) > rate(rows[best]["times"], False):
            best = f"dataloader w={w}"
    rows["ceiling"] = measure("ceiling", tree, a.epochs, a.threads)
    print(f"load average before: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; after: "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{'':24s} {'epoch 1':>9s} {'epochs 2+':>9s} {'cpu s':>7s} {'rss MB':>7s}")
    for k, r in rows.items():
        print(f"{k:24s} {rate(r['times'], True):9.2f} {rate(r['times'], False):9.2f} "
              f"{r['cpu_s']:7.1f} {r['rss_mb']:7.0f}")
    s, d, c = (rate(rows[k]["times"], False) for k in ("stoker", best, "ceiling"))
    s1, d1 = rate(rows["stoker"]["times"], True), rate(rows[best]["times"], True)
    print(f"stoker / best DataLoader ({best}): epochs 2+ {s / d:.2f}x, epoch 1 {s1 / d1:.2f}x")
    print(f"stoker / decode-every-frame ceiling: {s / c:.2f}x (clips/s vs whole videos/s)")
    if a.rounds > 1:
        for k, rs in runs.items():
            print(f"{k:24s} rounds (epoch 1 / epochs 2+ clips/s, cpu s, first batch s): " +
                  "; ".join(f"{rate(r['times'], True):.2f} / {rate(r['times'], False):.2f}, "
                            f"{r['cpu_s']:.1f}, "
                            f"{dict((t[0], t[1]) for t in r['times'] if isinstance(t[0], str)).get('open', [0, 0])[1]:.2f}"
                            for r in rs))
    files = sum(os.path.getsize(p) for _, p in videos_of(tree))
    print(f"the files: {files / 1e6:.1f} MB; {a.clips_per_video} clip(s) per video per epoch")
    for k, r in rows.items():
        if not k.startswith("stoker"):
            continue
        extra = dict((t[0], t[1]) for t in r["times"] if isinstance(t[0], str))
        b = extra.get("bytes", [])
        t_open, t_first = extra.get("open", [float("nan")] * 2)
        e1, e2 = rate(r["times"], True), rate(r["times"], False)
        print(f"{k:24s} MB read per epoch: {' '.join(f'{x / 1e6:.1f}' for x in b)}; "
              f"open {t_open:.3f} s, first batch {t_first:.2f} s; "
              f"stoker / this: epoch 1 {s1 / e1:.2f}x, epochs 2+ {s / e2:.2f}x")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Side-by-side audio benchmark (issue 27): a keyword-spotting recipe through stoker, through
PyTorch's DataLoader + torchaudio at each num_workers, and the decode-only ceiling, on the same
files and cores, in one run.

    /usr/bin/python3 bench/bench_audio.py [--clips 1000] [--formats wav,flac,mp3]
        [--threads 2] [--workers 0,1,2,3] [--epochs 3] [--batch-size 64]

The recipe (torchaudio's names): decode, Resample(44100, 16000), a random 1 s crop (zero-padded
when shorter), MelSpectrogram(16000, n_mels=64), FrequencyMasking(8), TimeMasking(20): float32
[64, 1, 64, 81] batches.

1. Generates bench/data/audio_kws/<format>/<word>/*.{wav,flac,mp3} unless present: 10 words
   spoken by espeak-ng in 5 voices at 120-220 words/min, resampled to 44.1 kHz mono 16-bit and
   padded with silence to 1.2-3.0 s (sox; MP3 by ffmpeg/LAME at 128 kbit/s).
2. stoker: stoker.Loader(tree, batch, shuffle, transforms=[torchaudio's objects +
   stoker.audio.RandomCrop(1.0)], num_workers=--threads), in a fresh process. The first epoch
   (which decodes compressed files to their end once, the strict check) and the later epochs
   (the crop's window only) are reported apart.
3. PyTorch: a map-style Dataset whose __getitem__ is torchaudio.load + the same transforms
   (torch.randint for the crop), DataLoader(batch, shuffle, num_workers=w, persistent_workers,
   prefetch_factor=4) for each w; the epochs after the first (worker start excluded); the best w
   is kept.
4. Ceiling: bench/audio_ceiling.c, libsndfile decoding every whole file into memory on
   --threads threads, nothing else.
Each measurement runs in its own process; samples/s on the wall clock and per CPU second of the
process (the steadier figure on a shared machine), the peak RSS of the stoker process against
its ring, and the load average, as one Markdown table per format.
"""
import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "bench", "data", "audio_kws")
CEILING = os.path.join(ROOT, "build", "audio_ceiling")
WORDS = ["yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go"]
VOICES = ["en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-us+f3"]


# ---- data ----

def _clip(i, word, d_wav):
    rnd = random.Random(i)
    out = os.path.join(d_wav, word, f"{i:05d}.wav")
    if os.path.exists(out):
        return out
    tmp = out + ".tmp.wav"
    subprocess.run(["espeak-ng", "-v", rnd.choice(VOICES), "-s", str(rnd.randint(120, 220)),
                    "-w", tmp, word], check=True)
    total = rnd.uniform(1.2, 3.0)
    before = rnd.uniform(0.0, 0.5)
    subprocess.run(["sox", "-V1", tmp, "-r", "44100", "-b", "16", "-c", "1", out, "pad",
                    f"{before:.3f}", f"{total:.3f}", "trim", "0", f"{total:.3f}"], check=True)
    os.unlink(tmp)
    return out


def make_data(clips, formats):
    d_wav = os.path.join(DATA, "wav")
    for w in WORDS:
        os.makedirs(os.path.join(d_wav, w), exist_ok=True)
    with ThreadPoolExecutor(os.cpu_count()) as ex:
        wavs = list(ex.map(lambda i: _clip(i, WORDS[i % len(WORDS)], d_wav), range(clips)))
    for fmt in formats:
        if fmt == "wav":
            continue
        d = os.path.join(DATA, fmt)

        def conv(p):
            dst = os.path.join(d, os.path.relpath(p, d_wav))[:-3] + fmt
            if os.path.exists(dst):
                return
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            if fmt == "flac":
                subprocess.run(["sox", p, dst], check=True)
            else:
                subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-i", p, "-c:a",
                                "libmp3lame", "-b:a", "128k", dst], check=True)
        with ThreadPoolExecutor(os.cpu_count()) as ex:
            list(ex.map(conv, wavs))


def files_of(fmt):
    d = os.path.join(DATA, fmt)
    out = []
    for label, w in enumerate(sorted(os.listdir(d))):
        for f in sorted(os.listdir(os.path.join(d, w))):
            out.append((os.path.join(d, w, f), label))
    return out


# ---- one measurement per process ----

def recipe():
    import torchaudio.transforms as TA
    from stoker import audio as A
    return [TA.Resample(44100, 16000), A.RandomCrop(1.0), TA.MelSpectrogram(16000, n_mels=64),
            TA.FrequencyMasking(8), TA.TimeMasking(20)]


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime + c.ru_utime + c.ru_stime


def run_stoker(fmt, threads, epochs, batch):
    import stoker
    ops = recipe()  # torch and torchaudio imported: their memory and CPU are not the loader's
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tree = os.path.join(DATA, fmt)
    c0, t0 = cpu_s(), time.perf_counter()
    loader = stoker.Loader(tree, batch, shuffle=True, seed=1, transforms=ops,
                           num_workers=threads, output="numpy")
    times, n = [], 0
    shape = None
    rss1 = 0
    for e in range(epochs):
        te = time.perf_counter()
        k = 0
        for b in loader:
            k += b["audio"].shape[0]
            shape = b["audio"].shape
        times.append((k, time.perf_counter() - te))
        n += k
        if e == 0:
            rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    info = loader.info()
    wall, cpu = time.perf_counter() - t0, cpu_s() - c0
    later = sum(k for k, _ in times[1:]) / sum(t for _, t in times[1:])
    first = times[0][0] / times[0][1]
    return {"first_epoch_sps": first, "sps": later, "cpu_sps": n / cpu, "wall_s": wall,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "rss_before_mb": rss0 / 1024, "rss_epoch1_mb": rss1 / 1024, "ring_mb": info["slot_size"] * info["n_slots"] / 2**20,
            "shape": list(shape), "threads": info["n_threads"]}


class KWS:
    """The same recipe in a map-style Dataset, as a torchaudio user writes it."""

    def __init__(self, items):
        import torch
        import torchaudio.transforms as TA
        self.items = items
        self.resample = TA.Resample(44100, 16000)
        self.mel = TA.MelSpectrogram(16000, n_mels=64)
        self.fm, self.tm = TA.FrequencyMasking(8), TA.TimeMasking(20)
        self.torch = torch

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        import torchaudio
        torch = self.torch
        path, label = self.items[i]
        x, sr = torchaudio.load(path)
        x = self.resample(x)
        n = 16000
        if x.shape[1] > n:
            off = int(torch.randint(0, x.shape[1] - n + 1, ()))
            x = x[:, off:off + n]
        else:
            x = torch.nn.functional.pad(x, (0, n - x.shape[1]))
        return self.tm(self.fm(self.mel(x))), label


def run_torch(fmt, workers, epochs, batch):
    import torch
    ds = KWS(files_of(fmt))  # imports torchaudio before the CPU clock starts
    kw = dict(batch_size=batch, shuffle=True, num_workers=workers)
    if workers:
        kw.update(persistent_workers=True, prefetch_factor=4)
    dl = torch.utils.data.DataLoader(ds, **kw)
    c0 = cpu_s()
    times, n = [], 0
    for e in range(epochs):
        te = time.perf_counter()
        k = 0
        for x, y in dl:
            k += x.shape[0]
        times.append((k, time.perf_counter() - te))
        n += k
    del dl
    later = sum(k for k, _ in times[1:]) / sum(t for _, t in times[1:])
    return {"first_epoch_sps": times[0][0] / times[0][1], "sps": later,
            "cpu_sps": n / (cpu_s() - c0), "workers": workers}


def run_ceiling(fmt, threads, epochs):
    if not os.path.exists(CEILING) or \
            os.path.getmtime(CEILING) < os.path.getmtime(os.path.join(ROOT, "bench",
                                                                      "audio_ceiling.c")):
        subprocess.run(["cc", "-O2", os.path.join(ROOT, "bench", "audio_ceiling.c"), "-o",
                        CEILING, "-lsndfile", "-lpthread"], check=True)
    paths = [p for p, _ in files_of(fmt)]
    out = subprocess.run([CEILING, str(threads), str(epochs)] + paths, check=True,
                         capture_output=True, text=True).stdout
    d = json.loads(out)
    d["cpu_sps"] = d["files"] * epochs / d["cpu_s"]
    d["first_epoch_sps"] = d.pop("first_epoch_samples_per_s")
    d["sps"] = d.pop("samples_per_s")
    return d


def child(args):
    """Run one measurement (argv after --child) and print its JSON."""
    kind, fmt = args[0], args[1]
    nums = [int(v) for v in args[2:]]
    if kind == "stoker":
        res = run_stoker(fmt, *nums)
    else:
        res = run_torch(fmt, *nums)
    print(json.dumps(res))


def measure(kind, fmt, *nums):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "build", "python"))
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", kind, fmt] +
                         [str(v) for v in nums], check=True, capture_output=True, text=True,
                         env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def load():
    return open("/proc/loadavg").read().split()[0]


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clips", type=int, default=1000)
    ap.add_argument("--formats", default="wav,flac,mp3")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--workers", default="0,1,2,3")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    a = ap.parse_args()
    for tool in ("espeak-ng", "sox", "ffmpeg"):
        if not shutil.which(tool):
            sys.exit(f"bench_audio: {tool} is needed to make the data")
    formats = a.formats.split(",")
    make_data(a.clips, formats)
    print(f"# bench_audio: {a.clips} clips, 1.2-3.0 s at 44.1 kHz mono; batch {a.batch_size}, "
          f"{a.epochs} epochs, {os.cpu_count()} CPUs, stoker threads {a.threads}; load average "
          f"{load()} at the start\n", flush=True)
    for fmt in formats:
        ceil = run_ceiling(fmt, a.threads, a.epochs)
        st = measure("stoker", fmt, a.threads, a.epochs, a.batch_size)
        tw = []
        for w in [int(v) for v in a.workers.split(",")]:
            tw.append(measure("torch", fmt, w, a.epochs, a.batch_size))
        best = max(tw, key=lambda d: d["sps"])
        print(f"## {fmt} ({len(files_of(fmt))} files; load average {load()} at the end)\n")
        print("| loader | samples/s (epochs 2+) | first epoch | per CPU second | "
              "stoker / this (wall) | stoker / this (CPU) |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        rows = [(f"stoker, {st['threads']} threads", st)]
        rows += [(f"DataLoader + torchaudio, num_workers={d['workers']}", d) for d in tw]
        rows.append((f"ceiling: libsndfile decode only, {a.threads} threads", ceil))
        for name, d in rows:
            mark = " (best)" if d is best else ""
            print(f"| {name}{mark} | {d['sps']:.0f} | {d['first_epoch_sps']:.0f} | "
                  f"{d['cpu_sps']:.0f} | {st['sps'] / d['sps']:.2f}x | "
                  f"{st['cpu_sps'] / d['cpu_sps']:.2f}x |")
        print(f"\nstoker: batches {st['shape']}, peak RSS {st['peak_rss_mb']:.0f} MB "
              f"({st['rss_before_mb']:.0f} MB before the loader, torch and torchaudio imported; "
              f"{st['rss_epoch1_mb']:.0f} MB after epoch 1; ring {st['ring_mb']:.1f} MB)\n",
              flush=True)


if __name__ == "__main__":
    main()

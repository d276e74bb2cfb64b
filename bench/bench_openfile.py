"""Datasets that open their file once: wrong samples and samples/s, DataLoader against stoker.

The articles' binary-records dataset (`self.f = open(path, "rb")` in __init__; a seek and a read
in __getitem__) and a zip-archive dataset (`self.z = zipfile.ZipFile(path)`; `self.z.read(name)`)
hold one file position. The DataLoader's forked workers share it, as worker threads would;
stoker's worker processes each get a position of their own (python/stoker/_holds.py). Each
loader runs --epochs epochs; a sample is wrong when its bytes are not its own index's record; an
exception ends that loader's run and is printed (the DataLoader's "BadZipFile: Bad CRC-32").

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_openfile.py --data /tmp/openfile
"""
import argparse
import gc
import os
import sys
import time
import warnings
import zipfile

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

import stoker

RECORD = 16384  # bytes a sample (4096 int32)


class Records(Dataset):
    def __init__(self, path, n):
        self.n = n
        self.f = open(path, "rb")

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.f.seek(i * RECORD)
        return torch.from_numpy(np.frombuffer(self.f.read(RECORD), np.int32).copy()), i


class Zipped(Dataset):
    def __init__(self, path, n):
        self.n = n
        self.z = zipfile.ZipFile(path)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.from_numpy(np.frombuffer(self.z.read(f"{i}.bin"), np.int32).copy()), i


def make_data(d, n):
    os.makedirs(d, exist_ok=True)
    rec, zp = os.path.join(d, "records.bin"), os.path.join(d, "records.zip")
    want = np.arange(n, dtype=np.int32).repeat(RECORD // 4)
    if not os.path.exists(rec) or os.path.getsize(rec) != n * RECORD:
        want.tofile(rec)
    if not os.path.exists(zp):
        with zipfile.ZipFile(zp, "w") as z:
            for i in range(n):
                z.writestr(f"{i}.bin", np.full(RECORD // 4, i, np.int32).tobytes())
    return rec, zp


def run(make, epochs):
    """(wrong samples, samples delivered, constructor s, first epoch samples/s, later epochs
    samples/s, error text or "", stoker's executor). The collector runs before the clock
    starts: a DataLoader iterator an exception left behind joins its workers when collected
    (up to 5 s each), which would land in the next loader's time."""
    gc.collect()
    wrong = done = 0
    chose, err = "", ""
    rates = []
    t0 = time.perf_counter()
    built = None
    try:
        loader = make()
        built = time.perf_counter() - t0
        if hasattr(loader, "info"):
            chose = f" ({loader.info()['executor']})"
        for _ in range(epochs):
            t = time.perf_counter()
            n = 0
            for x, y in loader:
                wrong += int((x != y.to(torch.int32)[:, None]).any(1).sum())
                n += len(y)
            done += n
            rates.append(n / (time.perf_counter() - t))
        if hasattr(loader, "close"):
            loader.close()
    except Exception as e:  # noqa: BLE001 - reported in the table
        err = f"{type(e).__name__}: {str(e).splitlines()[-1][:80]}"
    first = f"{rates[0]:.0f}" if rates else "-"
    later = f"{sum(rates[1:]) / len(rates[1:]):.0f}" if len(rates) > 1 else "-"
    return wrong, done, "-" if built is None else f"{built:.3f}", first, later, err, chose


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="directory for the generated files")
    ap.add_argument("--samples", type=int, default=1024)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--workers", default="2,4")
    a = ap.parse_args()
    rec, zp = make_data(a.data, a.samples)
    warnings.simplefilter("ignore")
    print(f"cores {os.cpu_count()}, load {os.getloadavg()[0]:.2f}, {a.samples} samples, "
          f"{a.epochs} epochs, batch {a.batch}", file=sys.stderr)
    print("| dataset | num_workers | loader | wrong samples | delivered | constructor s | "
          "samples/s, first epoch | later epochs | error |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, cls, path in (("records (seek + read)", Records, rec), ("zip", Zipped, zp)):
        for w in [int(v) for v in a.workers.split(",")]:
            rows = [("DataLoader", lambda: DataLoader(cls(path, a.samples), batch_size=a.batch,
                                                      num_workers=w))]
            for ex in ("auto", "thread", "process"):
                rows.append((f"stoker {ex}", lambda ex=ex: stoker.Loader(
                    cls(path, a.samples), batch_size=a.batch, num_workers=w, executor=ex)))
            for label, make in rows:
                wrong, done, built, first, later, err, chose = run(make, a.epochs)
                print(f"| {name} | {w} | {label}{chose} | {wrong} | {done} | {built} | {first} "
                      f"| {later} | {err} |", flush=True)


if __name__ == "__main__":
    main()

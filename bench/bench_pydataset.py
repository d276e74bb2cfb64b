#!/usr/bin/env python3
"""Your own Dataset on stoker (issue 24): the DataLoader and stoker.Loader side by side on the
datasets the articles write, each run in a process of its own, one after the other.

    /usr/bin/python3 bench/gen_images.py /tmp/pyds/jpeg --classes 4 --per-class 100 --profile small
    PYTHONPATH=build/python /usr/bin/python3 bench/bench_pydataset.py --data /tmp/pyds \
        [--scenarios sleep,tensor224,pil,purepy,hdf5,lmdb,albu] [--workers 0,1,2,4,8] \
        [--epochs 3] [--batch 32] [--json out.json] [--default-only] [--cpu]
    PYTHONPATH=build/python /usr/bin/python3 bench/bench_pydataset.py --data /tmp/pyds --switch
    /usr/bin/python3 bench/bench_pydataset.py --summarize out1.json out2.json ...
    PYTHONPATH=build/python /usr/bin/python3 bench/bench_pydataset.py --data /tmp/pyds --startup \
        [--baseline /path/to/other/build/python] [--batches 12] [--repeat 3] [--workers 0,1,2,4]
    PYTHONPATH=build/python /usr/bin/python3 bench/bench_pydataset.py --data /tmp/pyds --phases \
        [--scenarios ...] [--workers 1,2,4] [--repeat 3]

--startup: time to first batch and peak RSS only (each run stops after --batches batches), the
DataLoader, stoker as built and, with --baseline, stoker from another build, side by side at
each worker count, --repeat times in turn; the medians, and their ratios to the DataLoader.

--script: main mode's and --startup's runs as a script file with a `__main__` guard (as a user's
training script) instead of a `python -c` program; stoker's fork server can go lean only then.

Main mode: for each scenario, the DataLoader at every --workers count and stoker.Loader at the
same counts and at its default (num_workers=None: stoker chooses the executor and the count).
Each run prints: time from creating the loader to the first batch, samples/s of the first epoch
(from creation) and of the later epochs, and the peak memory of the whole process tree (the sum
of RSS, and of PSS, which counts a page shared by several processes once), sampled every 20 ms
by this parent process from /proc. The loop only counts each batch (no model): the numbers are
the loaders' own. The ratio is stoker's default against the DataLoader's best worker count.
With --cpu each run also prints where the CPU went in the later epochs, per sample, by process
and thread (see CPU_CHILD): what bounds a CPU-bound scenario on a given number of cores.

--phases: where the time to the first batch goes: for each loader one run to its first batch,
timestamps from every process of the tree (each __getitem__'s start and end; stoker's
construction phases; the DataLoader's worker start), printed as a timeline in ms from creating
the loader (see PHASES_CHILD).

--switch: the six article-style datasets (sleep, in-memory tensors, an Albumentations-style numpy
pipeline, PIL + torchvision, HDF5 over h5py, LMDB over py-lmdb), each written as the article
writes it with DataLoader and DistributedSampler (2 ranks, both run here), then with one name
changed: lines changed (difflib), whether it runs, whether the two ranks read every sample
exactly once, and the ratio of samples/s.
"""
import argparse
import difflib
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# ---- the datasets, as the articles write them (the child processes exec this) ----

DATASETS = r'''
import os, time, io, random
import numpy as np
import torch
from torch.utils.data import Dataset, DataLoader, DistributedSampler

class SleepDataset(Dataset):
    """__getitem__ waits 1 ms (standing for I/O) over in-memory data."""
    def __init__(self, n=4000):
        self.data = torch.randn(256, 3, 32, 32)
        self.labels = torch.randint(0, 10, (n,))
        self.n = n
    def __len__(self):
        return self.n
    def __getitem__(self, idx):
        time.sleep(0.001)
        return self.data[idx % 256], self.labels[idx], idx

class TensorDataset224(Dataset):
    """A 3x224x224 float32 tensor from memory and a label."""
    def __init__(self, n=2048):
        self.images = torch.randn(64, 3, 224, 224)
        self.labels = torch.randint(0, 1000, (n,))
        self.n = n
    def __len__(self):
        return self.n
    def __getitem__(self, idx):
        return self.images[idx % 64], self.labels[idx], idx

class JpegDataset(Dataset):
    """PIL decode + torchvision RandomResizedCrop/flip/ToTensor/Normalize on JPEG files."""
    def __init__(self, root):
        from torchvision import transforms as T
        self.files = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs
                            if f.endswith(".jpg"))
        self.transform = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                                    T.ToTensor(), T.Normalize([0.485, 0.456, 0.406],
                                                              [0.229, 0.224, 0.225])])
    def __len__(self):
        return len(self.files)
    def __getitem__(self, idx):
        from PIL import Image
        with open(self.files[idx], "rb") as f:
            img = Image.open(f).convert("RGB")
        return self.transform(img), idx % 4, idx

class PurePythonDataset(Dataset):
    """Pure-Python CPU work (about a millisecond of bytecode)."""
    def __init__(self, n=3000):
        self.n = n
    def __len__(self):
        return self.n
    def __getitem__(self, idx):
        acc = 0
        for k in range(idx % 7, 12000 + idx % 7):
            acc = (acc * 31 + k) % 1000003
        return torch.tensor([acc], dtype=torch.int64), idx

class HDF5Dataset(Dataset):
    """The articles' HDF5Dataset: the file opened lazily, in each worker."""
    def __init__(self, path):
        import h5py
        self.path = path
        self.file = None
        with h5py.File(path, "r") as f:
            self.length = len(f["labels"])
    def __len__(self):
        return self.length
    def __getitem__(self, idx):
        import h5py
        if self.file is None:
            self.file = h5py.File(self.path, "r")
        image = torch.from_numpy(self.file["images"][idx]).float().div_(255)
        return image, int(self.file["labels"][idx]), idx

class LMDBDataset(Dataset):
    """The articles' LMDBDataset over py-lmdb: raw uint8 images, opened lazily."""
    def __init__(self, path):
        import lmdb
        self.path = path
        self.env = None
        env = lmdb.open(path, readonly=True, lock=False)
        with env.begin() as txn:
            self.length = int(txn.get(b"__len__"))
        env.close()
    def __len__(self):
        return self.length
    def __getitem__(self, idx):
        import lmdb
        if self.env is None:
            self.env = lmdb.open(self.path, readonly=True, lock=False, readahead=False)
        with self.env.begin() as txn:
            buf = txn.get(str(idx).encode())
        label = buf[0]
        image = np.frombuffer(buf, dtype=np.uint8, offset=1).reshape(3, 64, 64)
        return torch.from_numpy(image.astype(np.float32) / 255), label, idx

class AlbumentationsStyleDataset(Dataset):
    """An Albumentations-style numpy pipeline (RandomCrop, HorizontalFlip, Normalize) on
    in-memory uint8 HWC images (albumentations is not installed: numpy in its style)."""
    def __init__(self, n=4000):
        rng = np.random.default_rng(0)
        self.images = rng.integers(0, 256, (256, 128, 128, 3), dtype=np.uint8)
        self.n = n
        self.mean = np.array([0.485, 0.456, 0.406], np.float32) * 255
        self.std = np.array([0.229, 0.224, 0.225], np.float32) * 255
    def __len__(self):
        return self.n
    def __getitem__(self, idx):
        img = self.images[idx % 256]
        y, x = np.random.randint(0, 128 - 112, 2)
        img = img[y:y + 112, x:x + 112]
        if np.random.rand() < 0.5:
            img = img[:, ::-1]
        img = (img.astype(np.float32) - self.mean) / self.std
        return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1))), idx % 10, idx

def make(name, data):
    return {"sleep": lambda: SleepDataset(),
            "tensor224": lambda: TensorDataset224(),
            "pil": lambda: JpegDataset(os.path.join(data, "jpeg")),
            "purepy": lambda: PurePythonDataset(),
            "hdf5": lambda: HDF5Dataset(os.path.join(data, "data.h5")),
            "lmdb": lambda: LMDBDataset(os.path.join(data, "lmdb")),
            "albu": lambda: AlbumentationsStyleDataset()}[name]()
'''


def dataset_namespace():
    """DATASETS executed here: its classes and make(scenario, data), for the tools that run one
    loader in-process (bench_threadcost.py, procworker_cost.py)."""
    ns = {}
    exec(compile(DATASETS, "bench_pydataset.DATASETS", "exec"), ns)
    return ns


# ---- --cpu: where the CPU goes in the later epochs ----

# Part of the child of main mode: with STK_BENCH_CPU=1 (--cpu), the CPU time, run-queue wait
# (/proc/PID/task/TID/schedstat) and minor page faults of every process of the child's tree and
# of every thread of the training process, read at the end of epoch 1 and at the end of the last
# epoch (the workers of both loaders live across epochs), and the difference per sample of the
# later epochs, by role: the training process's main thread, its other threads by name (stoker's
# C threads are "stk-worker"; torch's intra-op threads and the like keep the interpreter's name),
# and the processes under it by depth (the DataLoader's workers are its children; stoker's are
# children of its fork server); for stoker's worker processes also the CPU they measure inside
# __getitem__.
CPU_CHILD = r'''
CPU = os.environ.get("STK_BENCH_CPU") == "1"

def _ppid(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])

def _sched(pid, tids=None):
    """(CPU ns, run-queue wait ns, minor page faults) of a process's threads
    (/proc/PID/task/TID/schedstat and stat)."""
    cpu = wait = faults = 0
    for t in tids or os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                a, b = f.read().split()[:2]
            with open(f"/proc/{pid}/task/{t}/stat") as f:
                c = f.read().rsplit(")", 1)[1].split()[7]
            cpu, wait, faults = cpu + int(a), wait + int(b), faults + int(c)
        except (OSError, ValueError, IndexError):
            continue
    return cpu, wait, faults

def cpu_tree(loader):
    """{key: (role, CPU ns, run-queue wait ns, minor faults)}: the threads of this process, every
    process below it, and (stoker's worker processes) the CPU the workers spent inside
    __getitem__, as they measure it (the rest of their CPU is their loop: tickets, the copy into
    the ring, the replies)."""
    me, out, kids = os.getpid(), {}, {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                kids.setdefault(_ppid(p), []).append(int(p))
            except (OSError, ValueError, IndexError):
                continue
    for t in os.listdir(f"/proc/{me}/task"):
        try:
            with open(f"/proc/{me}/task/{t}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        role = "training: main thread" if int(t) == me else f"training: thread {comm}"
        out[f"t{t}"] = (role, *_sched(me, [t]))
    todo = [(me, 0)]
    while todo:
        pid, depth = todo.pop()
        for child in kids.get(pid, []):
            try:
                out[f"p{child}"] = (f"process at depth {depth + 1}", *_sched(child))
            except OSError:
                continue
            todo.append((child, depth + 1))
    pool = getattr(loader, "_pool", None)
    if pool is not None:
        out["getitem"] = ("__getitem__ in the worker processes", pool.stats()["cpu_ns"], 0, 0)
    return out

def cpu_delta(a, b):
    """Per sample between two marks, by role (and in all processes): CPU microseconds, in
    brackets the microseconds its threads waited for a CPU (the machine's load), in braces minor
    page faults; the wall time too."""
    (ta, _, ca), (tb, n, cb) = a, b
    roles = {}
    for k, (role, *now) in cb.items():
        before = ca.get(k, (role, 0, 0, 0))[1:]
        r = roles.setdefault(role, [0, 0, 0, 0])
        for j in range(3):
            r[j] += now[j] - before[j]
        r[3] += 1
    n = max(n, 1)
    text = lambda v: f"{v[0] / n / 1e3:.0f} [{v[1] / n / 1e3:.0f}] {{{v[2] / n:.0f}}}"
    out = {f"{r} (x{v[3]})": text(v) for r, v in sorted(roles.items())}
    # (__getitem__'s CPU is part of its worker process's: not counted twice)
    tree = [v for r, v in roles.items() if not r.startswith("__getitem__")]
    out["all"] = text([sum(v[j] for v in tree) for j in range(3)])
    out["wall"] = f"{(tb - ta) / n * 1e6:.0f}"
    return out
'''

CHILD_BODY = r'''
import json, sys
import stoker
name, kind, workers, epochs, batch, data = sys.argv[1:7]
max_batches = int(sys.argv[7]) if len(sys.argv) > 7 else 0  # per epoch; 0: all
workers = None if workers == "None" else int(workers)
epochs, batch = int(epochs), int(batch)
dataset = make(name, data)
t0 = time.perf_counter()
if kind == "dl":
    loader = DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=workers,
                        persistent_workers=workers > 0)
else:
    loader = stoker.Loader(dataset, batch_size=batch, shuffle=True, num_workers=workers,
                           executor=os.environ.get("STK_BENCH_EXECUTOR", "auto"))
rates, first = [], None
cpu_marks, later_n = [], 0  # --cpu: (wall, samples, cpu_tree()) after epoch 1 and at the end
for e in range(epochs):
    if CPU and e == 1:
        cpu_marks.append((time.perf_counter(), 0, cpu_tree(loader)))
    n = 0
    t = time.perf_counter() if e else t0
    for k, batch_ in enumerate(loader):
        if first is None:
            first = time.perf_counter() - t0
        n += len(batch_[-1])
        del batch_
        if max_batches and k + 1 >= max_batches:
            break
    rates.append(n / (time.perf_counter() - t))
    later_n += n if e else 0
if cpu_marks:
    cpu_marks.append((time.perf_counter(), later_n, cpu_tree(loader)))
info = {"cpu": cpu_delta(*cpu_marks)} if cpu_marks else {}
if kind == "stoker":
    i = loader.info()
    info = {**info, "executor": i.get("executor"), "workers": i.get("n_threads"),
            "reason": i.get("executor_reason"), "start": i.get("start_method")}
print(json.dumps({"ttfb_s": first, "rates": rates, **info}))
'''
CHILD = DATASETS + CPU_CHILD + CHILD_BODY


def child_command(data):
    """The command line of main mode's and --startup's child: `python -c CHILD`, or with
    --script (STK_BENCH_SCRIPT=1) a script file, as a user runs a training script: the datasets
    and helpers at its top level and the run under `if __name__ == "__main__":`, so that its main
    module can be imported again (stoker's fork server may then go lean once the workers are
    forked; it cannot for a `python -c` program whose main module defines the dataset classes,
    see python/stoker/_pyworker_server.py)."""
    if os.environ.get("STK_BENCH_SCRIPT") != "1":
        return [sys.executable, "-c", CHILD]
    path = os.path.join(data, "bench_pydataset_child.py")
    body = "".join("    " + l if l.strip() else l for l in CHILD_BODY.splitlines(True))
    text = DATASETS + CPU_CHILD + "\nif __name__ == \"__main__\":\n" + body
    try:
        with open(path) as f:
            same = f.read() == text
    except OSError:
        same = False
    if not same:
        with open(path, "w") as f:
            f.write(text)
    return [sys.executable, path]


# ---- --phases: where the time to the first batch goes ----

# The child of --phases: the scenario's loader made once and its first batch taken, with
# timestamps (CLOCK_MONOTONIC, the same clock in every process) written to a log that every
# process of the tree appends to: each __getitem__'s start and end (the dataset class is wrapped
# before the loader exists, so the fork server, worker processes and threads run the wrapper),
# and, in the training process, stoker's construction phases (its functions wrapped here: the
# library has no trace of its own for this, and costs nothing for it) or the DataLoader's worker
# start. The parent reads the log into a timeline.
PHASES_CHILD = DATASETS + r"""
import json, sys, threading
import stoker
from stoker import _core, _executor, _procpool, _pydataset
name, kind, workers, batch, data, log = sys.argv[1:7]
workers = None if workers == "None" else int(workers)
fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
now = time.perf_counter_ns

def mark(label):
    os.write(fd, f"{os.getpid()} {threading.get_ident()} {now()} {label}\n".encode())

def span(owner, attr, label):
    fn = getattr(owner, attr)
    def wrapped(*a, **k):
        mark(label + "+")
        try:
            return fn(*a, **k)
        finally:
            mark(label + "-")
    setattr(owner, attr, wrapped)

dataset = make(name, data)
cls = type(dataset)
getitem = cls.__getitem__
def traced_getitem(self, idx):
    mark(f"get+ {idx}")
    try:
        return getitem(self, idx)
    finally:
        mark(f"get- {idx}")
cls.__getitem__ = traced_getitem
if kind == "stoker":
    span(_procpool, "prepare_server", "fork server")
    span(_pydataset, "probe_here", "probe")
    span(_executor, "choose", "choice")
    span(_pydataset.PyLoader, "_start_pool", "worker processes")
    span(_procpool.Pending, "start", "worker server")
    span(_core, "ProcPool", "pool (fork workers)")
    span(_core, "Loader", "C loader (ring)")
    span(_pydataset.PyLoader, "_announce_ring", "announce ring")
    span(_pydataset.PyLoader, "_next_raw", "wait raw batch")
    span(_pydataset.PyLoader, "_assemble", "assemble")
    if hasattr(_core.ProcPool, "probe"):
        pass  # (a C type: its methods are read-only; the in-worker probe shows as getitems)
else:
    from torch.utils.data import dataloader as dlm
    span(dlm._MultiProcessingDataLoaderIter, "__init__", "DL start workers")
    span(dlm._MultiProcessingDataLoaderIter, "_next_data", "DL wait batch")
mark("create")
if kind == "dl":
    loader = DataLoader(dataset, batch_size=int(batch), shuffle=True, num_workers=workers,
                        persistent_workers=workers > 0)
else:
    loader = stoker.Loader(dataset, batch_size=int(batch), shuffle=True, num_workers=workers,
                           executor=os.environ.get("STK_BENCH_EXECUTOR", "auto"))
mark("constructed")
it = iter(loader)
mark("iter")
first = next(it)
mark("first")
info = {}
if kind == "stoker":
    i = loader.info()
    info = {"executor": i.get("executor"), "workers": i.get("n_threads")}
print(json.dumps({"indices": [int(x) for x in first[-1]], **info}))
os._exit(0)  # (the timeline ends here; no need to wait for the workers' exit)
"""


def timeline(log, indices):
    """The phases of one --phases run, in ms from the loader's creation: the training process's
    marks (spans: first start, last end), per worker (a process, or a thread of the training
    process other than the constructing one) its first __getitem__'s start and how many of the
    first batch's samples it made, and the first batch's samples: the first start, the last end
    and their __getitem__ time summed."""
    ev = []
    with open(log) as f:
        for line in f:
            pid, tid, t, label = line.rstrip("\n").split(" ", 3)
            ev.append((int(t), int(pid), int(tid), label))
    ev.sort()
    t0 = next(t for t, _, _, l in ev if l == "create")
    end = next(t for t, _, _, l in ev if l == "first")
    main = next(p for _, p, _, l in ev if l == "create")
    main_tid = next(d for _, _, d, l in ev if l == "create")
    ms = lambda t: (t - t0) / 1e6
    spans = {}
    for t, p, d, l in ev:
        if p == main and l[-1] in "+-" and not l.startswith("get"):
            s = spans.setdefault(l[:-1], [None, None, 0])
            if l[-1] == "+":
                s[2] += 1
                if s[0] is None:
                    s[0] = t
            elif t <= end:
                s[1] = t
    want = set(indices)
    last = {}  # index -> (start, end, worker) of its last load finished before the batch
    open_ = {}
    workers = {}
    for t, p, d, l in ev:
        if not l.startswith("get"):
            continue
        w = p if p != main else (f"thread {d}" if d != main_tid else "constructor")
        workers.setdefault(w, t)
        idx = int(l.split()[1])
        if l.startswith("get+"):
            open_[(p, d)] = (t, idx)
        elif t <= end and idx in want:
            st, _ = open_.get((p, d), (t, idx))
            last[idx] = (st, t, w)
    made = {}
    for st, e, w in last.values():
        made[w] = made.get(w, 0) + 1
    out = {"ttfb_ms": ms(end)}
    out["spans"] = {k: (ms(v[0]), ms(v[1]) if v[1] else None, v[2]) for k, v in spans.items()}
    out["constructed_ms"] = ms(next(t for t, _, _, l in ev if l == "constructed"))
    out["by_worker"] = {str(w): (ms(t), made.get(w, 0)) for w, t in workers.items()}
    if last:
        out["batch_first_start_ms"] = ms(min(v[0] for v in last.values()))
        out["batch_last_end_ms"] = ms(max(v[1] for v in last.values()))
        out["batch_getitem_ms"] = sum(v[1] - v[0] for v in last.values()) / 1e6
        out["batch_samples"] = len(last)
    return out


def phases_run(name, kind, workers, batch, data, pythonpath=None):
    import tempfile
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log")
        p = subprocess.run([sys.executable, "-c", PHASES_CHILD, name, kind, str(workers),
                            str(batch), data, log], capture_output=True, text=True, env=env,
                           timeout=600)
        lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
        if p.returncode != 0 or not lines:
            return {"error": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]}
        r = json.loads(lines[-1])
        r.update(timeline(log, r["indices"]))
        return r


def phases_text(r):
    if "error" in r:
        return "ERROR " + r["error"][:100]
    parts = [f"ttfb {r['ttfb_ms']:.0f} ms"]
    for k, (a, b, n) in sorted(r["spans"].items(), key=lambda kv: kv[1][0]):
        parts.append(f"{k} {a:.0f}-{b:.0f}" + (f" x{n}" if n > 1 else "") if b is not None
                     else f"{k} {a:.0f}-")
    parts.append(f"constructed {r['constructed_ms']:.0f}")
    ws = sorted(r["by_worker"].items(), key=lambda kv: kv[1][0])
    parts.append("workers' first __getitem__ " + ", ".join(
        f"{w if not w.isdigit() else 'pid'} {t:.0f} ({n})" for w, (t, n) in ws))
    if "batch_samples" in r:
        parts.append(f"first batch's samples {r['batch_first_start_ms']:.0f}-"
                     f"{r['batch_last_end_ms']:.0f} ({r['batch_samples']} samples, "
                     f"__getitem__ {r['batch_getitem_ms']:.0f} ms in all)")
    return "; ".join(parts)


def main_phases(a):
    """--phases: one loader at a time, its first batch only, with the timeline (see
    PHASES_CHILD), the DataLoader and stoker one after the other, --repeat times."""
    for name in a.scenarios.split(","):
        print(f"== {name} (load {load()})", flush=True)
        for w in a.workers:
            for rep in range(a.repeat):
                for kind in ("dl", "stoker"):
                    r = phases_run(name, kind, w, a.batch, a.data)
                    ex = f" [{r['executor']} x{r['workers']}]" if r.get("executor") else ""
                    print(f"  {kind:6s} num_workers={w} #{rep}{ex}: {phases_text(r)} "
                          f"(load {load()})", flush=True)


def make_data(data):
    """The files the file-backed scenarios read (HDF5, LMDB); JPEGs come from gen_images.py."""
    import numpy as np
    os.makedirs(data, exist_ok=True)
    h5 = os.path.join(data, "data.h5")
    if not os.path.exists(h5):
        import h5py
        rng = np.random.default_rng(1)
        with h5py.File(h5 + ".tmp", "w") as f:
            f["images"] = rng.integers(0, 256, (4000, 3, 64, 64), dtype=np.uint8)
            f["labels"] = rng.integers(0, 10, 4000)
        os.rename(h5 + ".tmp", h5)
    db = os.path.join(data, "lmdb")
    if not os.path.exists(db):
        import lmdb
        rng = np.random.default_rng(2)
        env = lmdb.open(db + ".tmp", map_size=1 << 30)
        with env.begin(write=True) as txn:
            for i in range(4000):
                txn.put(str(i).encode(), bytes([i % 10]) +
                        rng.integers(0, 256, 3 * 64 * 64, dtype=np.uint8).tobytes())
            txn.put(b"__len__", b"4000")
        env.close()
        os.rename(db + ".tmp", db)


def tree(pid):
    """pid and its descendants (from /proc)."""
    children = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                parts = f.read().rsplit(")", 1)[1].split()
            children.setdefault(int(parts[1]), []).append(int(p))
        except (OSError, IndexError):
            continue
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def memory(pids):
    """(sum of RSS, sum of PSS) in bytes."""
    rss = pss = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1]) * 1024
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
        except OSError:
            continue
    return rss, pss


def run(name, kind, workers, epochs, batch, data, timeout=900, batches=0, pythonpath=None):
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    proc = subprocess.Popen(child_command(data) + [name, kind, str(workers), str(epochs),
                                                   str(batch), data, str(batches)],
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    peak_rss = peak_pss = 0
    t0 = time.monotonic()
    while proc.poll() is None:
        rss, pss = memory(tree(proc.pid))
        peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
        if time.monotonic() - t0 > timeout:
            proc.kill()
        time.sleep(0.02)
    out, err = proc.communicate()
    lines = [l for l in out.splitlines() if l.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": (err.strip().splitlines() or ["exit %d" % proc.returncode])[-1]}
    r = json.loads(lines[-1])
    r.update(peak_rss_mb=peak_rss / 2**20, peak_pss_mb=peak_pss / 2**20)
    return r


def load():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def fmt(r):
    if "error" in r:
        return "ERROR " + r["error"][:100]
    later = r["rates"][1:] or r["rates"]
    ex = f" [{r['executor']} x{r['workers']}]" if r.get("executor") else ""
    return (f"ttfb {r['ttfb_s']:.3f} s, epoch 1 {r['rates'][0]:.0f}/s, later "
            f"{sum(later) / len(later):.0f}/s, peak RSS {r['peak_rss_mb']:.0f} MB, PSS "
            f"{r['peak_pss_mb']:.0f} MB{ex}" +
            ("; later epochs, per sample: CPU us [run-queue wait us] {minor faults}: " +
             ", ".join(f"{k} {v}" for k, v in r["cpu"].items()) if "cpu" in r else ""))


def later(r):
    x = r["rates"][1:] or r["rates"]
    return sum(x) / len(x)


def main_bench(a):
    results = {}
    for name in a.scenarios.split(","):
        rows = {}
        print(f"== {name} (load {load()})", flush=True)
        for w in a.workers:
            for kind in ("dl",) if a.default_only else ("dl", "stoker"):
                r = run(name, kind, w, a.epochs, a.batch, a.data)
                rows[f"{kind}{w}"] = r
                print(f"  {kind:6s} num_workers={w}: {fmt(r)} (load {load()})", flush=True)
        r = run(name, "stoker", None, a.epochs, a.batch, a.data)
        rows["stokerNone"] = r
        print(f"  stoker num_workers=None: {fmt(r)} (load {load()})", flush=True)
        ok = {k: v for k, v in rows.items() if "error" not in v}
        dls = {k: v for k, v in ok.items() if k.startswith("dl")}
        if dls and "stokerNone" in ok:
            best = max(dls, key=lambda k: later(dls[k]))
            print(f"  -> stoker default / DataLoader best ({best[2:]} workers): later epochs "
                  f"{later(ok['stokerNone']) / later(dls[best]):.2f}x, epoch 1 "
                  f"{ok['stokerNone']['rates'][0] / dls[best]['rates'][0]:.2f}x", flush=True)
        results[name] = rows
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


def main_startup(a):
    """--startup: time to first batch and peak RSS only (the first --batches batches of one
    epoch), the DataLoader, stoker as built and stoker from --baseline (another build's
    python/ directory) one after the other at each worker count, --repeat times; the medians."""
    kinds = [("dl", "dl", None), ("stoker", "stoker", None)]
    if a.baseline:
        kinds.insert(1, ("base", "stoker", a.baseline))
    table = {}
    for name in a.scenarios.split(","):
        print(f"== {name} (load {load()})", flush=True)
        for w in a.workers:
            got = {k: [] for k, _, _ in kinds}
            for rep in range(a.repeat):
                for label, kind, path in kinds:
                    r = run(name, kind, w, 1, a.batch, a.data, batches=a.batches,
                            pythonpath=path)
                    r["load"] = load()
                    got[label].append(r)
                    if "error" in r:
                        text = "ERROR " + r["error"][:100]
                    else:
                        ex = f" [{r['executor']} x{r['workers']}]" if r.get("executor") else ""
                        text = (f"ttfb {r['ttfb_s']:.3f} s, peak RSS {r['peak_rss_mb']:.0f} MB, "
                                f"PSS {r['peak_pss_mb']:.0f} MB{ex}")
                    print(f"  {label:6s} num_workers={w} #{rep}: {text} (load {r['load']})",
                          flush=True)
            med = {}
            for label, runs in got.items():
                ok = [r for r in runs if "error" not in r]
                if ok:
                    med[label] = {k: sorted(r[k] for r in ok)[len(ok) // 2]
                                  for k in ("ttfb_s", "peak_rss_mb", "peak_pss_mb")}
                    med[label]["ttfb_range"] = (min(r["ttfb_s"] for r in ok),
                                                max(r["ttfb_s"] for r in ok))
                    med[label]["executor"] = "/".join(sorted({str(r.get("executor"))
                                                              for r in ok}))
            table[(name, w)] = med
            line = ", ".join(f"{l} ttfb {m['ttfb_s']:.3f} s RSS {m['peak_rss_mb']:.0f} MB"
                             for l, m in med.items())
            print(f"  -> num_workers={w} medians: {line}", flush=True)
    print("\n| scenario | num_workers | DataLoader ttfb, RSS | " +
          ("stoker before: ttfb, RSS (ratio to DL) | " if a.baseline else "") +
          "stoker: ttfb, RSS (ratio to DL) |")
    print("| --- | --- | --- | " + ("--- | " if a.baseline else "") + "--- |")
    def rng(m):
        lo, hi = m["ttfb_range"]
        return f"{m['ttfb_s']:.3f} s ({lo:.3f}-{hi:.3f})"

    for (name, w), med in table.items():
        d = med.get("dl")
        if d is None:
            continue
        cells = []
        for label in (["base"] if a.baseline else []) + ["stoker"]:
            m = med.get(label)
            cells.append("-" if m is None else
                         f"{rng(m)}, {m['peak_rss_mb']:.0f} MB "
                         f"(**{m['ttfb_s'] / d['ttfb_s']:.2f}x**, "
                         f"{m['peak_rss_mb'] / d['peak_rss_mb']:.2f}x) {m['executor']}")
        print(f"| {name} | {w} | {rng(d)}, {d['peak_rss_mb']:.0f} MB | " +
              " | ".join(cells) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({f"{n}/{w}": m for (n, w), m in table.items()}, f, indent=1)


# ---- the one-name switch on the article-style datasets ----

ARTICLE = r'''
import sys, time, json
{datasets}
from torch.utils.data import DataLoader
name, data = sys.argv[1:3]
dataset = make(name, data)
seen, n, t0 = [], 0, time.perf_counter()
for rank in range(2):
    sampler = DistributedSampler(dataset, num_replicas=2, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler, num_workers=4)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for batch in loader:
            if epoch == 1:
                seen.extend(batch[-1].tolist())
            n += len(batch[-1])
print(json.dumps({{"samples_per_s": n / (time.perf_counter() - t0), "seen": sorted(seen),
                  "n": len(dataset)}}))
'''


def switch(a):
    base = ARTICLE.format(datasets=DATASETS)
    print(f"== one-name switch (DistributedSampler, 2 ranks, num_workers=4; load {load()})")
    print("| dataset | lines changed | runs | exactly once | DataLoader samples/s | stoker "
          "samples/s | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in ("sleep", "tensor224", "albu", "pil", "hdf5", "lmdb"):
        # the one line: DataLoader now names stoker's loader
        switched = base.replace("\nfrom torch.utils.data import DataLoader\n",
                                "\nfrom stoker import Loader as DataLoader\n")
        changed = sum(1 for l in difflib.ndiff(base.splitlines(), switched.splitlines())
                      if l.startswith("+ "))
        res = {}
        for kind, code in (("dl", base), ("stoker", switched)):
            p = subprocess.run([sys.executable, "-c", code, name, a.data], capture_output=True,
                               text=True, timeout=1800)
            lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
            res[kind] = json.loads(lines[-1]) if p.returncode == 0 and lines else \
                {"error": (p.stderr.strip().splitlines() or ["?"])[-1]}
        d, s = res["dl"], res["stoker"]
        runs = "yes" if "error" not in s else "no: " + s["error"][:80]
        once = "-" if "error" in s else \
            ("yes" if s["seen"] == list(range(s["n"])) else "NO")
        ratio = "-" if "error" in s or "error" in d else \
            f"{s['samples_per_s'] / d['samples_per_s']:.2f}x"
        print(f"| {name} | {changed} | {runs} | {once} | "
              f"{d.get('samples_per_s', 0):.0f} | {s.get('samples_per_s', 0):.0f} | {ratio} |",
              flush=True)


def summarize(paths):
    """The goals' table from the --json files of main-mode runs: per scenario the DataLoader at
    its best worker count against stoker's default, and at each worker count the ratio of times
    to first batch and of peak RSS (stoker / DataLoader)."""
    print("| scenario | DataLoader best: workers, epoch 1, later | stoker default: executor, "
          "epoch 1, later | ratio later (epoch 1) | first batch stoker/DL at 0,1,2,4,8 | "
          "peak RSS stoker/DL at 0,1,2,4,8; default/best |")
    print("| --- | --- | --- | --- | --- | --- |")
    for path in paths:
        with open(path) as f:
            results = json.load(f)
        for name, rows in results.items():
            ok = {k: v for k, v in rows.items() if "error" not in v}
            dls = {k: v for k, v in ok.items() if k.startswith("dl")}
            s = ok.get("stokerNone")
            if not dls or s is None:
                print(f"| {name} | (a run failed) | | | | |")
                continue
            best = max(dls, key=lambda k: later(dls[k]))
            d = dls[best]
            counts = sorted(int(k[2:]) for k in dls)
            if not any(f"stoker{w}" in ok for w in counts):  # (--default-only)
                print(f"| {name} | {best[2:]}, {d['rates'][0]:.0f}/s, {later(d):.0f}/s | "
                      f"{s.get('executor')} x{s.get('workers')}, {s['rates'][0]:.0f}/s, "
                      f"{later(s):.0f}/s | {later(s) / later(d):.2f}x "
                      f"({s['rates'][0] / d['rates'][0]:.2f}x) | - | -; "
                      f"{s['peak_rss_mb'] / d['peak_rss_mb']:.2f} |")
                continue
            ttfb = ", ".join(f"{ok[f'stoker{w}']['ttfb_s'] / ok[f'dl{w}']['ttfb_s']:.2f}"
                             if f"stoker{w}" in ok else "-" for w in counts)
            rss = ", ".join(f"{ok[f'stoker{w}']['peak_rss_mb'] / ok[f'dl{w}']['peak_rss_mb']:.2f}"
                            if f"stoker{w}" in ok else "-" for w in counts)
            print(f"| {name} | {best[2:]}, {d['rates'][0]:.0f}/s, {later(d):.0f}/s | "
                  f"{s.get('executor')} x{s.get('workers')}, {s['rates'][0]:.0f}/s, "
                  f"{later(s):.0f}/s | {later(s) / later(d):.2f}x "
                  f"({s['rates'][0] / d['rates'][0]:.2f}x) | {ttfb} | {rss}; "
                  f"{s['peak_rss_mb'] / d['peak_rss_mb']:.2f} |")


def main():
    if sys.argv[1:2] == ["--summarize"]:  # bench_pydataset.py --summarize a.json b.json ...
        return summarize(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="directory for the generated files")
    ap.add_argument("--scenarios", default="sleep,tensor224,pil,purepy,hdf5,lmdb,albu")
    ap.add_argument("--workers", default="0,1,2,4,8")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--json")
    ap.add_argument("--switch", action="store_true", help="the one-name switch table")
    ap.add_argument("--startup", action="store_true",
                    help="time to first batch and peak RSS only (see main_startup)")
    ap.add_argument("--default-only", action="store_true",
                    help="main mode: stoker only at its default (num_workers=None), the "
                         "DataLoader at every --workers count")
    ap.add_argument("--phases", action="store_true",
                    help="the first batch's timeline, phase by phase (see main_phases)")
    ap.add_argument("--batches", type=int, default=12, help="--startup: batches per run")
    ap.add_argument("--repeat", type=int, default=3, help="--startup: runs per loader")
    ap.add_argument("--executor", default="auto", choices=("auto", "thread", "process"),
                    help="stoker's executor= (default auto: stoker chooses)")
    ap.add_argument("--baseline", help="--startup: another build's python/ directory, run too")
    ap.add_argument("--script", action="store_true",
                    help="main mode and --startup: each run a script file with a __main__ "
                         "guard, as a user's training script (see child_command), instead of a "
                         "`python -c` program")
    ap.add_argument("--cpu", action="store_true",
                    help="main mode: CPU time per sample of the later epochs, by process and "
                         "thread role (see CPU_CHILD)")
    a = ap.parse_args()
    os.environ["STK_BENCH_EXECUTOR"] = a.executor  # read by each child
    os.environ["STK_BENCH_CPU"] = "1" if a.cpu else "0"
    os.environ["STK_BENCH_SCRIPT"] = "1" if a.script else "0"
    a.workers = [int(w) for w in a.workers.split(",")]
    make_data(a.data)
    if not os.path.isdir(os.path.join(a.data, "jpeg")):
        subprocess.run([sys.executable, os.path.join(HERE, "gen_images.py"),
                        os.path.join(a.data, "jpeg"), "--classes", "4", "--per-class", "100",
                        "--profile", "small"], check=True)
    print(f"cores {len(os.sched_getaffinity(0))}, load {load()}")
    if a.switch:
        switch(a)
    elif a.startup:
        main_startup(a)
    elif a.phases:
        main_phases(a)
    else:
        main_bench(a)


if __name__ == "__main__":
    main()

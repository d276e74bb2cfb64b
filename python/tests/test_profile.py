"""stoker.profile, python -m stoker.doctor, Loader.stats() stage times, autotune and trace=.

The sleep scenario is the classic one from PyTorch's tuning guides: a Dataset whose
__getitem__ sleeps 1 ms, read by a DataLoader with num_workers=0. The truth the profile is
checked against is measured independently, by timers inside the Dataset and the step."""
import json
import os
import subprocess
import sys
import time

import pytest

import stoker

from conftest import PYTHONPATH
from vclock import VirtualClock  # the profile's arithmetic checked exactly (the real clock's
                                 # agreement with a loop's truth: bench/bench_doctor.py)

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, Dataset  # noqa: E402


class SleepDataset(Dataset):
    """n samples, each taking `ms` milliseconds in __getitem__; `busy` sums the time spent."""

    def __init__(self, n=400, ms=1.0):
        self.n, self.ms, self.busy = n, ms, 0.0

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        t0 = time.perf_counter()
        time.sleep(self.ms / 1e3)
        x = torch.tensor([i])
        self.busy += time.perf_counter() - t0
        return x


class SleepStep:
    """A training step that takes `ms` milliseconds; `busy` sums the time spent."""

    def __init__(self, ms, dataset=None):
        self.ms, self.busy, self.calls = ms, 0.0, 0
        self.dataset, self.dataset_busy = dataset, 0.0

    def __call__(self, batch):
        t0 = time.perf_counter()
        time.sleep(self.ms / 1e3)
        self.last_end = time.perf_counter()
        self.busy += self.last_end - t0
        self.calls += 1
        if self.dataset is not None:  # the loop's own __getitem__ time (not the advice's)
            self.dataset_busy = self.dataset.busy


class ClockDataset(SleepDataset):
    """A SleepDataset whose every sample also takes exactly `ms` on the virtual clock (it still
    sleeps for real: the advice's sweep times it with the real clock)."""

    def __init__(self, clock, n=400, ms=1.0):
        super().__init__(n, ms)
        self.clock = clock

    def __getitem__(self, i):
        self.clock.now += self.ms / 1e3
        return super().__getitem__(i)


class ClockStep(SleepStep):
    """A SleepStep that takes exactly `ms` on the virtual clock."""

    def __init__(self, clock, ms, dataset=None):
        super().__init__(ms, dataset)
        self.clock = clock

    def __call__(self, batch):
        self.clock.now += self.ms / 1e3
        super().__call__(batch)


@pytest.fixture
def clock(monkeypatch):
    c = VirtualClock()
    monkeypatch.setattr(stoker._profile, "time", c)
    return c


def test_sleep_dataset_fast_step_is_data_bound(clock):
    ds = ClockDataset(clock)
    step = ClockStep(clock, 1.0, ds)
    dl = DataLoader(ds, batch_size=1, num_workers=0)
    p = stoker.profile(dl, step=step, steps=150, warmup=0)
    assert p.steps == 150 and step.calls == 150
    # Every step waited one 1 ms sample and took 1 ms: half the time waiting for data.
    assert p.wait_share == pytest.approx(0.5) and p.data_bound
    assert p.wait_ms == pytest.approx(1.0) and p.step_ms == pytest.approx(1.0)
    assert p.batch_size == 1
    assert p.num_workers == 0 and p.loader == "torch.utils.data.DataLoader"
    advice = " ".join(p.advice)
    assert "num_workers" in advice, p.advice
    # The advice names a measured worker count above 0, and the sweep that found it is kept.
    assert p.sweep and 0 in p.sweep and max(p.sweep) > 0
    # Which action the advice takes (raise num_workers to N, or "no worker count keeps up")
    # follows from the sweep's measured rates, which depend on what else runs on the machine:
    # that decision is tested on synthetic measurements (tests/unit/doctor/test_diagnose.c and the
    # settle/median_sweep cases below), not here against the wall clock.
    d = json.loads(json.dumps(p.to_dict()))
    for key in ("steps", "wait_share", "data_bound", "step_ms", "wait_ms", "batch_size",
                "samples_per_s", "loader", "num_workers", "advice", "sweep"):
        assert key in d
    assert "DATA-BOUND" in str(p)


def test_sleep_dataset_slow_step_is_not_data_bound(clock):
    """A 50 ms step over 1 ms samples waits 1/51 of the time: not data-bound. (Measured with the
    real clock, the 1 ms sleeps stretch with the machine's load, 0.21 of the time seen under a
    load of 16, and a wall-clock "truth" differed from the profile by more than any fixed
    tolerance: issue 30. The verdict's rule itself is tested on synthetic measurements in
    tests/unit/doctor/test_diagnose.c.)"""
    ds, step = ClockDataset(clock), ClockStep(clock, 50.0)
    dl = DataLoader(ds, batch_size=1, num_workers=0)
    p = stoker.profile(dl, step=step, steps=12, warmup=0)
    assert p.steps == 12 and step.calls == 12
    assert p.wait_share == pytest.approx(1 / 51) and not p.data_bound, str(p)
    assert p.step_ms == pytest.approx(50.0) and p.wait_ms == pytest.approx(1.0)
    assert p.samples_per_s == pytest.approx(1000 / 51)


class _SlowStart:
    """A loader whose iter() takes 30 ms before the first batch (a DataLoader starts its worker
    processes there), then hands out 4 batches at once."""

    def __iter__(self):
        time.sleep(0.030)
        return iter([torch.zeros(2)] * 4)


def test_the_wait_for_iter_counts_as_waiting_for_data():
    """The loop waits for iter(loader) as it waits for next(): the first batch's wait (the
    start-up) includes it, each pass's (two here). A sleep lasts at least its time, so these
    bounds hold on any machine."""
    p = stoker.Profile(_SlowStart(), steps=6, warmup=0)
    p.run(lambda batch: None)
    assert p.steps == 6 and p.epochs == 1
    assert p.first_wait_ms >= 30.0, p.first_wait_ms
    assert p.epoch_start_ms is not None and p.epoch_start_ms >= 30.0, p.epoch_start_ms
    assert 1e3 * p.wait_s >= 60.0, p.wait_s


def test_stoker_loader_with_slow_step_is_not_data_bound(tmp_path, clock):
    """The profile of a stoker.Loader: its name, batch size and steps; on the virtual clock only
    the step takes time, so the loop is exactly not data-bound (whether a real 20 ms step
    outlasts the loader's batch depends on the machine's load: bench/bench_doctor.py)."""
    path = str(tmp_path / "d.stk")
    stoker.write_shard(path, {"label": "int64", "data": "bytes"},
                       ({"label": i, "data": bytes(1000)} for i in range(2000)))
    with stoker.Loader(path, batch_size=16, num_workers=1) as loader:
        p = stoker.profile(loader, step=ClockStep(clock, 20.0), steps=15)
        assert p.wait_share == 0 and not p.data_bound, str(p)
        assert p.step_ms == pytest.approx(20.0) and p.steps == 17
        assert p.loader == "stoker.Loader" and p.batch_size == 16
        # ... and the same loader with an instant step is data-bound... only if it is slower
        # than the step: raw records are not, which the verdict must also say.
        fast = stoker.profile(loader, step=lambda b: None, steps=30)
        assert fast.steps == 32


def test_stoker_decoding_loader_data_bound_gets_stages_and_sweep(tmp_path):
    """A data-bound profile of a real decoding stoker.Loader: its stage shares (decode among
    them), a sweep of its thread counts and advice about them. The profile is fed synthetic
    10 ms waits and 1 ms steps (_bound_profile): whether a real instant step over this loader
    measures as data-bound depends on the machine's load (a preempted step outweighs the waits),
    so the verdict's input is fixed here and its rule is tested on synthetic measurements
    (tests/unit/doctor/test_diagnose.c); the real clock's figure is bench/bench_doctor.py's.
    (This measured an instant step with the real clock: issue 30.)"""
    np = pytest.importorskip("numpy")
    Image = pytest.importorskip("PIL.Image")
    if not stoker.has_transforms():
        pytest.skip("this build has no image pipeline")
    root = tmp_path / "imgs" / "c0"
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(48):
        Image.fromarray(rng.integers(0, 255, (300, 400, 3), dtype=np.uint8)).save(
            root / f"{i}.jpg", quality=90)
    path = str(tmp_path / "imgs.stk")
    stoker.pack_image_folder(str(tmp_path / "imgs"), path)
    with stoker.Loader(path, batch_size=8, num_workers=1, transforms="imagenet-train") as L:
        p = _bound_profile(L, steps=12)
        assert p.data_bound, str(p)
        assert p.loader == "stoker.Loader" and p.batch_size == 8
        text = " ".join(p.advice)
        assert p.sweep and 1 in p.sweep
        assert set(p.stages) >= {"decode"}
        assert "num_workers" in text or "workers' time" in text, p.advice


def test_wrapper_form_stops_after_steps():
    ds = SleepDataset(n=100, ms=0.1)
    dl = DataLoader(ds, batch_size=2, num_workers=0)
    seen = 0
    with stoker.profile(dl, steps=10, warmup=1, advise=False) as prof:
        for batch in prof:
            seen += 1
    assert seen == 11 and prof.steps == 11
    assert prof.to_dict()["steps"] == 10
    # An iterable that ends first: every batch is measured, no error.
    prof2 = stoker.profile([torch.zeros(3, 2)] * 5, steps=100, advise=False)
    assert sum(1 for _ in prof2) == 5 and prof2.steps == 5
    assert prof2.loader == "builtins.list" and prof2.batch_size == 3


def test_profile_of_any_iterable_and_bad_arguments(clock):
    # on the virtual clock the 1 ms step is all the time there is: exactly not data-bound (on
    # the real clock a preempted next() of range() could outweigh 1 ms steps: issue 30)
    p = stoker.profile(iter(range(50)), step=ClockStep(clock, 1.0), steps=20)
    assert p.wait_share == 0
    assert p.steps == 20 + 2 and not p.data_bound and p.advice == []
    with pytest.raises(ValueError, match="steps"):
        stoker.profile([1], steps=0)
    with pytest.raises(ValueError, match="warmup"):
        stoker.profile([1], warmup=-1)
    with pytest.raises(TypeError, match="callable"):
        stoker.profile([1], step=3)


def test_loader_stats_fields(tmp_path):
    path = str(tmp_path / "d.stk")
    stoker.write_shard(path, {"label": "int64"}, ({"label": i} for i in range(500)))
    with stoker.Loader(path, batch_size=10, num_workers=2) as loader:
        for b in loader:
            time.sleep(0.002)   # slower than the loader: workers wait for slots
        st = loader.stats()
        assert st["batches"] == 50 and st["samples"] == 500
        for k in ("wall_s", "read_s", "decode_s", "augment_s", "collate_s", "copy_s",
                  "worker_wait_s", "consumer_wait_s"):
            assert isinstance(st[k], float) and st[k] >= 0, k
        # The workers wait for slots and the wait shows once it ends (when a batch is taken).
        # How much of it the first epoch holds depends on the machine's load (a bound of 50 ms
        # failed there: issue 30), so more epochs are taken until it shows; the bound on them
        # is a hang guard.
        for _ in range(100):
            if st["worker_wait_s"] > 0:
                break
            for b in loader:
                time.sleep(0.002)
            st = loader.stats()
        assert st["worker_wait_s"] > 0, st
        assert st["read_s"] > 0 and st["decode_s"] == 0
        assert st["active_threads"] == 2 and st["n_threads"] == 2
        assert st["autotune_reason"] == "" and not loader.info()["autotune"]


def test_autotune_is_the_default(tmp_path):
    path = str(tmp_path / "d.stk")
    stoker.write_shard(path, {"label": "int64"}, ({"label": i} for i in range(200)))
    for nw in (None, "auto"):
        with stoker.Loader(path, batch_size=10, num_workers=nw, prefetch="auto") as loader:
            assert loader.info()["autotune"]
            assert sorted(int(x) for b in loader for x in b["label"]) == list(range(200))
            st = loader.stats()
            assert 1 <= st["active_threads"] <= st["n_threads"]
            assert 1 <= st["depth"] <= loader.prefetch + 1
    with pytest.raises(stoker.StokerInvalidError):
        stoker.Loader(path, batch_size=10, num_workers="many")


def test_trace_one_track_per_thread_no_overlap(tmp_path):
    path = str(tmp_path / "d.stk")
    stoker.write_shard(path, {"label": "int64"}, ({"label": i} for i in range(300)))
    out = tmp_path / "trace.json"
    loader = stoker.Loader(path, batch_size=10, num_workers=2, trace=out)
    for _ in loader:
        time.sleep(0.001)
    waited = loader.stats()["consumer_wait_s"] > 0
    loader.close()
    events = json.loads(out.read_text())["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
    assert sorted(names.values()) == ["consumer", "worker 0", "worker 1"]
    slices = [e for e in events if e["ph"] == "X"]
    assert {e["tid"] for e in slices} <= set(names)
    assert {e["name"] for e in slices} >= {"read", "step"}
    # Whether the loop ever waited for a batch depends on the machine's speed; the trace must
    # agree with the stats about it either way.
    assert ("wait for batch" in {e["name"] for e in slices}) == waited
    busy_workers = 0
    for tid in names:
        track = sorted((e["ts"], e["ts"] + e["dur"]) for e in slices if e["tid"] == tid)
        # the consumer always has slices; one worker may have taken every sample (a loaded
        # machine can start the other late), not both
        assert track or names[tid] != "consumer"
        busy_workers += names[tid] != "consumer" and bool(track)
        for (a0, a1), (b0, b1) in zip(track, track[1:]):
            assert b0 >= a1 - 1e-3, (names[tid], (a0, a1), (b0, b1))
    assert busy_workers >= 1
    # write_trace: mid-run, to another path; and without trace= it says what is missing.
    with stoker.Loader(path, batch_size=10, trace=tmp_path / "t2.json") as l2:
        next(iter(l2))
        assert l2.write_trace(tmp_path / "t3.json") == str(tmp_path / "t3.json")
        json.loads((tmp_path / "t3.json").read_text())
    with stoker.Loader(path, batch_size=10) as l3:
        with pytest.raises(stoker.StokerStateError, match="trace"):
            l3.write_trace(tmp_path / "t4.json")


def _doctor(tmp_path, script_text, *args):
    script = tmp_path / "train.py"
    script.write_text(script_text)
    out = tmp_path / "report.json"
    env = dict(os.environ, PYTHONPATH=PYTHONPATH)
    r = subprocess.run([sys.executable, "-m", "stoker.doctor", "--json-out", str(out), *args,
                        str(script)], env=env, capture_output=True, text=True, timeout=120)
    report = json.loads(out.read_text()) if out.exists() else None
    return r, report


# The script installs a virtual clock as the profile's (the doctor runs it in its own process):
# a sample takes exactly 3 ms on it and a step 1 ms, so the report's share is known exactly
# (with the real clock the verdict moved with the machine's load: issue 30). It still sleeps for
# real: the advice's sweep times the DataLoader with the real clock.
SLEEP_SCRIPT = """
import time, torch
import stoker._profile
from torch.utils.data import DataLoader, Dataset
class Clock:
    now = 1000.0
    def perf_counter(self): return self.now
    def time(self): return time.time()
clock = stoker._profile.time = Clock()
class D(Dataset):
    def __len__(self): return 1000
    def __getitem__(self, i):
        clock.now += 0.003
        time.sleep(0.003)
        return torch.tensor([i])
dl = DataLoader(D(), batch_size=1, num_workers=0)
for epoch in range(10):
    for batch in dl:
        try:
            clock.now += 0.001
            time.sleep(0.001)
        except Exception:   # a script's own handlers must not swallow the doctor's stop
            pass
print("the script never reaches here under --steps")
"""


def test_doctor_runs_a_script(tmp_path):
    r, rep = _doctor(tmp_path, SLEEP_SCRIPT, "--steps", "30")
    assert r.returncode == 0, r.stderr
    assert "never reaches" not in r.stdout
    assert rep["steps"] == 30 and rep["data_bound"] is True
    assert rep["wait_share"] == pytest.approx(0.75), rep
    assert rep["wait_ms"] == pytest.approx(3.0) and rep["step_ms"] == pytest.approx(1.0), rep
    assert rep["loader"] == "torch.utils.data.DataLoader" and rep["num_workers"] == 0
    assert any("num_workers" in a for a in rep["advice"]), rep["advice"]
    assert "DATA-BOUND" in r.stderr


def test_doctor_bad_scripts(tmp_path):
    r, rep = _doctor(tmp_path, "raise RuntimeError('boom in the script')\n")
    assert r.returncode == 1 and "boom in the script" in rep["script_error"]
    r, rep = _doctor(tmp_path, "import sys\nsys.exit(4)\n")
    assert r.returncode == 4 and rep["exit_status"] == 4
    r, rep = _doctor(tmp_path, "x = 1\n")
    assert r.returncode == 3 and rep["steps"] == 0 and "nothing to measure" in r.stderr
    env = dict(os.environ, PYTHONPATH=PYTHONPATH)
    r = subprocess.run([sys.executable, "-m", "stoker.doctor", str(tmp_path / "missing.py")],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "missing.py: no such file" in r.stderr


# ---- issue 16 item 5: advice only where it holds ----

def test_sweep_settles_when_two_in_a_row_agree_else_reports_noise():
    from stoker import _advice
    settle = _advice.settle
    assert settle([("more", 2)]) == "again"
    assert settle([("more", 2), ("more", 2)]) == "stable"
    assert settle([("more", 2), ("more", 4)]) == "again"
    assert settle([("more", 2), ("more", 4), ("more", 4)]) == "stable"
    assert settle([("more", 2), ("more", 4), ("more", 8)]) == "noisy"  # at most 3 sweeps
    # Synthetic measurements through stk_diagnose (the decision stoker doctor takes too): a
    # step consuming 1000 samples/s, batch 10; three sweeps of a 2-core machine where noise
    # moves the rate at 2 workers around the 1200 samples/s (20% headroom) threshold.
    sweeps = [{1: 700.0, 2: 1300.0, 4: 1500.0}, {1: 690.0, 2: 1100.0, 4: 1450.0},
              {1: 710.0, 2: 1250.0, 4: 1480.0}]

    def decide(sweep):
        d = stoker._core.diagnose(5.0, 10.0, 1000, 10, 0, sweep)  # 10 ms steps, 5 ms waits
        return d["action"], d["recommended"]

    choices = [decide(s) for s in sweeps]
    assert choices[0] != choices[1]
    assert settle(choices[:2]) == "again" and settle(choices) == "noisy"
    med = _advice.median_sweep(sweeps)
    assert med == {1: 700.0, 2: 1250.0, 4: 1480.0}
    assert decide(med) == choices[0]


def test_sweep_is_capped_at_twice_the_cores(monkeypatch):
    from stoker import _advice
    monkeypatch.setattr(_advice, "_cpus", lambda: 2)
    assert max(_advice._counts("torch", 0, 2 * _advice._cpus())) == 4


@pytest.fixture
def folder(tmp_path):
    from PIL import Image
    import numpy as np
    rng = np.random.default_rng(0)
    for i in range(6):
        d = tmp_path / "tree" / f"c{i % 2}"
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(d / f"{i}.jpg")
    return str(tmp_path / "tree")


def test_switch_advice_only_when_stoker_can_express_the_transform(folder, monkeypatch):
    if not stoker.has_transforms():
        pytest.skip("no image pipeline")
    from torchvision import transforms as T
    from torchvision.datasets import ImageFolder
    from stoker import _advice
    fancy = ImageFolder(folder, transform=T.Compose([T.RandomPerspective(), T.ToTensor(),
                                                      T.RandomErasing()]))
    line = _advice.switch_advice(fancy, _advice._image_folder(fancy))
    assert line.startswith("stoker.Loader cannot replace this DataLoader")
    assert "RandomPerspective" in line and "switch to" not in line
    val = ImageFolder(folder, transform=T.Compose([T.Resize(32), T.CenterCrop(32),
                                                   T.ToTensor()]))
    monkeypatch.setattr(_advice.shutil, "which", lambda name: None)  # pip installs no CLI
    line = _advice.switch_advice(val, _advice._image_folder(val))
    assert line.startswith("switch to stoker.Loader") and "6 files" in line
    assert f"stoker.pack_image_folder({folder!r}, 'data.stk')" in line
    assert "`stoker pack" not in line
    monkeypatch.setattr(_advice.shutil, "which", lambda name: "/usr/local/bin/stoker")
    assert f"`stoker pack {folder} data.stk`" in _advice.switch_advice(
        val, _advice._image_folder(val))


# ---- issue 24: what the user's Python costs, decided on synthetic measurements ----

def test_costs_decisions_on_synthetic_numbers():
    from stoker import _costs
    assert _costs.mostly_waits(1e-3, 5e-5) is True       # a 1 ms sleep
    assert _costs.mostly_waits(1e-3, 9e-4) is False      # 1 ms of decoding
    assert _costs.mostly_waits(None, 1e-4) is None
    # past twice the cores only when the work waits, while a doubling gains >= 10%
    grow = {1: 100.0, 2: 200.0, 4: 400.0}
    assert _costs.next_count(grow, True, 2) == 8
    assert _costs.next_count(grow, False, 2) is None     # CPU work: twice the cores at most
    assert _costs.next_count({1: 100.0, 2: 200.0}, True, 2) is None  # usual sweep not done
    assert _costs.next_count({**grow, 8: 430.0}, True, 2) is None     # +7.5%: stop
    assert _costs.next_count({**grow, 8: 800.0, 16: 1600.0}, True, 2) == 32
    assert _costs.next_count({**grow, 8: 800.0, 16: 1600.0, 32: 3200.0}, True, 2) is None  # 16/core
    assert _costs.next_count({1: 1.0, 2: 2.0}, True, 1, usual=2) == 4  # stoker's usual top
    # __getitem__'s own ceiling: waits overlap across workers, computing needs cores
    assert _costs.getitem_cap(4, 2, 1e-3, 5e-5) == 4000.0
    assert _costs.getitem_cap(4, 2, 1e-3, 1e-3) == 2000.0
    assert _costs.getitem_cap(0, 2, 1e-3, 1e-3) is None
    # what limits: moving batches when the free-__getitem__ rate is below __getitem__'s ceiling
    # and the loader comes near it (loosely: on a loaded machine 76 against 119 happens)
    assert _costs.limit("torch", 150.0, 170.0, 1e-3, 5e-5, workers=4, cores=2) == \
        ("transfer", 170.0)
    assert _costs.limit("torch", 76.0, 119.0, 4.6e-3, 6e-4, workers=4, cores=2) == \
        ("transfer", 119.0)
    assert _costs.limit("torch", 50.0, 170.0, 1e-3, 5e-5, workers=4, cores=2) == \
        ("getitem_wait", None)  # far below the transfer ceiling: not what holds it back
    assert _costs.limit("torch", 150.0, 5000.0, 1e-3, 5e-5, workers=4, cores=2)[0] == \
        "getitem_wait"          # moving batches allows more than __getitem__ does
    assert _costs.limit("torch", 150.0, 170.0, 1e-3, 5e-5, workers=0, cores=2)[0] == \
        "getitem_wait"          # no workers: nothing moves between processes
    assert _costs.limit("torch", 100.0, None, 1e-3, 9e-4, workers=2, cores=2) == \
        ("getitem_cpu", None)
    assert _costs.limit("torch", 100.0, None, None, None) == (None, None)
    # stoker's threads: 2 ms per sample (1 ms on a CPU) holding the GIL half of it: 1000
    # samples/s at most, below the 2000 that 4 threads on 2 cores would allow
    assert _costs.limit("stoker", 900.0, None, 2e-3, 1e-3, 0.5, "thread", 4, 2) == \
        ("gil", 1000.0)
    assert _costs.limit("stoker", 400.0, None, 2e-3, 1e-3, 0.5, "thread", 4, 2)[0] == \
        "getitem_cpu"  # far below the GIL's ceiling
    assert _costs.limit("stoker", 900.0, None, 2e-3, 1e-3, 0.5, "thread", 2, 2)[0] == \
        "getitem_cpu"  # 2 threads: __getitem__'s own ceiling (1000) is not above the GIL's
    assert _costs.limit("stoker", 900.0, None, 2e-3, 1e-3, 0.5, "process", 4, 2)[0] == \
        "getitem_cpu"
    assert _costs.per_sample(2.0, 1000) == 2e-3 and _costs.per_sample(None, 0) is None


class Big(Dataset):
    """600 KB samples (a 3x224x224 float32 tensor), as in the issue's sleep dataset."""

    def __len__(self):
        return 1000

    def __getitem__(self, i):
        return torch.zeros(3, 224, 224), i


def _bound_profile(dl, steps=20):
    """A Profile of `dl` fed synthetic steps: 10 ms waits, 1 ms steps (data-bound)."""
    p = stoker.Profile(dl, warmup=0)
    batch = next(iter(dl))
    for k in range(steps):
        p._wait(0.010, batch, k == 0)
        p._step(0.001)
    return p


def _fake_rates(monkeypatch, rates, replay, wall=1e-3, cpu=5e-5):
    """_advice._rate_torch answering from tables instead of the clock: rates[w] for the
    dataset's own runs (its timed wrapper told `wall`/`cpu` seconds per sample), replay[w] for
    the free-__getitem__ runs."""
    from stoker import _advice
    seen = []

    def rate(dl, w, dataset=None):
        seen.append((w, type(dataset).__name__))
        if isinstance(dataset, _advice._Replay):
            return replay[w]
        if isinstance(dataset, _advice._TimedDataset):
            dataset.sums[0], dataset.sums[1], dataset.sums[2] = 10 * wall, 10 * cpu, 10
        return rates[w]
    monkeypatch.setattr(_advice, "_rate_torch", rate)
    monkeypatch.setattr(_advice, "_cpus", lambda: 2)
    return seen


def test_dataloader_moving_batches_is_named_as_the_limit(monkeypatch):
    """The issue's case: a __getitem__ that sleeps 1 ms over 600 KB samples. The measured rates
    (synthetic here) say the workers reach the rate of the same batches with a __getitem__ that
    costs nothing: moving batches between processes is the limit, not __getitem__."""
    dl = DataLoader(Big(), batch_size=32, num_workers=2)
    p = _bound_profile(dl)
    seen = _fake_rates(monkeypatch, {1: 90.0, 2: 120.0, 4: 160.0, 8: 158.0}, {4: 170.0})
    advice = " ".join(p.advice)
    c = p.costs
    assert c["limit"] == "transfer" and c["transfer_samples_per_s"] == 170.0, (c, p.advice)
    assert c["transfer_workers"] == 4 and c["executor"] == "process"
    assert c["batch_bytes"] == 32 * (3 * 224 * 224 * 4 + 8) and p.batch_bytes == c["batch_bytes"]
    assert abs(c["getitem_ms"] - 1.0) < 1e-9 and abs(c["getitem_cpu_share"] - 0.05) < 1e-9
    assert "moving batches between processes limits this DataLoader, not __getitem__" in advice
    assert "19.3 MB each" in advice and "moving its batches is the limit" in advice
    assert "one sample costs" not in advice  # not __getitem__'s cost
    # the sweep went past twice the cores (4) because the work waits, and stopped when 8
    # gained nothing; the replay ran at the best count
    assert (8, "_TimedDataset") in seen and (4, "_Replay") in seen and max(p.sweep) == 8
    assert "so the sweep went past 4 num_workers" in advice and "waits are not" in advice
    d = json.loads(json.dumps(p.to_dict()))
    assert d["costs"]["limit"] == "transfer"
    assert "python: executor process; __getitem__ 1.00 ms per sample (5% on a CPU)" in str(p)


class Tiny(Big):
    """24-byte samples: a batch of 32 is under 1 KB."""

    def __getitem__(self, i):
        return torch.zeros(4), i


def test_a_transfer_limit_of_tiny_batches_asks_for_larger_batches(monkeypatch):
    """The same limit over 768-byte batches is their count, not their bytes: the advice was
    "Move fewer bytes per sample (uint8 instead of float32 ...)" for a 1 KB batch."""
    p = _bound_profile(DataLoader(Tiny(), batch_size=32, num_workers=2))
    _fake_rates(monkeypatch, {1: 90.0, 2: 120.0, 4: 160.0, 8: 158.0}, {4: 170.0})
    advice = " ".join(p.advice)
    assert p.costs["limit"] == "transfer", (p.costs, p.advice)
    assert "Move fewer bytes" not in advice
    assert "each batch's fixed cost (188.24 ms to hand over, whatever its size)" in advice
    assert "use larger batches" in advice


def test_dataloader_waiting_work_sweeps_past_twice_the_cores(monkeypatch):
    dl = DataLoader(Big(), batch_size=32, num_workers=2)
    p = _bound_profile(dl, steps=20)
    rates = {1: 100.0, 2: 200.0, 4: 400.0, 8: 800.0, 16: 1000.0, 32: 1050.0}
    _fake_rates(monkeypatch, rates, {w: 5000.0 for w in rates})
    advice = " ".join(p.advice)
    assert sorted(p.sweep) == [1, 2, 4, 8, 16, 32], p.sweep  # 16 per core at most: 32
    assert "workers past the cores help, num_workers=32 delivers 1050 samples/s" in advice
    assert p.costs["limit"] == "getitem_wait"
    # computing work stops at twice the cores
    p = _bound_profile(dl, steps=20)
    _fake_rates(monkeypatch, rates, {w: 5000.0 for w in rates}, wall=1e-3, cpu=9e-4)
    advice = " ".join(p.advice)
    assert max(p.sweep) == 4 and p.costs["limit"] == "getitem_cpu", p.sweep
    assert "2 cores allow at most 2222 samples/s" in advice


class _FakeStoker:
    """What _advice reads of a stoker.Loader running Python (the pydataset keys), or without
    them (a native loader, or a stoker without those keys)."""

    def __init__(self, info, stats):
        self._info, self._stats = info, stats
        self.closed, self.num_workers, self.batch_size = False, 2, 8

    def info(self):
        return dict(self._info)

    def stats(self):
        base = {k + "_s": 0.0 for k in ("read", "decode", "augment", "collate", "copy")}
        base.update(active_threads=2, n_threads=2, depth=3, autotune_reason="")
        base.update(self._stats)
        return base

    def __iter__(self):
        return iter([{"x": torch.zeros(8, 4)}] * 100)


def test_stoker_python_costs_read_when_present_and_absent(monkeypatch):
    from stoker import _advice
    monkeypatch.setattr(_advice, "_kind", lambda it: "stoker")
    with_keys = _FakeStoker({"executor": "thread", "executor_reason": "__getitem__ releases "
                             "the GIL 90% of its time"},
                            {"python_s": 2.0, "python_samples": 1000, "gil_share": 0.5})
    p = _bound_profile(with_keys)
    _advice.costs(p)
    c = p.costs
    assert c["executor"] == "thread" and c["executor_reason"].startswith("__getitem__")
    assert abs(c["getitem_ms"] - 2.0) < 1e-9 and c["gil_share"] == 0.5
    line = str(p)
    assert "python: executor thread (__getitem__ releases" in line and "GIL held 50%" in line
    # the GIL as the limit: threads at 900 samples/s against the 1000 the GIL allows
    monkeypatch.setattr(_advice, "_rate_stoker",
                        lambda it, w: {1: 500.0, 2: 900.0, 4: 950.0}[w])
    # 2 ms per sample, 1 of it on a CPU: 4 threads on 2 cores allow 2000 samples/s, the GIL
    # (held half of it) 1000
    monkeypatch.setattr(_advice, "_cpus", lambda: 2)
    monkeypatch.setattr(_advice, "_sample_cost", lambda ds: (2e-3, 1e-3))
    with_keys.dataset = object()
    with_keys.num_workers = 4
    p = _bound_profile(with_keys)
    advice = " ".join(p.advice)
    assert p.costs["limit"] == "gil" and sorted(p.sweep) == [1, 2, 4], (p.costs, p.advice)
    assert "holds the GIL 50% of its 2.00 ms" in advice and "executor='process'" in advice
    assert "at most 1000 samples/s whatever num_workers (950 measured)" in advice
    # a computing __getitem__ whose stats time counts waits for the GIL (6 ms a sample against
    # its 1 ms alone, 83% of that on a CPU) is named as computing: it read as "getitem_wait"
    busy = _FakeStoker({"executor": "process", "executor_reason": ""},
                       {"python_s": 6.0, "python_samples": 1000, "gil_share": 0.9})
    busy.dataset = object()
    monkeypatch.setattr(_advice, "_sample_cost", lambda ds: (1e-3, 0.83e-3))
    p = _bound_profile(busy)
    advice = " ".join(p.advice)
    assert p.costs["limit"] == "getitem_cpu", (p.costs, advice)
    assert "6.00 ms in __getitem__, 83% of it on a CPU" in advice
    # absent keys: a native loader, nothing about Python
    bare = _FakeStoker({}, {})
    p = _bound_profile(bare)
    _advice.costs(p)
    assert p.costs["executor"] == "native" and p.costs["getitem_ms"] is None
    assert p.costs["gil_share"] is None and "python:" not in str(p)


class _Spins(Dataset):
    """__getitem__ computes 0.3 ms (on a CPU)."""

    def __len__(self):
        return 96

    def __getitem__(self, i):
        t = time.thread_time()
        while time.thread_time() - t < 3e-4:
            pass
        return i


class _SpinStream(torch.utils.data.IterableDataset):
    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        w, n = (0, 1) if info is None else (info.id, info.num_workers)
        return (_Spins()[i] for i in range(w, 96, n))


@pytest.mark.parametrize("kw", [dict(executor="process", num_workers=1),
                                dict(num_workers=0), dict(iterable=True, num_workers=1)],
                         ids=["process-1", "here", "iterable"])
def test_profile_of_a_python_dataset_measures_it_again_alone(kw):
    """stoker.profile of a Python dataset's loader re-creates it alone at other worker counts
    as a second stoker.Loader with workers of its own (was: a second C loader on the first
    one's executor: with one worker process it hung, with two it failed "a ProcPool of 2
    workers needs n_threads=2", at num_workers=0 "batch 0 is not loaded"; an IterableDataset
    raised KeyError 'read_s'), and names no C stage ("collate 100%") for __getitem__'s time."""
    kw = dict(kw)
    ds = _SpinStream() if kw.pop("iterable", False) else _Spins()
    loader = stoker.Loader(ds, batch_size=8, **kw)
    p = stoker.profile(loader, step=lambda b: None, steps=6)
    text = str(p)
    assert p.sweep and all(r > 0 for r in p.sweep.values()), text
    assert "could not re-create" not in text and "collate" not in text, text
    loader.close()


class _Sleeps(Dataset):
    """__getitem__ sleeps 2 ms (it waits: its CPU time is a small part of its time)."""

    def __len__(self):
        return 24

    def __getitem__(self, i):
        time.sleep(0.002)
        return i


@pytest.mark.parametrize("ctx", [None, "spawn"])
def test_timed_dataset_counts_every_call_in_the_worker_processes(ctx):
    """The profiler's per-sample __getitem__ time of a DataLoader comes from its worker
    processes through shared counters (_TimedDataset): every call is counted once, whether the
    workers are forked or spawned, and a sleep's time is at least the sleep (the clock only
    stretches it)."""
    from stoker import _advice
    dl = DataLoader(_Sleeps(), batch_size=4, num_workers=2, multiprocessing_context=ctx)
    timed = _advice._TimedDataset(dl.dataset, _advice._mp_context(dl))
    got = [int(v) for b in DataLoader(timed, batch_size=4, num_workers=2,
                                      multiprocessing_context=ctx) for v in b]
    assert sorted(got) == list(range(24))
    assert timed.sums[2] == 24
    wall, cpu = timed.per_sample()
    assert wall >= 0.002 and 0 <= cpu <= wall, (wall, cpu)


def test_switch_advice_for_arrays_in_memory():
    """A TensorDataset (or a Subset of one) that stoker reads natively gets the switch line; one
    it cannot (a tensor requiring grad) says why; any other dataset gets none."""
    from stoker import _advice
    ds = torch.utils.data.TensorDataset(torch.randn(30, 4), torch.arange(30))
    for d in (ds, torch.utils.data.Subset(ds, [3, 1, 2])):
        line = _advice.inmemory_advice(d)
        assert line.startswith("switch to stoker.Loader: this TensorDataset's samples are rows")
        assert "C threads copy each row" in line
    grad = torch.utils.data.TensorDataset(torch.randn(30, 4, requires_grad=True))
    line = _advice.inmemory_advice(grad)
    assert line.startswith("stoker.Loader cannot replace this DataLoader") and "grad" in line
    assert _advice.inmemory_advice([1, 2, 3]) is None

#!/usr/bin/env python3
"""ResNet-50 training throughput on one GPU: PyTorch's DataLoader against stoker.Loader.

Trains torchvision's ResNet-50 (channels_last, bf16 autocast, SGD, batch 256, 224 px) on
ImageNet-like JPEGs generated here (bench/gen_images.py --profile imagenet, packed with
`stoker pack`), for a number of steps with each input pipeline:

  synthetic   random tensors already on the GPU: the compute ceiling
  dataloader  torch.utils.data.DataLoader over the ImageFolder tree with torchvision's
              RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor + Normalize,
              pin_memory=True, persistent_workers=True, prefetch_factor=4; num_workers swept,
              the best kept
  stoker      stoker.Loader(data.stk, batch_size=256, shuffle=True, num_workers=N,
              device="cuda", transforms="imagenet-train")

and measures the pinned host-to-device copy ceiling (torch pinned tensor .to(device,
non_blocking=True)). For each run: images/s, the GPU busy fraction from stoker.profile (1 -
the share of the loop spent waiting for data), nvidia-smi utilisation sampled in the
background, and CPU cores used (CPU time of the process and all its children / wall time).
Results go to bench/gpu/out/ as JSON and a markdown table.

    bash bench/gpu/run.sh                       # on the GPU machine: build, generate, run
    python3 bench/gpu/train_resnet50.py --steps 300 --workers 8,12,16
    python3 bench/gpu/train_resnet50.py --device cpu --tiny    # a smoke run without a GPU
    python3 bench/gpu/train_resnet50.py --dry-run               # print the plan only
"""
import argparse
import gc
import glob
import json
import os
import platform
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "bench", "gpu", "out")
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
RUNS = ("h2d", "synthetic", "dataloader", "stoker")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", help="an ImageFolder tree of JPEGs (default: generated under "
                    "bench/data/gpu/); its .stk pack sits beside it as <tree>.stk")
    ap.add_argument("--images", type=int, default=25600, help="images to generate (default "
                    "25600: 100 batches of 256 per epoch)")
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--steps", type=int, default=300, help="measured training steps per run")
    ap.add_argument("--warmup", type=int, default=20, help="steps run before measuring")
    ap.add_argument("--max-seconds", type=float, default=45.0, help="end a run's measured "
                    "steps after this many seconds even before --steps (default 45: the whole "
                    "benchmark fits one 10-minute call)")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--size", type=int, default=224, help="crop size (the stoker recipe is 224)")
    ap.add_argument("--workers", default="auto", help="DataLoader num_workers to sweep, e.g. "
                    "4,8,12,16 (auto: half, three quarters and all of the CPUs)")
    ap.add_argument("--stoker-workers", default="auto", help="stoker num_workers to run, e.g. "
                    "auto,8 (auto: the loader's own autotuning)")
    ap.add_argument("--only", default=",".join(RUNS), help="runs to do, from " + ",".join(RUNS))
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu (a smoke run)")
    ap.add_argument("--tiny", action="store_true", help="a few tiny images, batch 4, 2 steps: "
                    "checks the script end to end in seconds (with --device cpu without a GPU)")
    ap.add_argument("--advice", action="store_true", help="let stoker.profile sweep worker "
                    "counts when a run is data-bound (slower; --max-seconds does not apply)")
    ap.add_argument("--out", default=OUT, help="where results go (default bench/gpu/out)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    a = ap.parse_args(argv)
    if a.tiny:
        a.images, a.classes, a.batch_size = min(a.images, 48), min(a.classes, 4), 4
        a.steps, a.warmup = min(a.steps, 2), min(a.warmup, 1)
        if a.workers == "auto":
            a.workers = "1,2"
        if a.stoker_workers == "auto":
            a.stoker_workers = "2"
    a.only = [r.strip() for r in a.only.split(",") if r.strip()]
    bad = [r for r in a.only if r not in RUNS]
    if bad:
        ap.error(f"--only: unknown run(s) {bad}; choose from {RUNS}")
    if (a.steps < 1 or a.warmup < 0 or a.batch_size < 1 or a.images < a.batch_size
            or a.max_seconds <= 0):
        ap.error("--steps >= 1, --warmup >= 0, --batch-size >= 1, --images >= --batch-size "
                 "and --max-seconds > 0")
    ncpu = os.cpu_count() or 1
    if a.workers == "auto":
        a.workers = sorted({max(1, ncpu // 2), max(1, 3 * ncpu // 4), ncpu})
    else:
        a.workers = [int(w) for w in a.workers.split(",")]
    a.stoker_workers = [None if w.strip() == "auto" else int(w)
                        for w in a.stoker_workers.split(",")]
    if a.data is None:
        a.data = os.path.join(ROOT, "bench", "data", "gpu", f"imagenet_{a.images}")
    return a


# ---- measurements ----

def cpu_seconds(root=None):
    """CPU time (user + system) of process `root` and all its descendants, from /proc."""
    root = root or os.getpid()
    tick = os.sysconf("SC_CLK_TCK")
    children, cpu = {}, {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                s = f.read()
        except OSError:
            continue
        pid = int(s[:s.index(" ")])
        fields = s[s.rindex(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(pid)  # fields[1]: ppid
        cpu[pid] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo.extend(children.get(pid, []))
    return total


class Smi:
    """nvidia-smi utilisation samples (every 200 ms) in a background thread."""

    def __init__(self, index):
        self.samples, self.proc = [], None
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used,power.draw",
                 "--format=csv,noheader,nounits", "-i", str(index), "-lms", "200"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            return
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                util, mem, power = (float(x) for x in line.split(",")[:3])
            except ValueError:
                continue
            self.samples.append((time.perf_counter(), util, mem, power))

    def window(self, t0, t1):
        """Mean utilisation (%) and power (W) of the samples in [t0, t1], or None."""
        s = [x for x in self.samples if t0 <= x[0] <= t1]
        if not s:
            return None
        return {"util_pct": sum(x[1] for x in s) / len(s), "power_w": sum(x[3] for x in s) / len(s),
                "mem_mib": max(x[2] for x in s), "samples": len(s)}

    def close(self):
        if self.proc:
            self.proc.terminate()


def h2d_ceiling(torch, device, batch_size, size):
    """Pinned host-to-device copy bandwidth for a uint8 and a float32 batch, in GB/s."""
    out = {}
    for name, dtype in (("uint8", torch.uint8), ("float32", torch.float32)):
        host = torch.empty((batch_size, 3, size, size), dtype=dtype).pin_memory()
        dev = torch.empty_like(host, device=device)
        for _ in range(3):
            dev.copy_(host, non_blocking=True)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        n = 20
        start.record()
        for _ in range(n):
            dev = host.to(device, non_blocking=True)
        end.record()
        end.synchronize()
        nbytes = host.numel() * host.element_size()
        out[name] = {"batch_mb": nbytes / 1e6, "gb_per_s": nbytes * n / (start.elapsed_time(end) / 1e3) / 1e9}
    return out


# ---- data ----

def ensure_data(a):
    """Generate the JPEG tree and its .stk pack unless they exist; returns (tree, stk)."""
    tree, stk = a.data.rstrip("/"), a.data.rstrip("/") + ".stk"
    per_class = max(1, a.images // a.classes)
    if not os.path.isdir(tree):
        os.makedirs(os.path.dirname(tree), exist_ok=True)
        cmd = [sys.executable, os.path.join(ROOT, "bench", "gen_images.py"), tree, "--classes",
               str(a.classes), "--per-class", str(per_class), "--profile", "imagenet"]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    if not os.path.exists(stk):
        cmd = [os.path.join(ROOT, "build", "stoker"), "pack", tree, stk]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    return tree, stk


# ---- training ----

class Trainer:
    """ResNet-50, SGD, bf16 autocast, channels_last; step(batch) runs one training step."""

    def __init__(self, torch, torchvision, device, num_classes=1000):
        self.torch, self.device = torch, torch.device(device)
        self.cuda = self.device.type == "cuda"
        torch.backends.cudnn.benchmark = True
        self.model = torchvision.models.resnet50(num_classes=num_classes).to(self.device)
        self.model = self.model.to(memory_format=torch.channels_last).train()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9,
                                   weight_decay=1e-4)
        self.loss = torch.nn.CrossEntropyLoss()

    def step(self, batch):
        torch = self.torch
        if isinstance(batch, dict):
            x, y = batch["image"], batch["label"]
        else:
            x, y = batch[0], batch[1]
        x = x.to(self.device, non_blocking=True).contiguous(memory_format=torch.channels_last)
        y = y.to(self.device, non_blocking=True).long()
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            loss = self.loss(self.model(x), y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()


class Capped:
    """Iterates `iterable` (again for each pass, like a DataLoader) until `limit` seconds after
    mark["t0"], the start of the measured steps; checked before each batch is fetched."""

    def __init__(self, iterable, mark, limit):
        self.iterable, self.mark, self.limit = iterable, mark, limit

    def _over(self):
        t0 = self.mark.get("t0")
        return t0 is not None and time.perf_counter() - t0 > self.limit

    def __iter__(self):
        if self._over():
            return
        it = iter(self.iterable)
        while not self._over():
            try:
                batch = next(it)
            except StopIteration:
                return
            yield batch


def measure(name, iterable, trainer, a, smi, extra=None):
    """Train `a.steps` steps after `a.warmup` under stoker.profile (at most `a.max_seconds` of
    measured steps); the figures of one run."""
    import stoker
    torch = trainer.torch
    mark = {"n": 0}

    def step(batch):
        if mark["n"] == a.warmup:  # the measured window starts with this step
            mark["cpu0"], mark["t0"] = cpu_seconds(), time.perf_counter()
        mark["n"] += 1
        trainer.step(batch)

    print(f"-- {name}: {a.warmup} warm-up + {a.steps} steps", flush=True)
    t_start = time.perf_counter()
    # --advice re-creates the loader itself, so it gets the loader, uncapped
    src = iterable if a.advice else Capped(iterable, mark, a.max_seconds)
    prof = stoker.profile(src, step=step, steps=a.steps, warmup=a.warmup, advise=a.advice)
    if trainer.cuda:
        torch.cuda.synchronize()
    t1, cpu1 = time.perf_counter(), cpu_seconds()
    t0, cpu0 = mark.get("t0", t_start), mark.get("cpu0", 0.0)
    wall = t1 - t0
    res = {
        "run": name,
        "images_per_s": prof.samples_per_s,
        "images_per_s_wall": (mark["n"] - a.warmup) * a.batch_size / wall if wall > 0 else None,
        "gpu_busy": 1.0 - prof.wait_share,
        "wait_share": prof.wait_share,
        "data_bound": prof.data_bound,
        "step_ms": prof.step_ms,
        "wait_ms": prof.wait_ms,
        "cpu_cores": (cpu1 - cpu0) / wall if wall > 0 else None,
        "seconds": wall,
        "profile": prof.to_dict(),
    }
    if smi is not None:
        res["nvidia_smi"] = smi.window(t0, t1)
    res.update(extra or {})
    busy = f"{100 * res['gpu_busy']:.1f}%"
    util = res.get("nvidia_smi") or {}
    print(f"   {res['images_per_s']:.0f} images/s, GPU busy {busy} (nvidia-smi "
          f"{util.get('util_pct', float('nan')):.0f}%), {res['cpu_cores']:.1f} cores, "
          f"wait {res['wait_ms']:.2f} ms/step", flush=True)
    for line in (prof.advice if prof.data_bound else []):
        print("   advice:", line)
    return res


def synthetic(torch, device, a):
    """The same batch forever, already on the device."""
    x = torch.randn(a.batch_size, 3, a.size, a.size, device=device)
    x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (a.batch_size,), device=device)
    while True:
        yield x, y


def torch_loader(torch, torchvision, tree, workers, a, device):
    T = torchvision.transforms
    tf = T.Compose([T.RandomResizedCrop(a.size), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize(MEAN, STD)])
    ds = torchvision.datasets.ImageFolder(tree, transform=tf)
    kw = dict(persistent_workers=True, prefetch_factor=4) if workers > 0 else {}
    return torch.utils.data.DataLoader(ds, batch_size=a.batch_size, shuffle=True,
                                       num_workers=workers, pin_memory=device == "cuda",
                                       drop_last=True, **kw)


def stoker_loader(stk, workers, a, device):
    import stoker
    kw = {"device": device} if device == "cuda" else {}
    return stoker.Loader(stk, batch_size=a.batch_size, shuffle=True, num_workers=workers,
                         transforms="imagenet-train", drop_last=True, **kw)


def release(loader):
    """End a loader's workers before the next run (DataLoader workers are processes)."""
    if hasattr(loader, "close"):
        loader.close()
    it = getattr(loader, "_iterator", None)
    if it is not None and hasattr(it, "_shutdown_workers"):
        it._shutdown_workers()
    gc.collect()


# ---- report ----

def markdown(env, results, h2d):
    lines = [f"# ResNet-50 training input pipelines on {env.get('gpu', env['device'])}", "",
             f"torch {env['torch']}, torchvision {env['torchvision']}, {env['cpus']} CPUs, "
             f"batch {env['batch_size']}, {env['size']} px, up to {env['steps']} measured steps "
             f"(at most {env['max_seconds']:.0f} s) after {env['warmup']} warm-up, "
             f"{env['images']} JPEGs ({env['data']}).", ""]
    syn = next((r for r in results if r["run"] == "synthetic"), None)
    lines += ["| run | images/s | vs synthetic | GPU busy (profile) | GPU util (nvidia-smi) | "
              "CPU cores | wait ms/step | step ms | steps |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        smi = (r.get("nvidia_smi") or {}).get("util_pct")
        rel = f"{100 * r['images_per_s'] / syn['images_per_s']:.1f}%" if syn else "-"
        lines.append(f"| {r['run']} | {r['images_per_s']:.0f} | {rel} | "
                     f"{100 * r['gpu_busy']:.1f}% | {'-' if smi is None else f'{smi:.0f}%'} | "
                     f"{r['cpu_cores']:.1f} | {r['wait_ms']:.2f} | {r['step_ms']:.1f} | "
                     f"{r['profile'].get('steps', '-')} |")
    if h2d:
        lines += ["", "Pinned host-to-device copy ceiling (torch, non_blocking): " + ", ".join(
            f"{k} batch ({v['batch_mb']:.0f} MB) {v['gb_per_s']:.1f} GB/s" for k, v in h2d.items())]
    st = [r for r in results if r["run"].startswith("stoker") and r.get("loader_stats")]
    for r in st:
        s = r["loader_stats"]
        copy_s = s.get("copy_s") or s.get("copy_ns", 0) / 1e9  # device time of completed copies
        if copy_s and s.get("copied_bytes"):
            lines.append(f"{r['run']}: H2D {s['copied_bytes'] / copy_s / 1e9:.1f} GB/s while "
                         f"copying ({s.get('h2d_bytes', 0) / 1e9:.1f} GB in {s.get('copies', 0)} "
                         f"copies), pinned={s.get('pinned')}, finish={s.get('finish')}")
        if s.get("device_reason"):
            lines.append(f"{r['run']}: {s['device_reason']}")
    best_dl = max((r for r in results if r["run"].startswith("dataloader")),
                  key=lambda r: r["images_per_s"], default=None)
    best_st = max(st or [r for r in results if r["run"].startswith("stoker")],
                  key=lambda r: r["images_per_s"], default=None)
    if syn and best_st:
        ok = best_st["images_per_s"] >= 0.95 * syn["images_per_s"] and best_st["gpu_busy"] >= 0.95
        lines += ["", f"Goal (stoker within 5% of synthetic and >= 95% busy): "
                  f"{'met' if ok else 'not met'}."]
    if best_dl and best_st:
        lines.append(f"Cores: stoker {best_st['cpu_cores']:.1f} vs best DataLoader "
                     f"({best_dl['run']}) {best_dl['cpu_cores']:.1f}.")
    return "\n".join(lines) + "\n"


def main(argv=None):
    a = parse_args(argv)
    plan = [r for r in RUNS if r in a.only]
    if a.dry_run:
        print(json.dumps({"data": a.data, "steps": a.steps, "warmup": a.warmup,
                          "batch_size": a.batch_size, "device": a.device, "runs": plan,
                          "dataloader_workers": a.workers, "stoker_workers": a.stoker_workers,
                          "out": a.out}, indent=2))
        return 0
    import torch
    import torchvision
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device for torch here: run on the GPU machine, or --device cpu --tiny")
    os.makedirs(a.out, exist_ok=True)
    tree, stk = ensure_data(a)
    import stoker
    from stoker import _nvrtc
    nvrtc = _nvrtc.export()  # the NVRTC torch ships, before stoker loads one
    env = {"device": a.device, "torch": torch.__version__, "torchvision": torchvision.__version__,
           "cpus": os.cpu_count(), "python": platform.python_version(), "batch_size": a.batch_size,
           "size": a.size, "steps": a.steps, "warmup": a.warmup, "images": a.images,
           "max_seconds": a.max_seconds,
           "data": tree, "stoker_nvrtc": nvrtc, "host": platform.node()}
    smi = None
    if a.device == "cuda":
        env["gpu"] = torch.cuda.get_device_name()
        env["cuda"] = torch.version.cuda
        vis = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
        smi = Smi(vis if vis.isdigit() else 0)
    env["stoker_cuda"] = stoker.cuda_probe()[1]
    print(json.dumps(env), flush=True)
    trainer = Trainer(torch, torchvision, a.device)
    results, h2d = [], None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = os.path.join(a.out, f"results-{stamp}")

    def save():
        """Written after every run, so a run cut short still leaves the ones before it."""
        with open(base + ".json", "w") as f:
            json.dump({"env": env, "h2d_ceiling": h2d, "results": results}, f, indent=2,
                      default=str)
        md = markdown(env, results, h2d)
        with open(base + ".md", "w") as f:
            f.write(md)
        return md

    # Order: the ceilings, then stoker, then the DataLoader sweep (the longest part).
    try:
        if "h2d" in plan and a.device == "cuda":
            h2d = h2d_ceiling(torch, a.device, a.batch_size, a.size)
            print("-- h2d ceiling:", json.dumps(h2d), flush=True)
        if "synthetic" in plan:
            results.append(measure("synthetic", synthetic(torch, a.device, a), trainer, a, smi))
            save()
        if "stoker" in plan:
            for w in a.stoker_workers:
                ld = stoker_loader(stk, w, a, a.device)
                r = measure(f"stoker (num_workers={'auto' if w is None else w})", ld, trainer, a,
                            smi, {"num_workers": w})
                st = ld.stats()
                r["loader_stats"] = {k: v for k, v in st.items()
                                     if isinstance(v, (int, float, str, bool, type(None)))}
                print(f"   stoker: device {st.get('device')}, finish {st.get('finish')}, "
                      f"pinned {st.get('pinned')}, {st.get('active_threads')} threads", flush=True)
                if a.device == "cuda" and st.get("device_reason"):
                    print("   WARNING: stoker's own copy path is off:", st["device_reason"])
                results.append(r)
                release(ld)
                save()
        if "dataloader" in plan:
            for w in a.workers:
                dl = torch_loader(torch, torchvision, tree, w, a, a.device)
                results.append(measure(f"dataloader (num_workers={w})", dl, trainer, a, smi,
                                       {"num_workers": w}))
                release(dl)
                save()
    finally:
        if smi:
            smi.close()
    print(save())
    print(f"written: {base}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())

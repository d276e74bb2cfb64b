#!/usr/bin/env python3
"""Two builds of stoker side by side on the keyword-spotting recipe (bench_audio.py's), one
worker thread: the process CPU time per sample and the bytes read per sample, epochs 2+ (the
first epoch apart), alternating the builds round by round so that both see the same load.

    /usr/bin/python3 bench/audio_build_ab.py --base /tmp/base/build/python \\
        --new build/python [--data bench/data/audio_kws/wav] [--rounds 3] [--epochs 3]

--base and --new are directories holding a built `stoker` package (a build's build/python).
Each measurement runs in its own process. CPU time, not the wall clock: the machine is shared.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child(data, epochs, batch):
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import bench_audio  # noqa: E402  (the recipe: torchaudio's objects + RandomCrop)
    import stoker
    out = []
    with stoker.Loader(data, batch, shuffle=True, transforms=bench_audio.recipe(),
                       num_workers=1, output="numpy") as loader:
        for _ in range(epochs):
            c0, b0, n = time.process_time(), loader.stats()["bytes_read"], 0
            for b in loader:
                n += len(b["audio"])
            out.append({"cpu_us": (time.process_time() - c0) / n * 1e6,
                        "bytes": (loader.stats()["bytes_read"] - b0) / n})
    print(json.dumps(out))


def run(pkg, args):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(pkg))
    r = subprocess.run([sys.executable, __file__, "--child", "--data", args.data, "--epochs",
                        str(args.epochs), "--batch-size", str(args.batch_size)],
                       env=env, check=True, capture_output=True, text=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base")
    ap.add_argument("--new", default=os.path.join(ROOT, "build", "python"))
    ap.add_argument("--data", default=os.path.join(ROOT, "bench", "data", "audio_kws", "wav"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    if args.child:
        return child(args.data, args.epochs, args.batch_size)
    print(f"# {args.data}, {args.rounds} rounds of {args.epochs} epochs, batch "
          f"{args.batch_size}, 1 worker thread; load {os.getloadavg()[0]:.1f} at the start")
    print("| round | build | CPU us/sample, epoch 1 | epochs 2+ | bytes read/sample, epochs 2+ |")
    print("| --- | --- | ---: | ---: | ---: |")
    for r in range(args.rounds):
        for name, pkg in (("base", args.base), ("new", args.new)):
            e = run(pkg, args)
            later = e[1:] or e
            cpu = sum(x["cpu_us"] for x in later) / len(later)
            byt = sum(x["bytes"] for x in later) / len(later)
            print(f"| {r + 1} | {name} | {e[0]['cpu_us']:.0f} | {cpu:.0f} | {byt:,.0f} |",
                  flush=True)
    print(f"# load {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()

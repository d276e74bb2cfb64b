"""Bytes read per sample by the keyword-spotting recipe (bench_audio.recipe()) from a folder of
audio clips, its .stk pack and a WebDataset tar of it, each read in place (the default) and read
whole (STOKER_READ_WHOLE=1), epoch 1 and the later epochs apart (issue 27). Counts bytes, not
time: its figures do not depend on the machine's load.

    PYTHONPATH=build/python /usr/bin/python3 bench/audio_read_bytes.py bench/data/audio_kws/wav
"""
import argparse
import io
import os
import subprocess
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import bench_audio  # noqa: E402
import stoker  # noqa: E402


def make_tar(root, out):
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)
    classes = sorted({os.path.basename(os.path.dirname(f)) for f in files})
    with tarfile.open(out, "w") as t:
        for k, p in enumerate(files):
            cls = classes.index(os.path.basename(os.path.dirname(p)))
            for name, b in ((f"{k:06d}.wav", open(p, "rb").read()),
                            (f"{k:06d}.cls", str(cls).encode())):
                ti = tarfile.TarInfo(name)
                ti.size = len(b)
                t.addfile(ti, io.BytesIO(b))


def measure(data, epochs, whole):
    if whole:
        os.environ["STOKER_READ_WHOLE"] = "1"
    else:
        os.environ.pop("STOKER_READ_WHOLE", None)
    per = []
    with stoker.Loader(data, 64, transforms=bench_audio.recipe(), shuffle=True, seed=1,
                       num_workers=2, prefetch=1) as loader:
        before = 0
        for _ in range(epochs):
            count = sum(len(b["audio"]) for b in loader)
            now = loader.stats()["bytes_read"]
            per.append((now - before) / count)
            before = now
    return per


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--build", default="build")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="stk_bytes_")
    stk, tar = os.path.join(tmp, "kws.stk"), os.path.join(tmp, "kws.tar")
    subprocess.run([os.path.join(a.build, "stoker"), "pack", "--quiet", a.folder, stk], check=True)
    make_tar(a.folder, tar)
    print("| source | read | bytes/sample, epoch 1 | bytes/sample, epochs 2+ |")
    print("| --- | --- | ---: | ---: |")
    for name, data in (("folder", a.folder), (".stk", stk), ("tar", tar)):
        for whole in (True, False):
            per = measure(data, a.epochs, whole)
            later = sum(per[1:]) / len(per[1:])
            print(f"| {name} | {'whole' if whole else 'in place'} | {per[0]:,.0f} | {later:,.0f} |")


if __name__ == "__main__":
    main()

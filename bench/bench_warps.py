"""Cost per sample of the warps (RandomRotation, RandomAffine, the policies with BILINEAR),
AugMix, RandomOrder and the padding modes, stoker next to torchvision on the same JPEGs,
interleaved in one run (op by op: stoker, then torchvision, three rounds, best of each); and
torchvision's AugMix next to its TrivialAugmentWide.

stoker: gen_imgdump --bench's per-stage times for "rrc:224 flip OP norm:imagenet" minus the
same without OP (the pixel kernels' stage, plus the resample stage for the padding ops).
torchvision: the op alone on the 224x224 PIL image RandomResizedCrop gave (as Compose over
ImageFolder runs it), torch.set_num_threads(1).

    /usr/bin/python3 bench/bench_warps.py IMAGE_DIR [N]
IMAGE_DIR: JPEGs in class folders, e.g. bench/gen_images.py OUT --classes 2 --per-class 20
--profile imagenet.
"""
import glob
import json
import os
import subprocess
import sys
import time

import torch
import torchvision.transforms as T
from torchvision.transforms import InterpolationMode as IM
from PIL import Image

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(REPO, "build", "tests", "gen_imgdump")
paths = sorted(glob.glob(sys.argv[1] + "/*/*.jpg"))
n = int(sys.argv[2]) if len(sys.argv) > 2 else 300
torch.set_num_threads(1)
imgs = [T.RandomResizedCrop(224)(Image.open(p).convert("RGB")) for p in paths]
resized = [T.Resize(256)(Image.open(p).convert("RGB")) for p in paths]


def stoker_us(ops, base):
    """µs per sample of the kernels (+ resample) stages for `ops` inside `base`."""
    spec = base.replace("OP", ops)
    out = subprocess.run([TOOL, "--ops", spec, "--bench", str(n)] + paths, capture_output=True,
                         text=True, check=True).stdout
    us = json.loads(out)["us_per_img"]
    return us["jitter"] + us["resize"]


def tv_us(op, data):
    t0 = time.perf_counter()
    for k in range(n):
        op(data[k % len(data)])
    return (time.perf_counter() - t0) / n * 1e6


TRAIN = "rrc:224 flip OP norm:imagenet"
CROP = "resize:256 OP flip norm:imagenet"
# (name, stoker op tokens, its base, torchvision op, its input)
CASES = [
    ("RandomRotation(30) NEAREST", "RandomRotation:degrees=-30,30", TRAIN,
     T.RandomRotation(30), imgs),
    ("RandomRotation(30) BILINEAR", "RandomRotation:degrees=-30,30;interpolation=2", TRAIN,
     T.RandomRotation(30, IM.BILINEAR), imgs),
    ("RandomRotation(30, fill=(124,116,104))",
     "RandomRotation:degrees=-30,30;fill=124,116,104", TRAIN,
     T.RandomRotation(30, fill=(124, 116, 104)), imgs),
    ("RandomAffine(15, (0.1,0.1), (0.9,1.1), 10) NEAREST",
     "RandomAffine:degrees=-15,15;translate=0.1,0.1;scale=0.9,1.1;shear=-10,10,0,0", TRAIN,
     T.RandomAffine(15, (0.1, 0.1), (0.9, 1.1), 10), imgs),
    ("RandomAffine(15, (0.1,0.1), (0.9,1.1), 10) BILINEAR",
     "RandomAffine:degrees=-15,15;translate=0.1,0.1;scale=0.9,1.1;shear=-10,10,0,0;"
     "interpolation=2", TRAIN,
     T.RandomAffine(15, (0.1, 0.1), (0.9, 1.1), 10, IM.BILINEAR), imgs),
    ("TrivialAugmentWide BILINEAR, fill 128", "TrivialAugmentWide:interpolation=2;"
     "fill=128,128,128", TRAIN, T.TrivialAugmentWide(interpolation=IM.BILINEAR, fill=128),
     imgs),
    ("AugMix() (BILINEAR warps)", "AugMix", TRAIN, T.AugMix(), imgs),
    ("AugMix(interpolation=NEAREST)", "AugMix:interpolation=0", TRAIN,
     T.AugMix(interpolation=IM.NEAREST), imgs),
    ("RandomOrder([Invert(1), Equalize(1)])", "RandomOrder:transforms=2 invert:1 equalize:1",
     TRAIN, T.RandomOrder([T.RandomInvert(1.0), T.RandomEqualize(1.0)]), imgs),
    ("RandomCrop(224, 4, fill=(124,116,104)) after Resize(256)",
     "RandomCrop:size=224,224;padding=4,4,4,4;fill=124,116,104", CROP,
     T.RandomCrop(224, 4, fill=(124, 116, 104)), resized),
    ("RandomCrop(224, 4, padding_mode='reflect') after Resize(256)",
     "RandomCrop:size=224,224;padding=4,4,4,4;padding_mode=2", CROP,
     T.RandomCrop(224, 4, padding_mode="reflect"), resized),
    ("RandomCrop(224, 4) (zero fill, for reference) after Resize(256)",
     "rcrop:224,224,4,4,4,4", CROP, T.RandomCrop(224, 4), resized),
]

base_train = base_crop = float("inf")
results = {name: [float("inf"), float("inf")] for name, *_ in CASES}
policy = {"AugMix()": float("inf"), "AugMix(all_ops=False)": float("inf"),
          "TrivialAugmentWide()": float("inf")}
for rnd in range(3):
    base_train = min(base_train, stoker_us("", TRAIN.replace(" OP", "")))
    base_crop = min(base_crop, stoker_us("ccrop:224", CROP))
    for name, ops, base, op, data in CASES:
        results[name][0] = min(results[name][0], stoker_us(ops, base))
        results[name][1] = min(results[name][1], tv_us(op, data))
    for name, op in (("AugMix()", T.AugMix()), ("AugMix(all_ops=False)", T.AugMix(all_ops=False)),
                     ("TrivialAugmentWide()", T.TrivialAugmentWide())):
        policy[name] = min(policy[name], tv_us(op, imgs))
print(f"# {len(paths)} images, {n} samples per measurement, best of 3 interleaved rounds")
print(f"# stoker base (kernels + resample stages): imagenet-train {base_train:.1f} us, "
      f"Resize(256)+CenterCrop(224) {base_crop:.1f} us")
print("| op | stoker us/sample | torchvision us/call |")
print("| --- | ---: | ---: |")
for name, ops, base, op, data in CASES:
    ref = base_train if base is TRAIN else base_crop
    s, t = results[name]
    print(f"| {name} | {s - ref:.0f} | {t:.0f} |")
print("| torchvision policy on the 224x224 PIL image | | us/call |")
for name, us in policy.items():
    print(f"| {name} | | {us:.0f} |")

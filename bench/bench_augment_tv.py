"""torchvision's cost for the augmentation ops stoker has, on the 224x224 output of
RandomResizedCrop (PIL path, as transforms.Compose over ImageFolder runs them; RandomErasing on
the normalised tensor), in µs per call, best of 3 rounds of N calls.

    /usr/bin/python3 bench/bench_augment_tv.py IMAGE_DIR [N]
"""
import glob
import sys
import time

import torch
import torchvision.transforms as T
from PIL import Image

paths = sorted(glob.glob(sys.argv[1] + "/*/*.jpg"))
n = int(sys.argv[2]) if len(sys.argv) > 2 else 300
torch.set_num_threads(1)
imgs = [T.RandomResizedCrop(224)(Image.open(p).convert("RGB")) for p in paths]
tensors = [T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))(T.ToTensor()(i))
           for i in imgs]
OPS = [("gray", T.Grayscale(3), imgs), ("rgray:1", T.RandomGrayscale(1.0), imgs),
       ("invert:1", T.RandomInvert(1.0), imgs), ("posterize:4,1", T.RandomPosterize(4, 1.0), imgs),
       ("solarize:128,1", T.RandomSolarize(128, 1.0), imgs),
       ("sharp:2,1", T.RandomAdjustSharpness(2, 1.0), imgs),
       ("autocontrast:1", T.RandomAutocontrast(1.0), imgs),
       ("equalize:1", T.RandomEqualize(1.0), imgs),
       ("blur:5,5,1.0,2.0", T.GaussianBlur(5, (1.0, 2.0)), imgs),
       ("blur:23,23,1.0,2.0", T.GaussianBlur(23, (1.0, 2.0)), imgs),
       ("ta", T.TrivialAugmentWide(), imgs), ("ra:2,9", T.RandAugment(), imgs),
       ("aa", T.AutoAugment(), imgs),
       ("erase:1", T.RandomErasing(1.0), tensors),
       ("rcrop", T.RandomCrop(224, padding=4), imgs)]
for name, op, data in OPS:
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for k in range(n):
            op(data[k % len(data)])
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    print(f"{name} {best:.1f}")

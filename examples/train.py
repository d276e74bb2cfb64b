#!/usr/bin/env python3
"""Train torchvision's ResNet-18 on a generated ImageFolder dataset, fed by stoker or by
torch.utils.data.DataLoader, and report throughput and how long each step waited for data.

    PYTHONPATH=build/python /usr/bin/python3 examples/train.py --loader stoker
    PYTHONPATH=build/python /usr/bin/python3 examples/train.py --loader torch

On first use it generates photo-like JPEGs with bench/gen_images.py (10 classes x 100 images by
default, ~57 KB each) into WORK/images and packs them into WORK/train/ with `build/stoker pack`
(or stoker.pack_image_folder when the CLI is not built). Both loaders apply the same
torchvision transforms (RandomResizedCrop(SIZE) + RandomHorizontalFlip + ToTensor + Normalize):
stoker maps them onto its C ops and runs them on its worker threads; the torch loader runs them
with PIL in worker processes over torchvision.datasets.ImageFolder.

Per epoch it prints samples/s, the fraction of the epoch the training step spent waiting for the
next batch ("data wait"), the mean loss and the training accuracy.
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
import torchvision
import torchvision.transforms as TV

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def prepare(args):
    """Generate the images (once) and pack them (once); returns (image dir, packed dir)."""
    images = os.path.join(args.work, "images")
    packed = os.path.join(args.work, "train")
    if not os.path.isdir(images):
        gen = os.path.join(REPO, "bench", "gen_images.py")
        if os.path.exists(gen):
            subprocess.run([sys.executable, gen, images + ".tmp", "--classes", str(args.classes),
                            "--per-class", str(args.per_class), "--profile", "small"],
                           check=True)
        else:
            fallback_images(images + ".tmp", args.classes, args.per_class)
        os.rename(images + ".tmp", images)
    if not os.path.isdir(packed):
        cli = os.path.join(REPO, "build", "stoker")
        if os.access(cli, os.X_OK):
            subprocess.run([cli, "pack", images, packed + ".tmp", "--quiet"], check=True)
        else:
            import stoker
            stoker.pack_image_folder(images, packed + ".tmp")
        os.rename(packed + ".tmp", packed)
    return images, packed


def fallback_images(out, classes, per_class):
    """Simple photo-like JPEGs with PIL (used only if bench/gen_images.py is missing)."""
    import numpy as np
    from PIL import Image, ImageDraw
    rng = np.random.default_rng(0)
    for c in range(classes):
        os.makedirs(os.path.join(out, f"class_{c:03d}"), exist_ok=True)
        for i in range(per_class):
            w, h = (500, 375) if i % 3 else (375, 500)
            yy, xx = np.mgrid[0:h, 0:w]
            base = np.stack([xx * 200 // w + 30 * (c % 3), yy * 200 // h + 20 * (c % 5),
                             (xx + yy) * 100 // (w + h) + 15 * c], -1).astype(np.float32)
            img = Image.fromarray(np.clip(base + rng.normal(0, 8, base.shape), 0, 255)
                                  .astype(np.uint8))
            d = ImageDraw.Draw(img)
            for _ in range(4):
                x0, y0 = int(rng.integers(0, w - 40)), int(rng.integers(0, h - 40))
                d.ellipse([x0, y0, x0 + 60, y0 + 40], fill=tuple(int(v) for v in
                                                                rng.integers(0, 256, 3)))
            img.save(os.path.join(out, f"class_{c:03d}", f"img_{i:05d}.jpg"), quality=85)


def make_loader(args, images, packed, transform):
    if args.loader == "stoker":
        import stoker
        loader = stoker.Loader(packed, args.batch_size, shuffle=True, seed=args.seed,
                               drop_last=True, num_workers=args.workers, transforms=transform)
        classes = loader.dataset.classes
        return loader, len(classes), (lambda b: (b["image"], b["label"]))
    dataset = torchvision.datasets.ImageFolder(images, transform=transform)
    g = torch.Generator()
    g.manual_seed(args.seed)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=args.batch_size, shuffle=True, drop_last=True, generator=g,
        num_workers=args.workers, persistent_workers=args.workers > 0)
    return loader, len(dataset.classes), (lambda b: (b[0], b[1]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--loader", choices=["stoker", "torch"], default="stoker")
    ap.add_argument("--work", default=os.path.join(REPO, "bench", "data", "train_example"),
                    help="where the generated images and the packed shards go")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--per-class", type=int, default=100)
    ap.add_argument("--size", type=int, default=96, help="training resolution (px)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=0, help="stop each epoch after this many "
                    "steps (0: the whole epoch)")
    ap.add_argument("--workers", type=int, default=os.cpu_count(),
                    help="stoker worker threads / DataLoader worker processes")
    ap.add_argument("--torch-threads", type=int, default=0,
                    help="torch.set_num_threads for the model (0: torch's default)")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fresh", action="store_true", help="regenerate the data")
    args = ap.parse_args()

    if args.fresh and os.path.isdir(args.work):
        shutil.rmtree(args.work)
    images, packed = prepare(args)
    torch.manual_seed(args.seed)
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    transform = TV.Compose([TV.RandomResizedCrop(args.size), TV.RandomHorizontalFlip(),
                            TV.ToTensor(), TV.Normalize(MEAN, STD)])
    loader, n_classes, unpack = make_loader(args, images, packed, transform)
    model = torchvision.models.resnet18(num_classes=n_classes)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-5)
    print(f"{args.loader}: resnet18, {n_classes} classes, {args.size}px, batch "
          f"{args.batch_size}, {args.workers} workers, {torch.get_num_threads()} torch threads, "
          f"{len(loader)} steps/epoch")
    for epoch in range(args.epochs):
        t_start = time.perf_counter()
        wait = 0.0
        seen = correct = steps = 0
        loss_sum = 0.0
        batch = x = y = out = loss = None
        it = iter(loader)
        while True:
            t0 = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                break
            x, y = unpack(batch)
            wait += time.perf_counter() - t0
            out = model(x)
            loss = F.cross_entropy(out, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            seen += len(y)
            correct += int((out.argmax(1) == y).sum())
            loss_sum += float(loss) * len(y)
            steps += 1
            if args.steps and steps >= args.steps:
                break
        del it, batch, x, y, out, loss
        elapsed = time.perf_counter() - t_start
        print(f"epoch {epoch}: {seen} samples in {elapsed:.1f} s = {seen / elapsed:.1f} "
              f"samples/s, data wait {100 * wait / elapsed:.1f}% of the time, "
              f"loss {loss_sum / max(seen, 1):.3f}, train acc {100 * correct / max(seen, 1):.1f}%",
              flush=True)
    if args.loader == "stoker":
        st = loader.stats()
        print(f"stoker: {st['batches']} batches, {st['bytes_read'] / 1e6:.1f} MB read, "
              f"{st['skipped']} skipped, {st['errors']} errors")
        loader.close()


if __name__ == "__main__":
    main()

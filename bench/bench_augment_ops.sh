#!/bin/bash
# Cost of each augmentation op on top of imagenet-train (RandomResizedCrop(224) + flip +
# Normalize), in µs per sample, from gen_imgdump --bench's per-stage times (best of 3 runs of N
# samples): the pixel ops' kernels are the "jitter" stage, RandomErasing runs in the "store"
# stage, RandomCrop/Pad are folded into the resample (the "resize" stage).
#   bash bench/bench_augment_ops.sh IMAGE_DIR [N]
# IMAGE_DIR: JPEGs, e.g. from bench/gen_images.py --profile imagenet.
cd "$(dirname "$0")/.." || exit 1
IMGS=$(find "$1" -name '*.jpg' | sort)
N=${2:-300}
stage() { # ops -> "jitter store resize" µs/sample, best of 3
    for rep in 1 2 3; do
        build/tests/gen_imgdump --ops "$1" --bench "$N" $IMGS
    done | /usr/bin/python3 -c '
import json, sys
runs = [json.loads(l)["us_per_img"] for l in sys.stdin]
print(" ".join("%.1f" % min(r[k] for r in runs) for k in ("jitter", "store", "resize")))'
}
base=$(stage "rrc:224 flip norm:imagenet")
echo "base (jitter store resize): $base"
for op in gray rgray:1 invert:1 posterize:4,1 solarize:128,1 sharp:2,1 autocontrast:1 \
    equalize:1 blur:5,5,1.0,2.0 blur:23,23,1.0,2.0 ta ra:2,9 aa; do
    echo "$op $(stage "rrc:224 flip $op norm:imagenet")"
done
echo "erase:1 $(stage "rrc:224 flip norm:imagenet erase:1")"
echo "rcrop $(stage "resize:256 rcrop:224,224,4,4,4,4 flip norm:imagenet") vs ccrop $(stage "resize:256 ccrop:224 flip norm:imagenet")"

#!/usr/bin/env bash
# `make demo`: see stoker work on a dataset the repo generates itself (nothing downloaded):
# photo-like JPEGs in an ImageFolder tree -> `stoker pack` -> inspect / verify -> the image
# benchmark side by side with PyTorch's DataLoader and the decode-only ceiling.
set -euo pipefail
build=${1:-build}
out=${DEMO_OUT:-bench/out}
images=${DEMO_IMAGES:-1000}
py=/usr/bin/python3
tree="$out/jpeg_small_$images"
mkdir -p "$out"
echo "== 1. generate $images photo-like JPEGs (bench/gen_images.py)"
[ -d "$tree" ] || $py bench/gen_images.py "$tree" --classes 10 --per-class $((images / 10))
echo "== 2. pack them: $build/stoker pack $tree $tree.stk"
[ -f "$tree.stk" ] || "$build/stoker" pack "$tree" "$tree.stk"
echo "== 3. $build/stoker inspect $tree.stk"
"$build/stoker" inspect "$tree.stk"
echo "== 4. $build/stoker verify $tree.stk"
"$build/stoker" verify "$tree.stk"
echo "== 5. imagenet-train: PyTorch DataLoader vs stoker vs the decode-only ceiling"
$py bench/bench_images.py --images "$images" --workers 0,1,2 --out "$out"

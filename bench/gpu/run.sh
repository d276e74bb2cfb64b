#!/usr/bin/env bash
# The H100 benchmark in one command (docs/gpu.md): build stoker for the Python that has CUDA
# torch, then generate ImageNet-like JPEGs, pack them and train ResNet-50 with each input
# pipeline (bench/gpu/train_resnet50.py; its options pass through, e.g. --steps 500).
# Results: bench/gpu/out/results-*.json and .md.
#
#   bash bench/gpu/run.sh                      # PYTHON=/path/to/python3 to pick the interpreter
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-$(command -v python3)}
"$PYTHON" -c 'import torch, torchvision; assert torch.cuda.is_available(), "torch has no CUDA device"' || {
    echo "bench/gpu: $PYTHON needs torch and torchvision with a CUDA device (set PYTHON=...)" >&2
    exit 1
}
make -j"$(nproc)" all PYTHON="$PYTHON"
# `make test-gpu` first: the GPU path's own checks (copies, poison, finishing) on this device.
make test-gpu || { rc=$?; [ $rc -eq 77 ] || exit $rc; }
exec env PYTHONPATH="$PWD/build/python${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" \
    bench/gpu/train_resnet50.py "$@"

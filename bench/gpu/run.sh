#!/usr/bin/env bash
# The H100 benchmark in one command (docs/gpu.md): build stoker for the Python that has CUDA
# torch, run the GPU tests, then generate ImageNet-like JPEGs, pack them and train ResNet-50 with
# each input pipeline (bench/gpu/train_resnet50.py; its options pass through, e.g. --steps 500).
# Results and this script's log: bench/gpu/out/ (or --out DIR): results-*.json, results-*.md,
# run.log. Every stage runs even when an earlier check failed (GPU time is scarce); the exit
# status is then 1.
#
#   bash bench/gpu/run.sh                      # PYTHON=/path/to/python3 to pick the interpreter
#   bash bench/gpu/run.sh --out "$OUT"         # results where the device tool brings them back
#   bash bench/gpu/run.sh --device cpu --tiny  # the whole script without a GPU, in a minute
#
# Build dependencies: when bench/gpu/deps/ holds the Debian packages (bench/gpu/fetch_deps.sh,
# run where an archive is reachable), they are unpacked into build/gpu-sysroot/ and stoker is
# built and linked against them (rpath); otherwise the machine's own (pkg-config) are used.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
PYTHON=${PYTHON:-$(command -v python3)}
out=bench/gpu/out device=cuda
prev=
for arg in "$@"; do
    case $prev in --out) out=$arg ;; --device) device=$arg ;; esac
    case $arg in --out=*) out=${arg#--out=} ;; --device=*) device=${arg#--device=} ;; esac
    prev=$arg
done
mkdir -p "$out" || exit 1
exec > >(tee -a "$out/run.log") 2>&1
failed=()
phase() { echo "== run.sh [$(date +%H:%M:%S), +${SECONDS}s] $*"; }

phase "python: $PYTHON"
"$PYTHON" - "$device" <<'PY' || exit 1
import sys
try:
    import torch, torchvision
except ImportError as e:
    sys.exit(f"bench/gpu: {sys.executable} needs torch and torchvision ({e}); set PYTHON=...")
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), torchvision {torchvision.__version__}")
if sys.argv[1] == "cuda" and not torch.cuda.is_available():
    sys.exit("bench/gpu: torch has no CUDA device here (use --device cpu --tiny for a smoke run)")
PY
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total \
    --format=csv,noheader

# ---- build dependencies: the carried Debian packages, unpacked beside the build ----
MAKE=(make)
shopt -s nullglob
debs=(bench/gpu/deps/*.deb)
if [ ${#debs[@]} -gt 0 ]; then
    sys=$ROOT/build/gpu-sysroot
    phase "unpacking ${#debs[@]} packages from bench/gpu/deps into $sys"
    rm -rf "$sys" && mkdir -p "$sys"
    for f in "${debs[@]}"; do dpkg -x "$f" "$sys" || exit 1; done
    # Absolute links (zlib1g-dev's libz.so -> /lib/...) point into the sysroot instead.
    find "$sys" -type l -lname '/*' | while read -r l; do ln -sfn "$sys$(readlink "$l")" "$l"; done
    lib=$sys/usr/lib/x86_64-linux-gnu
    # RPATH (not RUNPATH: --disable-new-dtags) so that the libraries these link (libcurl's
    # krb5, nghttp2, ...) also come from the sysroot, not from the image's own versions.
    cflags="-I$sys/usr/include -I$sys/usr/include/x86_64-linux-gnu -I$sys/usr/include/hdf5/serial"
    libs="-lturbojpeg -lspng -lxxhash -lwebp -ltiff -L$lib/hdf5/serial -lhdf5 -llmdb -lcurl"
    libs+=" -lcrypto -lz"
    MAKE=(make "PKG_CFLAGS=$cflags" "PKG_LIBS=$libs"
          "EXTRA_LDFLAGS=-L$lib -Wl,--disable-new-dtags -Wl,-rpath,$lib:$sys/lib/x86_64-linux-gnu")
    command -v make >/dev/null || MAKE[0]=$sys/usr/bin/make
elif ! pkg-config --exists libturbojpeg spng libxxhash libwebp libtiff-4 hdf5 lmdb libcurl \
        libcrypto zlib 2>/dev/null; then
    echo "bench/gpu: libturbojpeg, libspng, libxxhash, libwebp, libtiff, hdf5, lmdb, libcurl," \
         "libcrypto or zlib missing here and" \
         "bench/gpu/deps is" \
         "empty: run bench/gpu/fetch_deps.sh where a Debian archive is reachable, carry it" >&2
    exit 1
fi

phase "build"
"${MAKE[@]}" -j"$(nproc)" all PYTHON="$PYTHON" || exit 1
export PYTHONPATH=$ROOT/build/python${PYTHONPATH:+:$PYTHONPATH}
# NVRTC for the finishing kernel (and the GPU tests' slow-copy kernel): the one torch ships.
if [ -z "${STOKER_NVRTC:-}" ]; then
    nvrtc=$("$PYTHON" -c 'import torch; from stoker import _nvrtc; print(_nvrtc.find() or "")')
    [ -n "$nvrtc" ] && export STOKER_NVRTC=$nvrtc
fi
echo "STOKER_NVRTC=${STOKER_NVRTC:-(not found: the loader searches the linker path)}"

if [ "$device" = cuda ]; then
    # The GPU path's own checks on this device: copies under load, poison, stream ordering,
    # finishing equal to the CPU's (then again under compute-sanitizer), and the Python path.
    phase "make test-gpu"
    "${MAKE[@]}" test-gpu PYTHON="$PYTHON"; rc=$?
    [ $rc -eq 0 ] || failed+=("make test-gpu (exit $rc)")
    phase "pytest python/tests/test_device_cuda.py"
    "$PYTHON" -m pytest -q -p no:cacheprovider python/tests/test_device_cuda.py; rc=$?
    [ $rc -eq 0 ] || failed+=("test_device_cuda.py (exit $rc)")
fi

phase "train_resnet50.py $*"
"$PYTHON" bench/gpu/train_resnet50.py "$@"; rc=$?
[ $rc -eq 0 ] || failed+=("train_resnet50.py (exit $rc)")

phase "done"
if [ ${#failed[@]} -gt 0 ]; then
    echo "run.sh: FAILED: ${failed[*]}"
    exit 1
fi
echo "run.sh: all stages passed; results in $out"

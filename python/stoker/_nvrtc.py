"""Find an NVRTC for the finishing kernel when $STOKER_NVRTC is not set.

The C library opens NVRTC with dlopen (src/cuda/stk_cuda.c): $STOKER_NVRTC, else the sonames
on the linker path, else /usr/local/cuda. A pip-installed PyTorch carries its own NVRTC in the
nvidia-* wheels (site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12 for CUDA 12,
site-packages/nvidia/cu13/lib/libnvrtc.so.13 for CUDA 13) or in torch/lib, none of which is on
the linker path; this finds it, preferring the CUDA major version torch was built with (an
NVRTC newer than the driver makes PTX the driver refuses).
"""
import glob
import os
import sys

_PATTERNS = ("nvidia/cuda_nvrtc/lib/libnvrtc.so*", "nvidia/*/lib/libnvrtc.so*",
             "torch/lib/libnvrtc*.so*")


def candidates(paths=None):
    """Every NVRTC library under the import path, in search order."""
    seen, found = set(), []
    for p in sys.path if paths is None else paths:
        for pattern in _PATTERNS:
            for hit in sorted(glob.glob(os.path.join(p or ".", pattern))):
                name = os.path.basename(hit)
                if "builtins" in name or "alt" in name or hit in seen:
                    continue  # libnvrtc-builtins is not the compiler
                seen.add(hit)
                found.append(hit)
    return found


def find(cuda_version=None, paths=None):
    """The NVRTC library to use, or None: $STOKER_NVRTC when set, else the bundled copy whose
    major version matches `cuda_version` (default: torch.version.cuda when torch is loaded)."""
    env = os.environ.get("STOKER_NVRTC")
    if env:
        return env
    hits = candidates(paths)
    if not hits:
        return None
    if cuda_version is None:
        torch = sys.modules.get("torch")
        cuda_version = getattr(getattr(torch, "version", None), "cuda", None)
    if cuda_version:
        major = str(cuda_version).split(".")[0]
        same = [h for h in hits if f".so.{major}" in os.path.basename(h) or f"/cu{major}/" in h]
        if same:
            return same[0]
    return hits[0]


def export():
    """Set $STOKER_NVRTC from find() if unset (before the first device loader: the C library
    opens NVRTC once per process). Returns the path or None."""
    path = find()
    if path and not os.environ.get("STOKER_NVRTC"):
        os.environ["STOKER_NVRTC"] = path
    return path

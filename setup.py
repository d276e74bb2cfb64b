"""Build and install the stoker Python package from source:

    /usr/bin/python3 -m pip install --no-build-isolation .

The extension stoker._core is compiled from python/stoker/_ext/*.c together with the library's
sources (src/*/*.c, src/*/*/*.c) and the command line's (cli/*.c but its main.c), so nothing
needs to be built first and no shared libstoker is needed at run time. The `stoker` command it
installs (and `python3 -m stoker`) runs that command line: the same code as `make`'s
build/stoker. Build dependencies are the Debian packages of scripts/deps.sh (libturbojpeg0-dev,
libjpeg62-turbo-dev, libspng-dev, libxxhash-dev, python3-dev); numpy is the only Python
dependency (torch is optional: without it batches are numpy arrays).
"""
import glob
import os
import re
import subprocess

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
os.chdir(HERE)  # sources are given relative to the repository root

PKGS = ["libturbojpeg", "spng", "libxxhash", "libwebp", "libtiff-4", "hdf5", "lmdb"]
PKGS += ["libcurl", "libcrypto"]  # remote byte sources (issue 14)
PKGS += ["zlib"]  # gzipped WebDataset members (issue 12)
# Audio (issue 27), optional as in the Makefile: each library found joins with STK_HAVE_<NAME>.
AUDIO_LIBS = [("sndfile", "SNDFILE"), ("libmpg123", "MPG123"), ("fftw3f", "FFTW")]


def _have(pkg):
    try:
        return subprocess.call(["pkg-config", "--exists", pkg]) == 0
    except OSError:
        return False


AUDIO_HAVE = [(p, d) for p, d in AUDIO_LIBS if _have(p)]
PKGS += [p for p, _ in AUDIO_HAVE]
# Video (issue 28), optional as in the Makefile: all four libraries, or none (STK_HAVE_AVCODEC).
VIDEO_PKGS = ["libavformat", "libavcodec", "libavutil", "libswscale"]
VIDEO_HAVE = all(_have(p) for p in VIDEO_PKGS)
PKGS += VIDEO_PKGS if VIDEO_HAVE else []


def pkg_config(flag):
    try:
        return subprocess.check_output(["pkg-config", flag] + PKGS, text=True).split()
    except (OSError, subprocess.CalledProcessError):
        # pkg-config missing: Debian's default locations need no flags
        return [] if flag == "--cflags" else ["-lturbojpeg", "-lspng", "-lxxhash"]


def version():
    with open("include/stoker.h") as f:
        return re.search(r'#define STK_VERSION_STRING "([^"]+)"', f.read()).group(1)


core = Extension(
    "stoker._core",
    sources=sorted(glob.glob("python/stoker/_ext/*.c")) + sorted(glob.glob("src/*/*.c")) +
    sorted(glob.glob("src/*/*/*.c")) + sorted(set(glob.glob("cli/*.c")) - {"cli/main.c"}),
    depends=sorted(glob.glob("python/stoker/_ext/*.h") + glob.glob("src/*.h") +
                   glob.glob("src/*/*.h") + glob.glob("src/*/*/*.h") + glob.glob("cli/*.h") +
                   ["include/stoker.h"]),
    include_dirs=["include", "src", "cli"],
    # the library's sources are compiled here as the Makefile compiles libstoker
    # (STK_BUILDING_LIBRARY: its internal header uses the building blocks of include/stoker.h)
    extra_compile_args=["-std=c11", "-D_GNU_SOURCE", "-pthread", "-fvisibility=hidden",
                        "-DSTK_BUILDING_LIBRARY", "-Wno-missing-prototypes"] + pkg_config("--cflags") +
    ["-DSTK_HAVE_" + d for _, d in AUDIO_HAVE] + (["-DSTK_HAVE_AVCODEC"] if VIDEO_HAVE else []),
    extra_link_args=pkg_config("--libs") + ["-ljpeg", "-lpthread", "-ldl", "-lm"],
)

os.makedirs("build/setuptools", exist_ok=True)
setup(
    name="stoker",
    version=version(),
    description="A training-data loader written in C, with a PyTorch front end",
    license="see repository",
    python_requires=">=3.9",
    package_dir={"": "python"},
    packages=["stoker", "stoker.transforms"],
    ext_modules=[core],
    install_requires=["numpy"],
    entry_points={"console_scripts": ["stoker = stoker.__main__:main"]},
    extras_require={"torch": ["torch"]},
    # the ~100 C files compiled on every core (pip gives setuptools no -j of its own)
    options={"build": {"build_base": "build/setuptools"},
             "build_ext": {"parallel": os.cpu_count() or 1},
             "egg_info": {"egg_base": "build/setuptools"}},
)

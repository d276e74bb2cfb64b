#!/usr/bin/env bash
# Download the Debian packages stoker builds against (libjpeg-turbo, libspng, libwebp, libtiff and
# the libraries libtiff links, xxhash, and make)
# into bench/gpu/deps/, for a machine that has no package archive: the GPU machine, whose image
# is not this Debian and which reaches no network. bench/gpu/run.sh unpacks them into
# build/gpu-sysroot/ (never into /) and builds and links stoker against them (with an rpath), so
# the GPU figures use the same libjpeg-turbo as the CPU figures in bench/RESULTS.md.
#
#   bash bench/gpu/fetch_deps.sh          # here, once; then carry bench/gpu/deps to the machine
set -euo pipefail
cd "$(dirname "$0")"
pkgs=(libturbojpeg0 libturbojpeg0-dev libjpeg62-turbo libjpeg62-turbo-dev libspng0 libspng-dev
      libwebp7 libwebp-dev libtiff6 libtiff-dev libdeflate0 libjbig0 liblerc4 libzstd1 liblzma5
      libxxhash0 libxxhash-dev make)
rm -rf deps.tmp && mkdir deps.tmp
if ! (cd deps.tmp && apt-get download "${pkgs[@]}"); then
    apt-get update -q
    (cd deps.tmp && apt-get download "${pkgs[@]}")
fi
rm -rf deps && mv deps.tmp deps
echo "fetch_deps: $(ls deps | wc -l) packages in bench/gpu/deps ($(du -sh deps | cut -f1))"

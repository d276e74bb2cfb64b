#!/usr/bin/env bash
# Download the Debian packages stoker builds against (libjpeg-turbo, libspng, libwebp, libtiff and
# the libraries libtiff links, xxhash, HDF5, LMDB, libcurl with OpenSSL and the libraries libcurl
# links, zlib, and make)
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
# The formats and remote reads (issues 12 and 14): HDF5, LMDB, libcurl + OpenSSL, zlib, and what
# libcurl and libhdf5 link (Debian 12's sonames; the GPU image's may differ or be absent).
pkgs+=(libhdf5-103-1 libhdf5-dev libsz2 libaec0 liblmdb0 liblmdb-dev libcurl4 libcurl4-openssl-dev
       libssl3 libssl-dev zlib1g zlib1g-dev libbrotli1 libgssapi-krb5-2 libidn2-0 libldap-2.5-0
       libnghttp2-14 libpsl5 librtmp1 libssh2-1 libkrb5-3 libk5crypto3 libcom-err2
       libkrb5support0 libkeyutils1 libsasl2-2 libsasl2-modules-db libdb5.3 libgnutls30
       libhogweed6 libnettle8 libgmp10 libp11-kit0 libtasn1-6 libunistring2 libffi8)
rm -rf deps.tmp && mkdir deps.tmp
if ! (cd deps.tmp && apt-get download "${pkgs[@]}"); then
    apt-get update -q
    (cd deps.tmp && apt-get download "${pkgs[@]}")
fi
rm -rf deps && mv deps.tmp deps
echo "fetch_deps: $(ls deps | wc -l) packages in bench/gpu/deps ($(du -sh deps | cut -f1))"

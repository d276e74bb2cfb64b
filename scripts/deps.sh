#!/usr/bin/env bash
# Install the Debian packages stoker builds and tests with, if any is missing. Idempotent:
# with everything present it only runs dpkg-query.
set -eu
pkgs=(gcc g++ make pkg-config clang libclang-rt-14-dev clang-format libturbojpeg0-dev
      libjpeg62-turbo-dev libspng-dev libwebp-dev libtiff-dev libxxhash-dev python3-dev
      python3-numpy python3-pytest python3-pytest-timeout python3-torch python3-torchvision
      python3-pil)
pkgs+=(libhdf5-dev python3-h5py)
pkgs+=(liblmdb-dev python3-lmdb)
pkgs+=(libcurl4-openssl-dev libssl-dev nodejs)  # remote byte sources (issue 14); s3rver tests
pkgs+=(zlib1g-dev)  # gzipped WebDataset members (issue 12)
missing=()
for p in "${pkgs[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [ "$status" = "install ok installed" ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"

#!/usr/bin/env bash
# Install the Debian packages stoker builds and tests with, if any is missing. Idempotent:
# with everything present it only runs dpkg-query.
#
# Another package manager at work (unattended-upgrades on a fresh cloud machine, a second
# `make`) holds apt's locks: we wait for them, saying which lock and which process, for at most
# STK_APT_LOCK_WAIT seconds (default 600), then fail naming them. The wait reads /proc/locks
# (apt and dpkg hold fcntl locks, which flock(1) cannot probe); apt-get itself also waits for the
# dpkg locks (DPkg::Lock::Timeout), in case another process takes them between our check and it.
# For tests: STK_APT_LOCKS (the lock files to watch), STK_DEPS_MISSING (packages to treat as
# missing) and STK_DEPS_DRY_RUN=1 (print the apt-get commands instead of running them).
set -eu
pkgs=(gcc g++ make pkg-config clang libclang-rt-14-dev clang-format libturbojpeg0-dev
      libjpeg62-turbo-dev libspng-dev libwebp-dev libtiff-dev libxxhash-dev python3-dev
      python3-numpy python3-pytest python3-pytest-timeout python3-torch python3-torchvision
      python3-pil)
pkgs+=(libhdf5-dev python3-h5py)
pkgs+=(liblmdb-dev python3-lmdb)
pkgs+=(libcurl4-openssl-dev libssl-dev nodejs)  # remote byte sources (issue 14); s3rver tests
pkgs+=(zlib1g-dev)  # gzipped WebDataset members (issue 12)
# audio (issue 27): decoders and FFT; torchaudio, espeak-ng, sox and ffmpeg make and check the
# test data
pkgs+=(libsndfile1-dev libmpg123-dev libfftw3-dev python3-torchaudio espeak-ng sox ffmpeg)
# video (issue 28): containers, codecs and RGB conversion; PyAV is the tests' reference decoder
pkgs+=(libavformat-dev libavcodec-dev libavutil-dev libswscale-dev python3-av)
missing=()
if [ -n "${STK_DEPS_MISSING:-}" ]; then
    read -r -a missing <<< "$STK_DEPS_MISSING"
else # one dpkg-query for all (one per package took seconds on a loaded machine)
    installed=" $(dpkg-query -W -f='${Package}:${Status} ' "${pkgs[@]}" 2> /dev/null || true)"
    for p in "${pkgs[@]}"; do
        [[ $installed == *" $p:install ok installed "* ]] || missing+=("$p")
    done
fi
[ ${#missing[@]} -eq 0 ] && exit 0

read -r -a locks <<< "${STK_APT_LOCKS:-/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock \
/var/lib/apt/lists/lock /var/cache/apt/archives/lock}"
limit=${STK_APT_LOCK_WAIT:-600}
deadline=$((SECONDS + limit))

# held_lock: print "FILE held by process PID (NAME)" for the first lock some process holds.
held_lock() {
    local f st dev key pid
    for f in "${locks[@]}"; do
        st=$(stat -c '%D %i' "$f" 2>/dev/null) || continue
        dev=$((16#${st% *}))
        # /proc/locks names a file MAJOR:MINOR:INODE (major and minor in hex)
        key=$(printf '%02x:%02x:%s' $(((dev >> 8) & 0xfff)) $(((dev & 0xff) | ((dev >> 12) & 0xfff00))) \
              "${st#* }")
        pid=$(awk -v k="$key" '$0 ~ / -> / { next } { for (i = 1; i <= NF; i++) \
                 if ($i == k) { print $(i - 1); exit } }' /proc/locks)
        if [ -n "$pid" ]; then
            echo "$f held by process $pid ($(cat "/proc/$pid/comm" 2>/dev/null || echo gone))"
            return 0
        fi
    done
    return 1
}

# wait_for_locks: return once no watched lock is held; fail after the deadline.
wait_for_locks() {
    local held said=""
    while held=$(held_lock); do
        if [ $SECONDS -ge $deadline ]; then
            echo "deps: gave up after waiting $limit s for the package lock: $held" \
                 "(STK_APT_LOCK_WAIT sets the limit)" >&2
            return 1
        fi
        if [ "$held" != "$said" ]; then
            echo "deps: waiting for the package lock ($held), up to $((deadline - SECONDS)) s more"
            said=$held
        fi
        sleep 1
    done
    [ -z "$said" ] || echo "deps: the package lock is free"
}

run() {
    if [ -n "${STK_DEPS_DRY_RUN:-}" ]; then echo "deps: would run: $*"; else "$@"; fi
}

echo "deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
wait_for_locks
left=$((deadline > SECONDS ? deadline - SECONDS : 1))
# apt-get update waits for no lock of its own: one taken since our check fails it; then wait again
until run $SUDO apt-get -o DPkg::Lock::Timeout="$left" update -q; do
    held_lock > /dev/null || exit 1  # failed for another reason (the network): apt said why
    wait_for_locks
    left=$((deadline > SECONDS ? deadline - SECONDS : 1))
done
wait_for_locks
left=$((deadline > SECONDS ? deadline - SECONDS : 1))
run $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout="$left" install -y -q \
    --no-install-recommends "${missing[@]}"

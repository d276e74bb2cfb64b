# Sanitizer options a fuzz target carries, for scripts/fuzz_ci.sh and `make fuzz-replay` (sourced;
# POSIX sh, as make's recipes run).
# fuzz_asan_options NAME: ASAN_OPTIONS with the uncommented lines of tests/fuzz/fuzz_NAME.asan
# (fuzz_hdf5.asan: a library that asks malloc for terabytes), then the caller's ASAN_OPTIONS.
fuzz_asan_options() {
    f=tests/fuzz/fuzz_$1.asan opts=${ASAN_OPTIONS:-}
    [ -f "$f" ] && opts=$(grep -v '^#' "$f" | paste -sd: -)${opts:+:$opts}
    printf '%s' "$opts"
}

#!/usr/bin/env bash
# make fuzz-ci: run each libFuzzer target given (build/fuzz/fuzz_NAME) for FUZZ_SECONDS seconds
# (default 60) from its corpus tests/fuzz/corpus/NAME, under ASan + UBSan. New inputs go to
# build/fuzz/work/NAME (the repo's corpus is only read), a crashing input to
# build/fuzz/artifacts/. Prints the executions per target; fails on any crash, leak, timeout or
# sanitizer report, naming the target and the input.
set -u
secs=${FUZZ_SECONDS:-60}
work=build/fuzz/work; art=build/fuzz/artifacts
mkdir -p "$work" "$art"
fails=(); summary=()
. scripts/fuzz_opts.sh
for t in "$@"; do
    name=${t##*/fuzz_}
    corpus=tests/fuzz/corpus/$name
    [ -d "$corpus" ] || { echo "fuzz-ci: $name has no corpus ($corpus)"; fails+=("$name"); continue; }
    mkdir -p "$work/$name"
    log=build/fuzz/$name.log
    echo "== fuzz_$name: $secs s from $corpus"
    # a target may carry LeakSanitizer suppressions for a library it drives (fuzz_hdf5.lsan)
    supp=tests/fuzz/fuzz_$name.lsan
    lsan=${LSAN_OPTIONS:-}
    [ -f "$supp" ] && lsan="suppressions=$supp${lsan:+:$lsan}"
    # and AddressSanitizer options (fuzz_hdf5.asan: a library that asks malloc for terabytes)
    asan=$(fuzz_asan_options "$name")
    ASAN_OPTIONS=$asan LSAN_OPTIONS=$lsan timeout -k 30 $((secs + 300)) "$t" -max_total_time="$secs" -timeout=30 \
        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$art/$name-" "$work/$name" \
        "$corpus" >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -n1)
    line="fuzz_$name: ${execs:-?} executions in $secs s (${cov:-no coverage line})"
    if [ $rc -ne 0 ]; then
        line="$line: FAILED (exit $rc)"
        grep -E 'ERROR: |SUMMARY: |runtime error|Test unit written' "$log" | head -n 20 | sed 's/^/    /'
        fails+=("$name")
    fi
    echo "$line"; summary+=("$line")
done
echo "fuzz-ci summary ($(clang --version | head -n1)):"
printf '  %s\n' "${summary[@]}"
if [ ${#fails[@]} -ne 0 ]; then echo "fuzz-ci: FAILED: ${fails[*]} (logs: build/fuzz/NAME.log)"; exit 1; fi
echo "fuzz-ci: passed"

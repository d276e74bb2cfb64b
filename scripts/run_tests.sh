#!/usr/bin/env bash
# Run unit-test binaries; each prints "N passed, N failed". Exit 77 counts as a skip.
# Prints a closing total line (and the slowest binaries' seconds, which `make test`'s time is
# mostly made of) and fails if any binary failed. Each case has its own time limit
# (tests/t.h, STK_TEST_TIMEOUT, stretched by the load); a whole binary gets
# STK_TEST_BINARY_TIMEOUT seconds (default 1200) in case the runner itself is stuck, stretched
# like a case's limit by the 1-minute load average per CPU at its start (within 1x-16x).
set -u
base=${STK_TEST_BINARY_TIMEOUT:-1200}
# load_limit SECONDS: SECONDS times the load per CPU, within [1, 16]
load_limit() {
    awk -v s="$1" -v n="$(nproc)" '{ k = $1 / n; if (k < 1) k = 1; if (k > 16) k = 16;
                                     printf "%d", s * k }' /proc/loadavg
}
tp=0; tf=0; fails=(); times=()
for t in "$@"; do
    echo "== ${t##*/}"
    t0=$SECONDS
    limit=$(load_limit "$base")
    out=$(timeout -k 10 "$limit" "$t" 2>&1); rc=$?
    times+=("$((SECONDS - t0)) ${t##*/}")
    [ $rc -eq 124 ] && out="$out
FAIL ${t##*/} (the binary timed out after $limit s)"
    printf '%s\n' "$out" | grep -v '^ok ' || true
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n1)
    p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/'); f=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
    [ -n "$p" ] || p=0; [ -n "$f" ] || f=0
    tp=$((tp + p)); tf=$((tf + f))
    if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
        fails+=("${t##*/} (exit $rc)"); [ "$f" -eq 0 ] && tf=$((tf + 1))
    fi
done
echo "unit: $tp passed, $tf failed"
[ ${#times[@]} -gt 1 ] && echo "slowest (s): $(printf '%s\n' "${times[@]}" | sort -rn | head -n 5 |
    awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $2, $1}')"
if [ ${#fails[@]} -ne 0 ]; then echo "failed: ${fails[*]}"; exit 1; fi
[ $tp -gt 0 ] || { echo "unit: no test ran"; exit 1; }

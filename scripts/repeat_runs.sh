#!/usr/bin/env bash
# repeat_runs.sh N LOGDIR CMD...: run CMD N times in a row (`make test-under-load REPEAT=N`),
# each run's output in LOGDIR/run-K.log; after each run one line (pass or FAIL, seconds, the
# load average when it began), and at the end "N1/N runs passed". A failed run does not stop
# the others: the pass count over consecutive runs is the figure (docs/reliability.md).
# Exit status: 0 if every run passed.
set -u
[ $# -ge 3 ] || { echo "usage: repeat_runs.sh N LOGDIR CMD..." >&2; exit 2; }
n=$1 logdir=$2
shift 2
case $n in '' | *[!0-9]* | 0) echo "repeat_runs: REPEAT must be a positive count, not '$n'" >&2; exit 2 ;; esac
mkdir -p "$logdir"
passed=0
t_all=$SECONDS
for ((k = 1; k <= n; k++)); do
    load=$(cut -d' ' -f1 /proc/loadavg)
    t0=$SECONDS
    "$@" > "$logdir/run-$k.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then
        passed=$((passed + 1)); verdict=pass
    else
        verdict="FAIL (exit $rc)"
    fi
    echo "run $k/$n: $verdict, $((SECONDS - t0)) s, load average $load at its start;" \
         "$(grep -hE '^(unit|cli): |^[0-9]+ (passed|failed)' "$logdir/run-$k.log" | tr '\n' ' ')"
    [ $rc -eq 0 ] || grep -hE '^FAIL|^FAILED|Error|assert' "$logdir/run-$k.log" | head -n 20
done
echo "repeat: $passed/$n runs passed in $((SECONDS - t_all)) s (logs: $logdir)"
[ $passed -eq $n ]

#!/usr/bin/env bash
# under_load.sh CMD...: run CMD beside a CPU load of STK_LOAD_PER_CPU (default 2) busy processes
# per online CPU, as a shared or oversubscribed CI machine has, so that a test whose verdict
# depends on timing fails here rather than at random (`make test-under-load`). The load ends
# with CMD, however CMD ends: each busy process is killed on the way out, and each also stops
# by itself once this script is gone (even after a kill -9), so none is ever left running.
# Exit status: CMD's.
set -u
[ $# -gt 0 ] || { echo "usage: under_load.sh CMD..." >&2; exit 2; }
cpus=$(getconf _NPROCESSORS_ONLN)
n=$((cpus * ${STK_LOAD_PER_CPU:-2}))
me=$$
pids=()
stop_load() {
    [ ${#pids[@]} -gt 0 ] || return 0
    kill "${pids[@]}" 2> /dev/null
    wait "${pids[@]}" 2> /dev/null
    pids=()
}
trap stop_load EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
for ((i = 0; i < n; i++)); do
    # a busy loop that looks up every few thousand turns whether this script still runs
    (trap - EXIT INT TERM; while kill -0 "$me" 2> /dev/null; do
        for ((j = 0; j < 20000; j++)); do :; done
    done) &
    pids+=($!)
done
echo "under_load: $n busy processes beside the command ($cpus CPUs; STK_LOAD_PER_CPU=${STK_LOAD_PER_CPU:-2})"
rc=0
"$@" || rc=$?
stop_load
echo "under_load: load stopped; the command exited $rc"
exit $rc

#!/usr/bin/env bash
# make test-gpu: run the GPU test binaries on the real driver. Exit 77 when every one skipped (no
# CUDA or no device), 1 when one failed. When they ran and passed, run them again under
# compute-sanitizer's memcheck (shorter loops: STK_GPU_QUICK) when it is installed.
set -u
status=77
for t in "$@"; do
    echo "== ${t##*/}"
    "$t"; rc=$?
    if [ $rc -eq 0 ]; then [ $status -eq 77 ] && status=0
    elif [ $rc -ne 77 ]; then status=1; fi
done
if [ $status -eq 0 ]; then
    cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -n1)
    if [ -n "$cs" ]; then
        log=$(mktemp)
        for t in "$@"; do
            echo "== compute-sanitizer memcheck ${t##*/}"
            STK_GPU_QUICK=1 "$cs" --tool memcheck --error-exitcode 99 "$t" 2>&1 | tee "$log"
            rc=${PIPESTATUS[0]}
            # Some sandboxes (gVisor) refuse the sanitizer: say so rather than fail the tests.
            if [ $rc -ne 0 ] && grep -q "Device not supported" "$log"; then
                echo "test-gpu: compute-sanitizer cannot run on this machine: memcheck skipped"
            elif [ $rc -ne 0 ]; then
                status=1
            fi
        done
        rm -f "$log"
    else
        echo "test-gpu: compute-sanitizer not found: the memcheck pass is skipped"
    fi
fi
case $status in
    0) echo "test-gpu: passed" ;;
    77) echo "test-gpu: skipped (no CUDA device)" ;;
    *) echo "test-gpu: FAILED" ;;
esac
exit $status

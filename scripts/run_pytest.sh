#!/usr/bin/env bash
# Run pytest on python/tests (or the test files given after BUILD and PYTHON) with Debian's
# interpreter; "no tests collected" (exit 5) fails.
# Each test gets STK_PYTEST_TIMEOUT seconds (default 300; pytest-timeout, thread method: a test
# stuck in C with the GIL released is caught too; it prints every thread's stack, the test's
# among them, and ends the run), and the whole run STK_PYTEST_TOTAL_TIMEOUT (default 2400).
# STK_PYTEST_PRELOAD: a library to LD_PRELOAD into the interpreter only (make tsan: libtsan, which
# bash itself does not survive).
set -u
build=${1:-build}; py=${2:-/usr/bin/python3}
shift $(($# < 2 ? $# : 2))
tests=("$@"); [ ${#tests[@]} -gt 0 ] || tests=(python/tests)
per_test=${STK_PYTEST_TIMEOUT:-300}; total=${STK_PYTEST_TOTAL_TIMEOUT:-2400}
args=()
if "$py" -c 'import pytest_timeout' 2>/dev/null; then
    args=(--timeout="$per_test" --timeout_method=thread)
else
    echo "pytest: pytest-timeout is missing (scripts/deps.sh installs python3-pytest-timeout):" \
         "no per-test limit, only the $total s limit on the whole run"
fi
PYTHONPATH="$PWD/$build/python" STK_BUILD="$PWD/$build" \
    timeout -k 30 "$total" env ${STK_PYTEST_PRELOAD:+LD_PRELOAD="$STK_PYTEST_PRELOAD"} \
    "$py" -m pytest -q "${args[@]}" "${tests[@]}"
rc=$?
[ $rc -eq 5 ] && { echo "pytest: no tests collected"; exit 1; }
[ $rc -eq 124 ] && echo "pytest: the run timed out after $total s"
exit $rc

#!/usr/bin/env bash
# Run pytest on python/tests with Debian's interpreter; "no tests collected" (exit 5) fails.
set -u
build=${1:-build}; py=${2:-/usr/bin/python3}
PYTHONPATH="$PWD/$build/python" STK_BUILD="$PWD/$build" "$py" -m pytest -q python/tests
rc=$?
[ $rc -eq 5 ] && { echo "pytest: no tests collected"; exit 1; }
exit $rc

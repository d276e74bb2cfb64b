#!/usr/bin/env bash
# Run the shell tests of the CLI (tests/cli/test_*.sh) against BUILD/stoker. Each script exits
# 0 on success and gets STK_CLI_TIMEOUT seconds (default 300): one that hangs fails by name and
# the next one runs. A closing line counts them.
set -u
build=${1:-build}
limit=${STK_CLI_TIMEOUT:-300}
export STOKER="$PWD/$build/stoker" STK_BUILD="$PWD/$build"
p=0; f=0
for t in tests/cli/test_*.sh; do
    [ -e "$t" ] || continue
    tmp=$(mktemp -d)
    (cd "$tmp" && timeout -k 10 "$limit" bash -eu "$OLDPWD/$t") > "$tmp.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then
        echo "ok   ${t##*/}"; p=$((p + 1))
    else
        why="exit $rc"
        [ $rc -eq 124 ] || [ $rc -eq 137 ] && why="timed out after $limit s"
        echo "FAIL ${t##*/} ($why)"; sed 's/^/    /' "$tmp.log" | tail -n 40; f=$((f + 1))
    fi
    rm -rf "$tmp" "$tmp.log"
done
echo "cli: $p passed, $f failed"
[ $f -eq 0 ] && [ $p -gt 0 ]

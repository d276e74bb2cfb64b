#!/usr/bin/env bash
# Run the shell tests of the CLI (tests/cli/test_*.sh, or the scripts given after BUILD) against
# BUILD/stoker. Each script exits 0 on success and gets STK_CLI_TIMEOUT seconds (default 300):
# one that hangs fails by name and the next one runs. A closing line counts them.
set -u
build=${1:-build}
shift $(($# < 1 ? $# : 1))
scripts=("$@"); [ ${#scripts[@]} -gt 0 ] || scripts=(tests/cli/test_*.sh)
limit=${STK_CLI_TIMEOUT:-300}
export STOKER="$PWD/$build/stoker" STK_BUILD="$PWD/$build"
p=0; f=0
for t in "${scripts[@]}"; do
    [ -e "$t" ] || continue
    tmp=$(mktemp -d)
    t0=$SECONDS
    (cd "$tmp" && timeout -k 10 "$limit" bash -eu "$OLDPWD/$t") > "$tmp.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then
        echo "ok   ${t##*/} ($((SECONDS - t0)) s)"; p=$((p + 1))
    else
        why="exit $rc"
        [ $rc -eq 124 ] || [ $rc -eq 137 ] && why="timed out after $limit s"
        echo "FAIL ${t##*/} ($why)"; sed 's/^/    /' "$tmp.log" | tail -n 40; f=$((f + 1))
    fi
    rm -rf "$tmp" "$tmp.log"
done
echo "cli: $p passed, $f failed"
[ $f -eq 0 ] && [ $p -gt 0 ]

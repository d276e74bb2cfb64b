#!/usr/bin/env bash
# Run the shell tests of the CLI (tests/cli/test_*.sh) against BUILD/stoker. Each script exits
# 0 on success; a closing line counts them.
set -u
build=${1:-build}
export STOKER="$PWD/$build/stoker" STK_BUILD="$PWD/$build"
p=0; f=0
for t in tests/cli/test_*.sh; do
    [ -e "$t" ] || continue
    tmp=$(mktemp -d)
    if (cd "$tmp" && bash -eu "$OLDPWD/$t") > "$tmp.log" 2>&1; then
        echo "ok   ${t##*/}"; p=$((p + 1))
    else
        echo "FAIL ${t##*/}"; sed 's/^/    /' "$tmp.log" | tail -n 40; f=$((f + 1))
    fi
    rm -rf "$tmp" "$tmp.log"
done
echo "cli: $p passed, $f failed"
[ $f -eq 0 ] && [ $p -gt 0 ]

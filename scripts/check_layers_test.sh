#!/usr/bin/env bash
# check_layers_test.sh BUILD: the checker of the floors (scripts/check_layers.py) fails on what it
# must. Each case copies the tree's sources into a temporary folder, plants one violation there
# (an upward include, a call across rooms, a format using another format, a CLI call into the
# library's internals, a Python import cycle, a cycle in docs/design.md's table) and expects the
# checker to fail naming it; the untouched copy must pass. BUILD's objects serve the call checks
# (linked into the copy's build folder; the planted object is compiled there).
set -u
build=$(cd "${1:-build}" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

fresh() { # a clean copy of what the checker reads, with BUILD's objects linked in
    rm -rf "$tmp/t"
    mkdir -p "$tmp/t/python" "$tmp/t/docs" "$tmp/t/build"
    cp -r "$root/src" "$root/include" "$root/cli" "$root/scripts" "$tmp/t/"
    cp -r "$root/python/stoker" "$tmp/t/python/"
    cp "$root/docs/design.md" "$tmp/t/docs/"
    cp -rs "$build/obj" "$tmp/t/build/obj"
}

run() { "$py" "$tmp/t/scripts/check_layers.py" --root "$tmp/t" --build "$tmp/t/build" "$@"; }

expect() { # NAME fail|pass PATTERN [ARGS]: the checker (with ARGS) fails saying PATTERN, or passes
    local name=$1 want=$2 pat=$3 out rc
    shift 3
    out=$(run "$@" 2>&1)
    rc=$?
    if { [ "$want" = fail ] && [ $rc -ne 0 ]; } || { [ "$want" = pass ] && [ $rc -eq 0 ]; }; then
        if grep -q -- "$pat" <<<"$out"; then
            echo "ok   $name"
            pass=$((pass + 1))
            return
        fi
    fi
    echo "FAIL $name (exit $rc, expected to $want saying: $pat)"
    sed 's/^/    /' <<<"$out" | tail -n 5
    fail=$((fail + 1))
}

expect_fail() { expect "$1" fail "$2" "${@:3}"; }

# planted_object SRC: compile one planted C file of the copy into its build folder
planted_object() {
    local src=$1 obj="$tmp/t/build/obj/${1%.c}.o"
    mkdir -p "$(dirname "$obj")"
    ${CC:-cc} -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -c "$tmp/t/$src" -o "$obj" \
        -I"$tmp/t/include" -I"$tmp/t/src"
}

fresh
expect "the tree as it is passes" pass "keep the floors of docs/design.md"

fresh # common is the floor: it includes nothing above it
echo '#include "loader/stk_loader_int.h"' >>"$tmp/t/src/common/stk_alloc.c"
expect_fail "an upward include (common -> loader)" "src/common/stk_alloc.c: includes src/loader/stk_loader_int.h (common may not use loader)" --no-calls

fresh # cuda sits below batch: including the ring is the climb issue 25 removed
echo '#include "batch/stk_ring.h"' >>"$tmp/t/src/cuda/stk_devring.c"
expect_fail "cuda including batch" "(cuda may not use batch)" --no-calls

fresh # formats use the seam, not each other (bar the listed exceptions)
echo '#include "source/wds/stk_tar.h"' >>"$tmp/t/src/source/npy/stk_src_npy.c"
expect_fail "one format including another" "src/source/npy/stk_src_npy.c: includes src/source/wds/stk_tar.h" --no-calls

fresh # an upward call: a file of common calling the loader's reset
cat >"$tmp/t/src/common/stk_planted.c" <<'EOF'
void stk__loader_reset(void *c, unsigned long s, unsigned long e, unsigned long p);
void stk__planted(void);
void stk__planted(void) { stk__loader_reset(0, 0, 0, 0); }
EOF
planted_object src/common/stk_planted.c
expect_fail "an upward call (common -> loader)" "src/common/stk_planted.c: calls stk__loader_reset in src/loader/"

fresh # the CLI calls what the library exports, nothing inside it
cat >"$tmp/t/cli/planted.c" <<'EOF'
#include <stddef.h>
void *stk__malloc(size_t size);
void *cli_planted(void);
void *cli_planted(void) { return stk__malloc(1); }
EOF
planted_object cli/planted.c
expect_fail "the CLI calling an internal function" "cli/planted.c: calls stk__malloc"

fresh # a folder no room names
mkdir -p "$tmp/t/src/newroom" && echo 'int x;' >"$tmp/t/src/newroom/stk_new.c"
expect_fail "a folder in no room" "src/newroom/stk_new.c: in no room" --no-calls

fresh # Python: dataset imports the loader, which imports dataset
printf '\n\ndef _planted():\n    from . import loader  # noqa\n' >>"$tmp/t/python/stoker/dataset.py"
expect_fail "a Python import cycle (inside a function too)" "python: import cycle" --no-calls

fresh # the table itself: common may use the loader, which uses common
sed -i 's/^| common | `src\/common\/\*`, `src\/stk_internal.h` | |$/| common | `src\/common\/*`, `src\/stk_internal.h` | loader |/' \
    "$tmp/t/docs/design.md"
expect_fail "a cycle in docs/design.md's rooms" "the rooms' table has a cycle" --no-calls

echo "check-layers test: $pass passed, $fail failed"
[ $fail -eq 0 ]

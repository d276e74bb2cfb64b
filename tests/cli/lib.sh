# lib.sh: helpers for the CLI tests (source it: . "$(dirname "$0")/lib.sh"). Not a test itself:
# scripts/run_cli_tests.sh runs only test_*.sh.
PY=/usr/bin/python3 # Debian's interpreter (json, and torchvision where installed)

fail() { echo "FAIL: $*" >&2; exit 1; }

# The tests write their data into the current directory: refuse any directory but an empty
# temporary one (scripts/run_cli_tests.sh makes one per script). Run from the repository root,
# a test once left src/ant, src/bee, out.txt and err.txt in the tree.
case "$(pwd -P)/" in
    "$(cd "${TMPDIR:-/tmp}" && pwd -P)"/?*) ;;
    *) fail "${0##*/} writes into the current directory; run it from an empty temporary directory" \
            "(scripts/run_cli_tests.sh does), not from $(pwd)" ;;
esac
[ -z "$(ls -A)" ] || fail "${0##*/}: the current directory $(pwd) is not empty; run it from an" \
    "empty temporary directory (scripts/run_cli_tests.sh does)"

# expect CODE TEXT CMD...: CMD exits with CODE and its stdout or stderr contains TEXT (both are
# left in out.txt and err.txt).
expect() {
    local code=$1 text=$2 rc=0
    shift 2
    "$@" >out.txt 2>err.txt || rc=$?
    [ "$rc" -eq "$code" ] || fail "$*: exit $rc, want $code; stderr: $(cat err.txt)"
    grep -qF -- "$text" err.txt out.txt || fail "$*: output lacks '$text': $(cat out.txt err.txt)"
}

# random_files DIR N "CLASS..." SIZE [STEP]: N files DIR/<class>/f<i>.jpg (i from 0, classes
# in turn) of SIZE + i * STEP random bytes, written by one process: a `head` per file was
# most of some tests' time on a loaded machine (800 files: 140 s of process starts).
random_files() {
    $PY - "$@" <<'PYEOF'
import os, sys
d, n, classes, size = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), int(sys.argv[4])
step = int(sys.argv[5]) if len(sys.argv) > 5 else 0
for i in range(n):
    c = os.path.join(d, classes[i % len(classes)])
    os.makedirs(c, exist_ok=True)
    with open(os.path.join(c, "f%d.jpg" % i), "wb") as f:
        f.write(os.urandom(size + i * step))
PYEOF
}

# flip FILE OFFSET: complement one byte in place.
flip() {
    local b
    b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
    printf "$(printf '\\%03o' $((255 - b)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

# offset_of FILE TEXT: byte offset of the first occurrence of TEXT in FILE.
offset_of() {
    grep -obUaF -- "$2" "$1" | head -n1 | cut -d: -f1
}

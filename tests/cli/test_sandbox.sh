# test_sandbox.sh: the CLI tests write into the current directory, so each refuses to run
# anywhere but in an empty temporary directory (run from the repository root, one once left
# src/ant, src/bee, out.txt and err.txt in the tree). Tried here from a directory outside the
# temporary one (under the build directory, which git ignores) and from a non-empty temporary one.
. "$(dirname "$0")/lib.sh"
tests="$(cd "$(dirname "$0")" && pwd)"
outside=$(mktemp -d "$STK_BUILD/cli-sandbox.XXXXXX")
trap 'rm -rf "$outside"' EXIT
mkdir busy && touch busy/x
for t in "$tests"/test_*.sh; do
    name=${t##*/}
    rc=0
    (cd "$outside" && bash -eu "$t") > o.txt 2>&1 || rc=$?
    [ $rc -eq 1 ] || fail "$name outside a temporary directory: exit $rc: $(cat o.txt)"
    grep -q "$name writes into the current directory; run it from an empty temporary" o.txt ||
        fail "$name: $(cat o.txt)"
    [ -z "$(ls -A "$outside")" ] || fail "$name wrote into $outside: $(ls -A "$outside")"
    rc=0
    (cd busy && bash -eu "$t") > o.txt 2>&1 || rc=$?
    [ $rc -eq 1 ] && grep -q "is not empty" o.txt || fail "$name in a non-empty directory: $(cat o.txt)"
    [ "$(ls -A busy)" = x ] || fail "$name wrote into busy/: $(ls -A busy)"
done
echo "sandbox: ok"

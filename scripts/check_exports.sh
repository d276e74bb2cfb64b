#!/usr/bin/env bash
# The exported symbols of libstoker.so must be exactly the STK_API functions of
# include/stoker.h, and src/libstoker.map must list exactly those.
set -eu
so=${1:-build/libstoker.so}
if [ "$so" = "--write" ]; then   # regenerate the map from the header
    names=$(grep -A3 '^STK_API' include/stoker.h | tr '\n' ' ' | grep -oE '\b(stk_[a-z0-9_]+)\(' |
            tr -d '(' | sort -u)
    { echo "/* Exported symbols of libstoker: exactly the STK_API functions of include/stoker.h."
      echo "   Regenerate with scripts/check_exports.sh --write; make check-exports compares. */"
      echo "STOKER_0.3 {"; echo "  global:"; for n in $names; do echo "    $n;"; done
      echo "  local:"; echo "    *;"; echo "};"; } > src/libstoker.map
    exit 0
fi
hdr=$(grep -A3 '^STK_API' include/stoker.h | tr '\n' ' ' | grep -oE '\b(stk_[a-z0-9_]+)\(' |
      tr -d '(' | sort -u)
map=$(grep -oE '^\s+stk_[a-z0-9_]+;' src/libstoker.map | tr -d ' ;\t' | sort -u)
dyn=$(nm -D --defined-only "$so" | awk '$2 ~ /[TDBR]/ {print $3}' | grep -v '^_' | sed 's/@.*//' |
      sort -u)
ok=1
if [ "$hdr" != "$map" ]; then
    echo "check-exports: include/stoker.h and src/libstoker.map differ:"; diff <(echo "$hdr") <(echo "$map") || true; ok=0
fi
if [ "$map" != "$dyn" ]; then
    echo "check-exports: src/libstoker.map and $so differ:"; diff <(echo "$map") <(echo "$dyn") || true; ok=0
fi
[ $ok = 1 ] && echo "check-exports: $(echo "$dyn" | wc -l) symbols match" || exit 1

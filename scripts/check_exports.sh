#!/usr/bin/env bash
# The exported symbols of libstoker.so must be exactly the STK_API functions of
# include/stoker.h, and src/libstoker.map must list exactly those.
set -eu
# The function each STK_API declaration declares: the first `stk_name(` of the declaration (it
# runs to its `;`), so the inline helpers beside them (stk_loader_opts_init over
# stk_loader_opts_init_sized) are not taken for exports.
api_names() {
    awk '/^STK_API/ {d = 1; buf = ""} d {buf = buf " " $0} d && /;/ {print buf; d = 0}' \
        include/stoker.h | sed -E 's/^[^(]*[^a-z0-9_](stk_[a-z0-9_]+)\(.*/\1/' | sort -u
}
so=${1:-build/libstoker.so}
if [ "$so" = "--write" ]; then   # regenerate the map from the header
    names=$(api_names)
    { echo "/* Exported symbols of libstoker: exactly the STK_API functions of include/stoker.h."
      echo "   Regenerate with scripts/check_exports.sh --write; make check-exports compares. */"
      echo "STOKER_0.3 {"; echo "  global:"; for n in $names; do echo "    $n;"; done
      echo "  local:"; echo "    *;"; echo "};"; } > src/libstoker.map
    exit 0
fi
hdr=$(api_names)
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

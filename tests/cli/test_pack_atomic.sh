# test_pack_atomic.sh: a directory pack is complete or absent (issue 17). `--force` over an old
# dataset on a full disk leaves the old one as it was; kill -9 at random points of a pack leaves
# the old dataset or the complete new one; shards of two packs are not read as one; a manifest
# edited by hand, a shard missing or swapped is named. Run by scripts/run_cli_tests.sh.
. "$(dirname "$0")/lib.sh"

# tree DIR N CLASSES SIZE: N files of SIZE random bytes spread over the named classes.
tree() { random_files "$@"; }
# facts DATA: "records classes" of a dataset, or "unreadable" (and verify must agree).
facts() {
    "$STOKER" verify --quiet "$1" > /dev/null 2>&1 || { echo unreadable; return; }
    "$STOKER" inspect --json "$1" | $PY -c '
import json, sys
d = json.load(sys.stdin)
m = d["metadata"]
print(d["records"], ",".join(m["classes"]))'
}

tree old 40 "a b" 2000
tree new 60 "x y z" 2000
expect 0 "packed 40" "$STOKER" pack old out --shard-size 8k
[ -f out/stoker-manifest.json ] || fail "no manifest"
OLD="40 a,b"
[ "$(facts out)" = "$OLD" ] || fail "old dataset: $(facts out)"
"$STOKER" pack --quiet new ref --shard-size 8k
NEW="60 x,y,z"

# ---- a failure before the commit leaves the old dataset exactly as it was ----
cp -a out keep
expect 1 "broken/z/f59.jpg: cannot read" sh -c "mkdir -p broken && cp -a new/. broken/ && rm broken/z/f59.jpg &&
    ln -s /nonexistent broken/z/f59.jpg && \"$STOKER\" pack --force broken out --shard-size 8k"
diff -r keep out || fail "a failed --force changed the old dataset"
rm -rf broken

# Disk full during --force: a 1 MiB tmpfs holding the old dataset (root only; skipped where
# mounting is not allowed). The old dataset stays byte for byte, and readable.
if [ "$(id -u)" -eq 0 ] && mkdir -p small && mount -t tmpfs -o size=1m tmpfs small 2> /dev/null; then
    trap 'umount small 2> /dev/null || true' EXIT
    "$STOKER" pack --quiet old small/ds --shard-size 8k
    tree big 400 "p q" 4000 # 1.6 MB: cannot fit
    cp -a small/ds before
    expect 1 "No space left on device" "$STOKER" pack --force big small/ds --shard-size 16k
    diff -r before small/ds || fail "ENOSPC during --force changed the old dataset"
    [ "$(facts small/ds)" = "$OLD" ] || fail "after ENOSPC: $(facts small/ds)"
    umount small
    trap - EXIT
    echo "ENOSPC on tmpfs: old dataset kept"
else
    echo "skip: ENOSPC on tmpfs (cannot mount; the injected write failure of test_pack.c covers it)"
fi

# ---- kill -9 at random points of --force: the old dataset or the new one, nothing else ----
tree big2 300 "x y z" 3000
NEW2="300 x,y,z"
runs=${STK_KILL_RUNS:-20}
n_old=0
n_new=0
for r in $(seq 1 "$runs"); do
    rm -rf k && cp -a out k
    "$STOKER" pack --quiet --force big2 k --shard-size 8k &
    pid=$!
    ms=$((RANDOM % ${STK_KILL_MAX_MS:-1200})) # a pack here takes about 1 s
    sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))"
    kill -9 "$pid" 2> /dev/null || true
    wait "$pid" 2> /dev/null || true
    got=$(facts k)
    case "$got" in
    "$OLD") n_old=$((n_old + 1)) ;;
    "$NEW2") n_new=$((n_new + 1)) ;;
    *) fail "run $r: after kill -9 the dataset is '$got' (want '$OLD' or '$NEW2'): $(ls k)" ;;
    esac
    # the next pack over the leftovers cleans them up
    if [ "$r" -eq 1 ]; then
        "$STOKER" pack --quiet --force new k --shard-size 8k
        [ "$(facts k)" = "$NEW" ] || fail "pack over leftovers: $(facts k)"
        ls k | grep -q '\.part' && fail "leftover parts after a complete pack: $(ls k)"
    fi
done
echo "kill -9: $runs runs, $n_old old, $n_new new, 0 other"

# ---- a pack killed after its commit, before its parts were renamed: still the new one ----
rm -rf c && cp -a ref c
for f in c/shard-*.stk; do mv "$f" "$f.part"; done
[ "$(facts c)" = "$NEW" ] || fail "committed parts: $(facts c)"

# ---- mixed shards from two packs ----
rm -rf m && mkdir m
cp out/shard-00000.stk m/a.stk
cp ref/shard-00000.stk m/b.stk
expect 1 "a shard of a different dataset than m/a.stk (another dataset_id" "$STOKER" verify m
expect 1 "a shard of a different dataset" "$STOKER" inspect m/a.stk m/b.stk
expect 0 "all good" "$STOKER" verify --concat m
# two packs of one tree are two datasets as well
"$STOKER" pack --quiet old out2 --shard-size 8k
expect 1 "another dataset_id" "$STOKER" verify out/shard-00000.stk out2/shard-00001.stk
# a shard of another pack copied into a packed directory: not listed, ignored
cp ref/shard-00000.stk out/zz-stray.stk
[ "$(facts out)" = "$OLD" ] || fail "stray shard read: $(facts out)"
rm out/zz-stray.stk

# ---- a manifest that disagrees with its shards, or was edited ----
rm -rf t && cp -a out t
cp ref/shard-00001.stk t/shard-00001.stk # same name, another pack
expect 1 "t/shard-00001.stk: " "$STOKER" verify t
grep -q "but the manifest t/stoker-manifest.json lists" err.txt || fail "swap: $(cat err.txt)"
rm -rf t && cp -a out t && rm t/shard-00002.stk
expect 1 "t/shard-00002.stk: missing, but the manifest t/stoker-manifest.json lists it" \
    "$STOKER" inspect t
rm -rf t && cp -a out t && sed -i 's/"records": 40/"records": 39/' t/stoker-manifest.json
expect 1 "t/stoker-manifest.json: damaged or edited manifest (checksum mismatch)" \
    "$STOKER" verify t
rm -rf t && cp -a out t && head -c 300 out/stoker-manifest.json > t/stoker-manifest.json
expect 1 "damaged or edited manifest" "$STOKER" verify t
# the shards can still be read by name
expect 0 "40 records" "$STOKER" verify t/shard-*.stk
echo "ok"

# test_inspect_verify.sh: `stoker inspect` and `stoker verify` on packed shards: facts and JSON,
# directory / glob / list DATA, a flipped byte in a record (named by shard and record), a
# corrupt index, a truncated shard, and the top-level dispatch (--help, --version, unknown).
# Run by scripts/run_cli_tests.sh in a fresh temp dir with $STOKER set.
. "$(dirname "$0")/lib.sh"

mkdir -p src/ant src/bee
for i in 0 1 2 3 4 5; do printf "ant-image-%02d-%s" "$i" "$(head -c 200 /dev/zero | tr '\0' a)" > src/ant/a$i.jpg; done
for i in 0 1 2 3; do printf "bee-image-%02d-%s" "$i" "$(head -c 300 /dev/zero | tr '\0' b)" > src/bee/b$i.png; done
"$STOKER" pack --quiet src one.stk
"$STOKER" pack --quiet src shards --shard-size 1k

# ---- inspect ----
expect 0 "records:     10" "$STOKER" inspect one.stk
grep -q 'one.stk' out.txt || fail "inspect does not list the shard"
grep -qE "image +bytes +313" out.txt || fail "inspect field line: $(cat out.txt)"
grep -qE 'label +int64 +8' out.txt || fail "inspect label line"
grep -q 'classes: 2 items \["ant", "bee"\]' out.txt || fail "inspect metadata: $(cat out.txt)"
grep -q 'source: imagefolder' out.txt || fail "inspect metadata source"

"$STOKER" inspect --json one.stk | $PY -c '
import json, os, sys
d = json.load(sys.stdin)
assert d["records"] == 10 and d["classes"] == 2, d
s = d["shards"][0]
assert s["path"] == "one.stk" and s["records"] == 10 and s["version"] == 1, s
assert s["file_size"] == os.path.getsize("one.stk"), s
assert 0 < s["data_size"] < s["file_size"], s
f = {x["name"]: x for x in d["fields"]}
assert f["image"]["max_size"] == 313 and f["label"]["max_size"] == 8, f
assert f["path"]["max_size"] == len("bee/b0.png"), f
assert len(d["fingerprint"]) == 16
' || fail "inspect --json"

# The fingerprint depends on the data, not on where it lies or how it is named.
cp one.stk copy.stk
fp1=$("$STOKER" inspect --json one.stk | $PY -c 'import json,sys; print(json.load(sys.stdin)["fingerprint"])')
fp2=$("$STOKER" inspect --json copy.stk | $PY -c 'import json,sys; print(json.load(sys.stdin)["fingerprint"])')
[ "$fp1" = "$fp2" ] || fail "fingerprint changed with the file name"

# Records: labels and paths in order, --limit.
"$STOKER" inspect --json --records --limit 7 one.stk | $PY -c '
import json, sys
d = json.load(sys.stdin)
r = d["record_list"]
assert len(r) == 7
assert [x["label"] for x in r] == [0] * 6 + [1], r
assert r[6]["path"]["text"] == "bee/b0.png" and r[6]["image"]["text"].startswith("bee-image-00")
assert [x["index"] for x in r] == list(range(7))
' || fail "inspect --records --json"
expect 0 'path="ant/a3.jpg"' "$STOKER" inspect --records one.stk

# DATA forms: directory, glob, list (in the given order).
n=$(ls shards/*.stk | wc -l)
[ "$n" -gt 2 ] || fail "expected several shards, got $n"
expect 0 "shards:      $n" "$STOKER" inspect shards
expect 0 "shards:      $n" "$STOKER" inspect 'shards/shard-*.stk'
# two packs (one.stk and shards) are two datasets: read as one only when asked
expect 1 "a shard of a different dataset" "$STOKER" inspect one.stk shards
expect 0 "records:     20" "$STOKER" inspect --concat one.stk shards
"$STOKER" inspect --json --records shards/shard-00001.stk shards/shard-00000.stk | $PY -c '
import json, sys
d = json.load(sys.stdin)
paths = [s["path"] for s in d["shards"]]
assert paths == ["shards/shard-00001.stk", "shards/shard-00000.stk"], paths
assert d["record_list"][0]["shard"] == 0 and d["record_list"][0]["local"] == 0
' || fail "list order"

# ---- verify: good data ----
expect 0 "verify: 10 records in 1 shard: all good, 0 bad" "$STOKER" verify one.stk
expect 0 "all good" "$STOKER" verify shards
expect 0 "all good" "$STOKER" verify --concat --threads 1 one.stk shards
expect 0 "all good" "$STOKER" verify --threads 3 --quiet 'shards/*.stk'

# ---- a flipped byte inside a record ----
cp one.stk bad.stk
off=$(offset_of bad.stk "ant-image-03")
[ -n "$off" ] || fail "record 3 not found in the shard"
flip bad.stk $((off + 20))
expect 1 "bad.stk record 3 (global 3) at byte" "$STOKER" verify bad.stk
grep -q "1 bad" out.txt || fail "verify summary: $(cat out.txt)"
[ "$(grep -c 'checksum mismatch' out.txt)" -eq 1 ] || fail "only record 3 is bad: $(cat out.txt)"
# Global numbers count across shards: the same damage as the 2nd dataset shard.
expect 1 "bad.stk record 3 (global 13) at byte" "$STOKER" verify one.stk bad.stk
# inspect still opens it (the index is intact); reading the bad record reports it.
expect 0 "records:     10" "$STOKER" inspect bad.stk
expect 1 "bad.stk record 3 (global 3) at byte" "$STOKER" inspect --records bad.stk

# In a multi-shard directory: the shard file and its local record number are named.
cp -r shards badshards
last=$(cd badshards && ls *.stk | tail -n1)
off=$(offset_of "badshards/$last" "bee-image-03")
[ -n "$off" ] || fail "bee-image-03 not in the last shard $last"
flip "badshards/$last" $((off + 5))
expect 1 "badshards/$last record" "$STOKER" verify badshards
grep -q "(global 9) at byte [0-9]*: checksum mismatch" out.txt || fail "global number: $(cat out.txt)"

# ---- damage found at open: corrupt index, truncated shard, bad magic, not a shard ----
cp one.stk idx.stk
size=$(stat -c %s idx.stk)
flip idx.stk $((size - 64 - 10))
expect 1 "stoker verify: idx.stk: corrupt index (checksum mismatch)" "$STOKER" verify idx.stk
expect 1 "idx.stk: corrupt index" "$STOKER" inspect idx.stk
head -c $((size / 2)) one.stk > cut.stk
expect 1 "stoker verify: cut.stk: truncated or incomplete shard (footer missing)" \
    "$STOKER" verify cut.stk
expect 1 "cut.stk: truncated" "$STOKER" verify one.stk cut.stk
expect 1 "cut.stk: truncated" "$STOKER" inspect cut.stk
head -c $((size - 1)) one.stk > cut2.stk
expect 1 "cut2.stk: truncated or incomplete shard" "$STOKER" verify cut2.stk
printf 'STOK' > text.stk   # a prefix of the magic: a shard cut short
expect 1 "text.stk: truncated or incomplete shard" "$STOKER" verify text.stk
: > zero.stk
expect 1 "zero.stk: truncated or incomplete shard" "$STOKER" verify zero.stk
printf 'hello, this is not a shard; just text for the test' > text2.stk
expect 1 "text2.stk: bad magic (not a .stk shard)" "$STOKER" verify text2.stk
expect 1 "missing.stk: No such file or directory" "$STOKER" verify missing.stk
expect 1 "nomatch-*.stk: no file matches" "$STOKER" inspect 'nomatch-*.stk'
mkdir -p emptydir
expect 1 "emptydir: no .stk shards" "$STOKER" verify emptydir

# ---- usage ----
expect 2 "no DATA given" "$STOKER" verify
expect 2 "no DATA given" "$STOKER" inspect --json
expect 2 "unknown option '--nope'" "$STOKER" verify --nope one.stk
expect 2 "--threads" "$STOKER" verify --threads x one.stk
expect 2 "unknown option '-z'" "$STOKER" inspect -z one.stk
expect 0 "usage: stoker inspect DATA" "$STOKER" inspect --help
expect 0 "usage: stoker verify DATA" "$STOKER" verify --help
expect 0 "usage: stoker pack SRC OUT" "$STOKER" help pack
# every command's --help (and the top level's) lists every format the library reads, with what
# it reads; none still says DATA is .stk only (issue 30)
for cmd in inspect verify pack bench doctor ""; do
    "$STOKER" $cmd --help > help.txt 2>&1 || fail "$cmd --help exit status"
    grep -qiE "DATA arguments are .stk|DATA \(\.stk files|an ImageFolder tree into" \
        help.txt && fail "stoker $cmd --help still describes a .stk-only tool: $(cat help.txt)"
    for f in stk npy hdf5 lmdb tfrecord wds imagefolder; do
        grep -qE "^  $f +[a-zA-Z.]" help.txt || fail "$cmd --help does not list format $f"
    done
done

# ---- verify --decode: every image decoded (strict), failures named by record and path ----
mkdir -p imgs/cat imgs/dog
$PY - <<'PYEOF' || fail "cannot write the test images with PIL"
import io
import numpy as np
from PIL import Image
rng = np.random.default_rng(3)
im = Image.fromarray(rng.integers(0, 256, (24, 32, 3), dtype=np.uint8))
for i, (name, kw) in enumerate([("a.jpg", {}), ("b.png", {}), ("c.bmp", {}), ("d.webp", {}),
                                ("e.tif", {}), ("f.ppm", {})]):
    im.save("imgs/cat/" + name, **kw)
buf = io.BytesIO()
im.save(buf, "JPEG", quality=90)
j = buf.getvalue()
# a marker in the middle of the entropy-coded data ("premature end of data segment"); bytes
# before EOI would not do: strict decoding accepts them (docs/images.md "Strict decoding")
sos = j.index(b"\xff\xda")
mid = (sos + 2 + (j[sos + 2] << 8 | j[sos + 3]) + len(j) - 2) // 2
while j[mid - 1] == 0xFF:
    mid += 1
open("imgs/dog/junk.jpg", "wb").write(j[:mid] + b"\xff\xd9" + j[mid:])
open("imgs/dog/cut.png", "wb").write(open("imgs/cat/b.png", "rb").read()[:100])
open("imgs/dog/ok.jpg", "wb").write(j)
PYEOF
"$STOKER" pack --quiet imgs imgs.stk
expect 0 "all good, 0 bad" "$STOKER" verify imgs.stk # the checksums are fine
expect 1 "2 bad" "$STOKER" verify --decode --quiet imgs.stk
grep -qF 'imgs.stk record 6 (global 6, path "dog/cut.png"): image: PNG: ' out.txt ||
    fail "verify --decode: the truncated PNG: $(cat out.txt)"
grep -qF 'imgs.stk record 7 (global 7, path "dog/junk.jpg"): image: JPEG: Corrupt JPEG data: ' \
    out.txt || fail "verify --decode: the corrupt JPEG: $(cat out.txt)"
[ "$(grep -c '^imgs.stk record' out.txt)" -eq 2 ] || fail "verify --decode lists more: $(cat out.txt)"
expect 1 "images of 'image' decoded" "$STOKER" verify --decode=image --threads 1 imgs.stk
expect 1 "--decode: no field 'pixels'" "$STOKER" verify --decode=pixels imgs.stk
expect 1 "--decode: field 'label' is not a bytes field" "$STOKER" verify --decode=label imgs.stk
mkdir -p sounds/yes  # an audio tree (issue 27): --decode decodes its audio (test_audio_cli.sh)
$PY -c 'import wave; w = wave.open("sounds/yes/a.wav", "wb"); w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000); w.writeframes(bytes(3200)); w.close()'
expect 0 "all good, 0 bad (imagefolder keeps no checksums; audio of 'audio' decoded" \
    "$STOKER" verify --decode sounds
rm -rf imgs/dog/junk.jpg imgs/dog/cut.png
"$STOKER" pack --quiet imgs good.stk
expect 0 "all good, 0 bad" "$STOKER" verify --decode good.stk
expect 0 "--decode" "$STOKER" verify --help

# ---- verify on formats without checksums (issue 30): what can be checked is, and said so ----
# An ImageFolder tree of 6 JPEGs, 3 of them broken: each broken file named, exit 1 (it once
# said "6 records in 1 shard: all good").
mkdir -p six/a six/b
for i in 0 1 2; do cp imgs/dog/ok.jpg six/a/$i.jpg; done
head -c 300 imgs/dog/ok.jpg > six/b/cut.jpg
cp imgs/cat/a.jpg six/b/whole.jpg
printf 'not a jpeg at all' > six/b/text.jpg
cp "$(ls imgs/cat/b.png)" six/b/png-named-jpg.jpg # a PNG under a .jpg name decodes: not broken
expect 1 "7 records in 1 shard: 2 bad (imagefolder keeps no checksums; images of 'image' decoded" \
    "$STOKER" verify six
grep -q "^six/b/cut.jpg (record [0-9]*): image: JPEG: " out.txt || fail "cut.jpg: $(cat out.txt)"
grep -q "^six/b/text.jpg (record [0-9]*): image: " out.txt || fail "text.jpg: $(cat out.txt)"
[ "$(grep -c ': image: ' out.txt)" -eq 2 ] || fail "verify six lists more: $(cat out.txt)"
rm six/b/cut.jpg six/b/text.jpg
expect 0 "5 records in 1 shard: all good, 0 bad (imagefolder keeps no checksums; images of 'image' decoded" \
    "$STOKER" verify --threads 1 six
# .stk has checksums: said so (and the images are decoded only with --decode)
expect 0 "all good, 0 bad (XXH3 checksums checked; " "$STOKER" verify good.stk
# .npy keeps no checksums and has no encoded image: nothing checked beyond reading, said plainly
$PY -c 'import numpy as np; np.save("feats.npy", np.zeros((5, 3), np.float32))'
expect 0 "5 records in 1 shard: all readable, 0 bad (npy keeps no checksums and has no image or audio field to decode: nothing was checked beyond reading" \
    "$STOKER" verify feats.npy

# ---- top level ----
expect 0 "usage: stoker <command>" "$STOKER" --help
for c in pack inspect verify bench; do
    expect 0 "usage: stoker $c" "$STOKER" $c --help
    grep -q "$c" <("$STOKER" --help) || fail "--help does not list $c"
done
expect 0 "stoker 0." "$STOKER" --version
expect 2 "unknown command 'frobnicate'" "$STOKER" frobnicate
expect 2 "unknown option '--frob'" "$STOKER" --frob
expect 2 "usage: stoker <command>" "$STOKER"
echo "test_inspect_verify: ok"

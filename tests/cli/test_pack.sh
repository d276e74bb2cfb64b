# test_pack.sh: `stoker pack` on small ImageFolder trees: class order, labels, paths and bytes
# as torchvision's ImageFolder sees them, shard splitting, OUT handling, and every error case.
# Run by scripts/run_cli_tests.sh in a fresh temp dir with $STOKER set.
. "$(dirname "$0")/lib.sh"

# records FILE...: "label<TAB>path<TAB>image-text" per record, via inspect --json --records.
records() {
    "$STOKER" inspect --json --records "$@" | $PY -c '
import json, sys
d = json.load(sys.stdin)
for r in d["record_list"]:
    print("%d\t%s\t%s" % (r["label"], r["path"]["text"], r["image"].get("text", "")))'
}

# A tree with nested folders whose names sort differently as paths than depth-first
# ("a" < "a-b" < "a/..." as strings), every extension in several cases, and non-images.
mkdir -p src/cat/a/deep src/cat/a-b src/cat/a.b src/dog/sub src/Zebra src/.hidden_cls
printf 'cat-top' > src/cat/top.jpg
printf 'cat-a' > src/cat/a/x.PNG
printf 'cat-deep' > src/cat/a/deep/y.JpEg
printf 'cat-ab' > src/cat/a-b/z.tiff
printf 'cat-adotb' > src/cat/a.b/w.webp
printf 'not an image' > src/cat/notes.txt
printf 'cat-ppm' > src/cat/p.ppm
printf 'dog-1' > src/dog/1.bmp
printf 'dog-2' > src/dog/sub/2.pgm
printf 'dog-3' > src/dog/sub/3.tif
printf 'zebra' > src/Zebra/z.jpg
printf 'hidden' > src/.hidden_cls/h.png
printf 'stray' > src/stray.jpg          # a file at the top: not a class, ignored
ln -s ../dog/1.bmp src/cat/link.jpg    # symlinked file: followed
mkdir -p elsewhere/inner && printf 'linked-dir' > elsewhere/inner/l.jpg
ln -s ../../elsewhere src/dog/ext      # symlinked directory: followed (followlinks=True)
ln -s .. src/dog/sub/loop              # a loop: walked once, never forever

expect 0 "packed 13 records (4 classes)" "$STOKER" pack src out.stk
[ -f out.stk ] || fail "out.stk missing"
ls -a | grep -q '\.tmp\.' && fail "temporary file left"

records out.stk > got.txt
cat > want.txt <<'EOF'
0	.hidden_cls/h.png	hidden
1	Zebra/z.jpg	zebra
2	cat/link.jpg	dog-1
2	cat/p.ppm	cat-ppm
2	cat/top.jpg	cat-top
2	cat/a/x.PNG	cat-a
2	cat/a-b/z.tiff	cat-ab
2	cat/a.b/w.webp	cat-adotb
2	cat/a/deep/y.JpEg	cat-deep
3	dog/1.bmp	dog-1
3	dog/ext/inner/l.jpg	linked-dir
3	dog/sub/2.pgm	dog-2
3	dog/sub/3.tif	dog-3
EOF
# sorted(os.walk()) orders directories as path strings: "cat/a" < "cat/a-b" < "cat/a.b" <
# "cat/a/deep" ('-' and '.' sort before '/'). The loop leads back to dog/, already being walked:
# stoker skips it (torchvision would descend until the path is too long).
diff want.txt got.txt || fail "records differ from the expected ImageFolder order"

# Same order and labels as torchvision itself, where it is installed (loop removed first).
rm src/dog/sub/loop
expect 0 "packed 13 records" "$STOKER" pack --force src out.stk
records out.stk | cut -f1,2 > got.txt
if $PY -c 'import torchvision' 2>/dev/null; then
    $PY - > tv.txt <<'EOF'
from torchvision.datasets.folder import find_classes, make_dataset, IMG_EXTENSIONS
classes, idx = find_classes("src")
for path, label in make_dataset("src", idx, IMG_EXTENSIONS):
    print("%d\t%s" % (label, path[len("src/"):]))
EOF
    diff tv.txt got.txt || fail "order or labels differ from torchvision's ImageFolder"
else
    echo "torchvision not importable: skipping the side-by-side check"
fi

# Metadata: classes in label order, source and tool.
"$STOKER" inspect --json out.stk | $PY -c '
import json, sys
d = json.load(sys.stdin)
m = d["metadata"]
assert m["source"] == "imagefolder", m
assert m["classes"] == [".hidden_cls", "Zebra", "cat", "dog"], m
assert m["tool"].startswith("stoker pack "), m
assert d["classes"] == 4 and d["records"] == 13 and len(d["shards"]) == 1
names = [f["name"] for f in d["fields"]]
assert names == ["image", "label", "path"], names
assert [f["kind"] for f in d["fields"]] == ["bytes", "int64", "bytes"]
' || fail "metadata/fields"

# Image bytes are stored exactly (binary content, every byte value).
mkdir -p bin/a && head -c 3000 /dev/urandom > bin/a/r.jpg
$PY -c 'import sys; sys.stdout.buffer.write(bytes(range(256)) * 4)' > bin/a/s.png
"$STOKER" pack --quiet bin bin.stk
"$STOKER" verify bin.stk > /dev/null || fail "verify of binary pack"
"$STOKER" inspect --json --records bin.stk | $PY -c '
import json, sys
d = json.load(sys.stdin)
sizes = [r["image"]["size"] for r in d["record_list"]]
assert sizes == [3000, 1024], sizes
' || fail "binary sizes"
# The stored bytes are the file: find the 1 KiB pattern verbatim inside the shard.
$PY - <<'EOF' || fail "binary bytes not stored verbatim"
data = open("bin.stk", "rb").read()
assert bytes(range(256)) * 4 in data
assert open("bin/a/r.jpg", "rb").read() in data
EOF

# --quiet prints nothing on success.
"$STOKER" pack --quiet --force src out.stk > q.txt 2>&1
[ ! -s q.txt ] || fail "--quiet printed: $(cat q.txt)"

# ---- shards: a directory OUT, split by --shard-size ----
mkdir -p many/c0 many/c1
for i in $(seq -w 0 19); do head -c 1000 /dev/zero | tr '\0' "x" > many/c$((10#$i % 2))/img$i.jpg; done
expect 0 "into 7 shards" "$STOKER" pack many shards --shard-size 4k
ls shards | grep -v stoker-manifest.json > list.txt
[ "$(head -n1 list.txt)" = shard-00000.stk ] || fail "first shard name: $(cat list.txt)"
[ "$(wc -l < list.txt)" -eq 7 ] || fail "expected 7 shards: $(cat list.txt)"
for f in shards/*.stk; do
    [ "$(stat -c %s "$f")" -le 4096 ] || fail "$f is over --shard-size: $(stat -c %s "$f")"
done
# The split keeps the order: same records as one shard.
"$STOKER" pack --quiet many one.stk
records shards > split.txt
records one.stk > whole.txt
diff whole.txt split.txt || fail "split changed the records"
[ "$(wc -l < split.txt)" -eq 20 ] || fail "split lost records"
"$STOKER" inspect --json shards | $PY -c '
import json, sys
d = json.load(sys.stdin)
assert d["records"] == 20
firsts = [s["first_record"] for s in d["shards"]]
assert firsts == sorted(firsts) and firsts[0] == 0
assert sum(s["records"] for s in d["shards"]) == 20
' || fail "shard facts"
# A record larger than --shard-size gets a shard of its own rather than failing.
expect 0 "into 20 shards" "$STOKER" pack many tiny --shard-size 100

# OUT without .stk and without --shard-size: a directory with the default 1G limit.
expect 0 "into 1 shard" "$STOKER" pack many outdir
[ -f outdir/shard-00000.stk ] || fail "outdir/shard-00000.stk missing"
# Trailing slashes change nothing: same relative paths, no doubled slash.
expect 0 "into 1 shard" "$STOKER" pack many/ slash/
[ -f slash/shard-00000.stk ] || fail "slash/shard-00000.stk missing"
records slash > slash.txt
diff whole.txt slash.txt || fail "a trailing slash on SRC changed the records"
"$STOKER" inspect --json slash/ | grep -q '"slash/shard-00000.stk"' || fail "doubled slash"
# Sizes: suffixes and plain bytes.
expect 0 "packed 20" "$STOKER" pack many s1 --shard-size 1M
expect 0 "packed 20" "$STOKER" pack many s2 --shard-size 5000
expect 0 "packed 20" "$STOKER" pack many s3 --shard-size 0.5GiB
expect 0 "packed 20" "$STOKER" pack many s4.stk --align 4096
expect 0 "packed 20" "$STOKER" pack many s5.stk --align 1

# ---- OUT already exists ----
expect 1 "out.stk already exists" "$STOKER" pack src out.stk
expect 0 "packed 13" "$STOKER" pack src out.stk --force
expect 1 "shards is not empty" "$STOKER" pack src shards
# --force into a non-empty directory: the old shards are removed (after the new manifest).
expect 0 "into 1 shard" "$STOKER" pack --force src shards
[ "$(ls shards | wc -l)" -eq 2 ] || fail "stale shards left: $(ls shards)"
[ -f shards/stoker-manifest.json ] || fail "no manifest in shards"
"$STOKER" verify shards > /dev/null || fail "verify after --force"
printf 'x' > afile
expect 1 "afile already exists and is not a directory" "$STOKER" pack src afile
expect 0 "packed 13" "$STOKER" pack --force src afile
[ -f afile/shard-00000.stk ] || fail "afile not replaced by a directory"

# ---- errors in SRC ----
expect 1 "nope: No such file or directory" "$STOKER" pack nope o1.stk
expect 1 "afile2: unknown format" sh -c "printf x > afile2 && \"$STOKER\" pack afile2 o1.stk"
mkdir -p noclass && printf 'x' > noclass/a.jpg
expect 1 "no class folders in noclass" "$STOKER" pack noclass o1.stk
mkdir -p emptysrc
expect 1 "no class folders in emptysrc" "$STOKER" pack emptysrc o1.stk
mkdir -p partial/cat partial/dog/deeper && printf 'x' > partial/cat/a.jpg
printf 'text' > partial/dog/deeper/readme.txt
expect 1 "class folder 'dog' in partial contains no images (extensions: .jpg .jpeg" \
    "$STOKER" pack partial o1.stk
mkdir -p partial/ant
expect 1 "class folders 'ant', 'dog' in partial contain no images" "$STOKER" pack partial o1.stk
# An unreadable image (a dangling symlink: root reads anything, even mode 000) is named, and
# nothing is left behind, neither in a new OUT directory nor as a .stk file.
mkdir -p bad/cat && printf 'x' > bad/cat/a.jpg && ln -s /nonexistent/file bad/cat/b.jpg
expect 1 "bad/cat/b.jpg: cannot read: No such file or directory" "$STOKER" pack bad o2.stk
[ ! -e o2.stk ] || fail "o2.stk left after a failure"
expect 1 "bad/cat/b.jpg" "$STOKER" pack bad o3dir --shard-size 1k
[ ! -e o3dir ] || fail "o3dir left after a failure"
ls -a | grep -q '\.tmp\.' && fail "temporary file left after a failure"
if [ "$(id -u)" -ne 0 ]; then
    mkdir -p perm/cat && printf 'x' > perm/cat/a.jpg && chmod 000 perm/cat/a.jpg
    expect 1 "perm/cat/a.jpg: cannot read: Permission denied" "$STOKER" pack perm o4.stk
fi

# ---- usage errors: exit 2 ----
expect 2 "expected SRC and OUT" "$STOKER" pack src
expect 2 "expected SRC and OUT" "$STOKER" pack
expect 2 "unknown option '--bogus'" "$STOKER" pack --bogus src o.stk
expect 2 "needs a value" "$STOKER" pack src o.stk --shard-size
expect 2 "--shard-size: invalid size 'lots'" "$STOKER" pack src o.stk --shard-size lots
expect 2 "--shard-size: invalid size '0'" "$STOKER" pack src o.stk --shard-size 0
expect 2 "--align must be a power of two" "$STOKER" pack src o.stk --align 48
expect 0 "usage: stoker pack SRC OUT" "$STOKER" pack --help

# ---- progress bar: only on a TTY ----
"$STOKER" pack --force many tty.stk 2> notty.txt > /dev/null
grep -q 'records' notty.txt && fail "progress bar without a TTY"
if script -qec "true" /dev/null > /dev/null 2>&1; then
    script -qec "\"$STOKER\" pack --force many tty.stk" /dev/null > tty.txt
    grep -q '\] 20/20 records' tty.txt || fail "no progress bar on a TTY: $(cat -v tty.txt)"
    script -qec "\"$STOKER\" pack --quiet --force many tty.stk" /dev/null > tty.txt
    grep -q 'records' tty.txt && fail "--quiet drew a progress bar"
fi
# ---- any format in, through the record sources (issue 11) ----
# inspect, verify and pack read the ImageFolder tree itself, exactly as they read its shards.
expect 0 "format:      imagefolder" "$STOKER" inspect src
expect 0 '"format": "imagefolder"' "$STOKER" inspect --json src
expect 0 "format:      stk" "$STOKER" inspect out.stk
records src > direct.txt
records out.stk > packed.txt
diff direct.txt packed.txt || fail "the tree read directly differs from its packed shard"
# An ImageFolder keeps no checksums: verify decodes its images instead, and these are text
# named like images, so each is named as broken, by its file (issue 30).
expect 1 "13 records in 1 shard: 13 bad (imagefolder keeps no checksums; images of 'image' decoded" \
    "$STOKER" verify src
grep -q "^src/cat/a/deep/y.JpEg (record [0-9]*): image: " out.txt || fail "verify src: $(cat out.txt)"
[ "$(grep -c ': image: ' out.txt)" -eq 13 ] || fail "verify src: $(cat out.txt)"
expect 0 '"samples": 13,' "$STOKER" bench src --format imagefolder --json --quiet
expect 1 "unknown format 'tar'" "$STOKER" inspect --format tar src
expect 0 "packed 13 records (4 classes) from out.stk (stk)" "$STOKER" pack out.stk again.stk
records again.stk > again.txt
diff packed.txt again.txt || fail "repacking a .stk changed its records"
# A FIFO named like an image is skipped with a warning, never opened (it would block).
mkdir -p fifo/cls && printf 'x' > fifo/cls/a.jpg && mkfifo fifo/cls/pipe.jpg
expect 0 "skipped 1 entries of fifo that are not regular files" timeout 20 "$STOKER" pack fifo f.stk
expect 0 "records:     1" "$STOKER" inspect f.stk
echo "test_pack: ok"

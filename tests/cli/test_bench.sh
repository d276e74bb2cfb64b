# test_bench.sh: `stoker bench` on a small packed dataset: the JSON contract of DESIGN.md
# (samples_per_s, samples, seconds, threads), epochs and sample counts, the memcpy ceiling, the
# exact decode by default for an evaluation recipe (--fast, --exact), and
# bad arguments (exit 2 with a message) and bad data (exit 1 naming the file).
# Run by scripts/run_cli_tests.sh in a fresh temp dir with $STOKER set.
. "$(dirname "$0")/lib.sh"

# 3 classes x 30 files of random bytes, 1000 to 4293 bytes (pack stores files as they are).
random_files src 90 "a b c" 1000 37
"$STOKER" pack --quiet src data.stk > /dev/null || fail "pack"

# JSON: one object with the contract's keys; 90 records x 3 epochs = 270 samples.
"$STOKER" bench data.stk --threads 2 --epochs 3 --batch-size 16 --json > b.json || fail "bench"
$PY - <<'PYEOF' || fail "bench --json contents: $(cat b.json)"
import json
d = json.load(open("b.json"))
assert d["samples"] == 270, d
assert d["threads"] == 2, d
assert d["samples_per_s"] > 0 and d["seconds"] > 0, d
assert abs(d["samples_per_s"] - d["samples"] / d["seconds"]) < 0.01 * d["samples_per_s"], d
assert d["bytes_per_s"] > 0 and d["first_batch_ms"] >= 0 and d["ring_mib"] > 0, d
# the first epoch and the later ones apart (issue 29): they add up to the run
f, l = d["first_epoch"], d["later_epochs"]
assert f["samples"] == 90 and l["samples"] == 180, d
assert abs(f["seconds"] + l["seconds"] - d["seconds"]) < 1e-3, d
assert abs(f["cpu_s"] + l["cpu_s"] - d["cpu_s"]) < 1e-3, d
for p in (f, l):  # (seconds are printed to the microsecond: a part may take only a few)
    assert p["seconds"] > 0 and p["samples_per_s"] > 0, d
    assert abs(p["samples"] / p["samples_per_s"] - p["seconds"]) < 2e-6 + 1e-3 * p["seconds"], d
assert "ceiling" not in d and "first_epoch_ratio_to_ceiling" not in d, d
PYEOF

# --max-samples stops early (at a batch boundary), shuffle runs, and the ceiling reports a ratio.
"$STOKER" bench data.stk --threads 1 --batch-size 10 --max-samples 40 --shuffle --ceiling --json \
    > c.json || fail "bench --ceiling"
$PY - <<'PYEOF' || fail "bench --ceiling contents: $(cat c.json)"
import json
d = json.load(open("c.json"))
assert d["samples"] == 40, d
assert d["ceiling"]["kind"] == "memcpy" and d["ceiling"]["samples"] == 40, d
assert d["ratio_to_ceiling"] > 0, d
# stopped inside the first epoch: it is all first epoch, no later ones
assert d["first_epoch"]["samples"] == 40 and d["later_epochs"] is None, d
assert d["ceiling"]["first_epoch"]["samples"] == 40 and d["ceiling"]["later_epochs"] is None, d
assert d["first_epoch_ratio_to_ceiling"] > 0 and d["later_epochs_ratio_to_ceiling"] is None, d
PYEOF

# An image recipe: the ceiling decodes every JPEG (TurboJPEG), per epoch; the table names the
# first epoch and the later ones.
$PY - <<'PYEOF' || fail "making JPEGs"
import os
import numpy as np
from PIL import Image
rng = np.random.default_rng(1)
for c in "ab":
    os.makedirs(f"img/{c}", exist_ok=True)
    for i in range(6):
        a = rng.integers(0, 256, (40 + 7 * i, 56, 3), dtype=np.uint8)
        Image.fromarray(a).save(f"img/{c}/{i}.jpg", quality=90)
PYEOF
"$STOKER" pack --quiet img img.stk > /dev/null || fail "pack JPEGs"
"$STOKER" bench img.stk --recipe imagenet-train --threads 2 --epochs 3 --batch-size 4 --ceiling \
    --json > i.json || fail "bench imagenet-train --ceiling: $(cat i.json)"
$PY - <<'PYEOF' || fail "bench imagenet-train --ceiling contents: $(cat i.json)"
import json
d = json.load(open("i.json"))
c = d["ceiling"]
assert c["kind"] == "decode" and c["samples"] == 36, d
assert c["first_epoch"]["samples"] == 12 and c["later_epochs"]["samples"] == 24, d
assert d["first_epoch"]["samples"] == 12 and d["later_epochs"]["samples"] == 24, d
for k in ("first_epoch_ratio_to_ceiling", "later_epochs_ratio_to_ceiling",
          "cpu_first_epoch_ratio_to_ceiling", "cpu_later_epochs_ratio_to_ceiling"):
    assert d[k] > 0, (k, d)
PYEOF
expect 0 "later epochs" "$STOKER" bench img.stk --recipe imagenet-train --threads 1 --epochs 2 \
    --batch-size 4 --ceiling --quiet
grep -qF "first epoch" out.txt || fail "bench table lacks the first epoch: $(cat out.txt)"

# A sweep: every combination runs; the plot is a well-formed SVG with one line per depth plus
# the ceiling; the trace of the last run is trace-event JSON with a track per thread.
"$STOKER" bench data.stk --threads 1,2 --prefetch 2,3 --batch-size 8 --plot sweep.svg \
    --trace trace.json --json > sweep.json || fail "bench sweep"
$PY - <<'PYEOF' || fail "sweep outputs: $(cat sweep.json)"
import json, xml.etree.ElementTree as ET
d = json.load(open("sweep.json"))
runs = d["runs"]
assert [(r["threads"], r["prefetch"]) for r in runs] == [(1, 2), (1, 3), (2, 2), (2, 3)], runs
assert all(r["samples_per_s"] > 0 and r["ceiling_samples_per_s"] > 0 for r in runs), runs
svg = ET.parse("sweep.svg").getroot()
lines = [e for e in svg.iter() if e.tag.endswith("polyline")]
assert len(lines) == 3, len(lines)  # prefetch 2, prefetch 3, ceiling
assert all(len(l.get("points").split()) == 2 for l in lines)
t = json.load(open("trace.json"))
names = {e["args"]["name"] for e in t["traceEvents"] if e["ph"] == "M"}
assert names == {"consumer", "worker 0", "worker 1"}, names
busy = 0
for tid in (0, 1, 2):  # slices on one track never overlap
    xs = sorted((e["ts"], e["ts"] + e["dur"]) for e in t["traceEvents"]
                if e["ph"] == "X" and e["tid"] == tid)
    # The consumer always has slices; a worker may have none when the other one took every
    # sample of this short run (a loaded machine starts threads late), but not both.
    assert xs or tid > 0, tid
    busy += tid > 0 and bool(xs)
    assert all(a[1] <= b[0] + 1e-3 for a, b in zip(xs, xs[1:])), tid
assert busy >= 1
PYEOF

# --threads auto: the autotuner's choice is reported.
"$STOKER" bench data.stk --threads auto --epochs 2 --batch-size 8 --json > auto.json || fail "auto"
$PY -c 'import json; d = json.load(open("auto.json")); assert d["stats"]["active_threads"] >= 1, d' \
    || fail "auto: $(cat auto.json)"
expect 2 "auto" "$STOKER" bench data.stk --threads auto --plot x.svg
expect 2 "--prefetch" "$STOKER" bench data.stk --prefetch 2,0
expect 1 "nonexistent" "$STOKER" bench data.stk --threads 1 --trace /nonexistent/t.json

# The human-readable table.
expect 0 "samples/s" "$STOKER" bench data.stk --threads 1 --quiet
expect 0 "usage: stoker bench" "$STOKER" bench --help

# Bad arguments: exit 2 with a message naming the option.
expect 2 "--threads" "$STOKER" bench data.stk --threads -1
expect 2 "--batch-size" "$STOKER" bench data.stk --batch-size 0
expect 2 "--epochs" "$STOKER" bench data.stk --epochs 0
expect 2 "unknown recipe" "$STOKER" bench data.stk --recipe resnet
expect 2 "no DATA" "$STOKER" bench
expect 2 "--bogus" "$STOKER" bench data.stk --bogus

# Bad data: exit 1 naming the file.
expect 1 "missing.stk" "$STOKER" bench missing.stk
head -c 1000 data.stk > cut.stk
expect 1 "cut.stk" "$STOKER" bench cut.stk
# The image recipes on records that are not images: an error naming shard and record.
expect 1 "data.stk record" "$STOKER" bench data.stk --recipe imagenet-val --threads 1

# The field an image recipe reads: picked (a uint8 image array in .npy files; its ceiling is the
# memcpy of the arrays), or named with --field; several candidates: exit 1 naming them.
mkdir npy
$PY -c "
import numpy as np
np.save('npy/pixels.npy', np.random.default_rng(0).integers(0, 256, (12, 40, 30, 3), np.uint8))
np.save('npy/label.npy', np.arange(12))
np.save('npy/depth.npy', np.zeros((12, 40, 30), np.uint8))" || fail "write npy"
"$STOKER" bench npy --recipe imagenet-val --threads 1 --batch-size 4 --ceiling --json \
    > a.json || fail "bench on a uint8 array: $(cat a.json)"
$PY -c "import json; j = json.load(open('a.json')); assert j['samples'] == 12 and \
j['ceiling']['kind'] == 'memcpy', j" || fail "bench on a uint8 array: $(cat a.json)"
expect 0 "samples/s" "$STOKER" bench npy --recipe imagenet-train --threads 1 --field depth
# An evaluation recipe (its ops draw nothing) decodes exactly unless --fast; a training recipe
# keeps the fast decode unless --exact (issue 24); the two flags exclude each other.
for r in "imagenet-val:True" "imagenet-val --fast:False" "imagenet-train:False" \
         "imagenet-train --exact:True"; do
    "$STOKER" bench npy --recipe ${r%%:*} --threads 1 --batch-size 4 --json > e.json ||
        fail "bench --recipe ${r%%:*}: $(cat e.json)"
    $PY -c "import json; j = json.load(open('e.json')); assert j['exact'] is ${r##*:}, j" ||
        fail "bench --recipe ${r%%:*}: exact is not ${r##*:}: $(cat e.json)"
done
expect 2 "--exact and --fast" "$STOKER" bench npy --recipe imagenet-val --exact --fast
expect 1 "field 'label' is an int64" "$STOKER" bench npy --recipe imagenet-val --field label
expect 1 "'nope' is not in the dataset" "$STOKER" bench npy --recipe imagenet-val --field nope
for k in a b; do head -c 300 /dev/urandom > $k.jpg; cp $k.jpg $k.png; done
tar cf two.tar a.jpg a.png b.jpg b.png
expect 1 "('jpg', 'png'); name it with transform_field= (Python) or --field" \
    "$STOKER" bench two.tar --recipe imagenet-val --threads 1
expect 1 "two.tar" "$STOKER" bench two.tar --recipe imagenet-val --threads 1 --field png
echo "bench: ok"

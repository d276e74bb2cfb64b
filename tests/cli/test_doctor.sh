# test_doctor.sh: `stoker doctor` on a tiny packed JPEG dataset: a step that takes no time is
# data-bound with advice naming threads; a slow step is not; the JSON report has its fields;
# --trace; --python runs a script under the profiler (python3 -m stoker.doctor); and every bad
# input exits non-zero with a message naming the thing.
# Run by scripts/run_cli_tests.sh in a fresh temp dir with $STOKER set. Kept to a few seconds:
# short time budgets (--time) and --steps.
. "$(dirname "$0")/lib.sh"
fixtures="$(cd "$(dirname "$0")/../data/decode" && pwd)"

# 2 classes x 12 copies of two small real JPEGs (101x75, baseline and progressive).
for c in a b; do
    mkdir -p src/$c
    for i in $(seq 1 6); do
        cp "$fixtures/h4v2.jpg" src/$c/$i.jpg
        cp "$fixtures/h2v4_prog.jpg" src/$c/p$i.jpg
    done
done
"$STOKER" pack --quiet src data.stk > /dev/null || fail "pack"

# A step that takes no time, one thread, a decoding recipe: data-bound, and the advice names
# the thread count and a stage.
"$STOKER" doctor data.stk --recipe imagenet-val --threads 1 --step-ms 0 --batch-size 8 \
    --time 0.1 --json > fast.json || fail "doctor fast step"
$PY - <<'PYEOF' || fail "fast step report: $(cat fast.json)"
import json
d = json.load(open("fast.json"))
for k in ("data", "records", "recipe", "mode", "batch_size", "cpus", "ceiling", "best_threads",
          "best_samples_per_s", "dominant_stage", "step", "data_bound", "wait_share", "step_ms",
          "wait_ms", "demand_samples_per_s", "recommended_threads", "advice"):
    assert k in d, k
assert d["mode"] == "step" and d["records"] == 24 and d["recipe"] == "imagenet-val", d
assert d["data_bound"] is True and d["wait_share"] > 0.5, d
threads = [c["threads"] for c in d["ceiling"]]
assert threads[0] == 1 and threads == sorted(set(threads)) and threads[-1] >= d["cpus"], threads
for c in d["ceiling"]:
    assert c["samples_per_s"] > 0 and c["batches"] >= 1, c
    assert abs(sum(c["stages"].values()) - 1) < 0.01, c
    assert c["dominant_stage"] in ("read", "decode", "augment", "other"), c
s = d["step"]
assert s["threads"] == 1 and s["kind"] == "sleep" and s["steps"] >= 3, s
assert s["wait_share"] == d["wait_share"] and s["samples_per_s"] > 0, s
# the loader's own counter of the consumer's blocked time lies inside the doctor's timed calls
# over the same window (how much the call adds moves with the load: not compared), and the
# consumer did block (a step of no time over a decoding loader)
assert 0 < s["loader_consumer_wait_share"] <= s["wait_share"] + 1e-4, s
assert d["demand_samples_per_s"] is None  # a step of no time has unbounded demand
assert d["advice"] and any("thread" in a for a in d["advice"]), d["advice"]
assert any(st in " ".join(d["advice"]) for st in ("decod", "augment", "read")), d["advice"]
PYEOF
expect 0 "DATA-BOUND" "$STOKER" doctor data.stk --recipe imagenet-val --threads 1 --step-ms 0 \
    --batch-size 8 --time 0.1 --quiet
grep -q "samples/s" out.txt && grep -q "advice:" out.txt || fail "report: $(cat out.txt)"

# A slow step (200 ms per batch of 4): the report follows from what it measured; the trace has a
# consumer track. (Whether 200 ms outlasts the loader's batch is the machine's load's business,
# 41 samples/s was seen under `make test-under-load`: the verdict's rule is tested on synthetic
# measurements in tests/unit/doctor/test_diagnose.c, and here against the report's own figures.)
"$STOKER" doctor data.stk --recipe imagenet-val --threads 1 --step-ms 200 --batch-size 4 \
    --steps 4 --trace trace.json --json > slow.json || fail "doctor slow step"
$PY - <<'PYEOF' || fail "slow step report: $(cat slow.json)"
import json
d = json.load(open("slow.json"))
assert d["data_bound"] == (d["wait_share"] > 0.05), d
assert d["step"]["steps"] == 4 and d["step"]["step_ms"] >= 190, d["step"]
assert 0 < d["demand_samples_per_s"] <= 4 / 0.2 * 1.001, d  # a sleep never ends early
assert d["advice"] and d["advice"][0].startswith("not data-bound") != d["data_bound"], d["advice"]
t = json.load(open("trace.json"))
names = {e["args"]["name"] for e in t["traceEvents"] if e["ph"] == "M"}
assert names == {"consumer", "worker 0"}, names
PYEOF
expect 0 "step: 200.00 ms (spin) per batch of 4, 1 thread" "$STOKER" doctor data.stk \
    --recipe imagenet-val --threads 1 \
    --step-ms 200 --batch-size 4 --steps 4 --step-kind spin

# Without a step: the ceiling only, no verdict.
"$STOKER" doctor data.stk --batch-size 8 --steps 3 --json > ceil.json || fail "ceiling only"
$PY -c 'import json; d = json.load(open("ceil.json")); assert d["mode"] == "ceiling" and d["data_bound"] is None and d["ceiling"], d' \
    || fail "ceiling only: $(cat ceil.json)"

# --python: a script using stoker.Loader on STOKER_DATA/STOKER_RECIPE with a 30 ms step.
cat > train.py <<'EOF'
import os, sys, time
import stoker
assert os.environ["STOKER_RECIPE"] == "imagenet-val", os.environ["STOKER_RECIPE"]
loader = stoker.Loader(os.environ["STOKER_DATA"], batch_size=4, num_workers=1,
                       transforms=os.environ["STOKER_RECIPE"], output="numpy")
for epoch in range(100):
    for batch in loader:
        time.sleep(float(sys.argv[1]))
EOF
"$STOKER" doctor data.stk --recipe imagenet-val --steps 5 --time 0.1 --json \
    --python train.py 0.03 > py.json || fail "doctor --python: $(cat err.txt py.json)"
$PY - <<'PYEOF' || fail "--python report: $(cat py.json)"
import json
d = json.load(open("py.json"))
assert d["mode"] == "python", d
p = d["python"]
assert p["loader"] == "stoker.Loader" and p["steps"] == 5 and p["batch_size"] == 4, p
assert d["batch_size"] == 4, d  # the ceiling runs at the batch size the script uses
# the verdict is the profiler's (whether a 30 ms step waits depends on the machine's load)
assert d["data_bound"] == p["data_bound"] == (p["wait_share"] > 0.05), d
assert abs(d["step_ms"] - p["step_ms"]) < 1e-3 and d["step_ms"] >= 25, d
assert d["advice"], d
PYEOF
expect 0 "script train.py" "$STOKER" doctor data.stk --recipe imagenet-val --steps 5 --time 0.1 \
    --python train.py 0.03

# A DataLoader script: the report names where its __getitem__ runs (the profiler's "costs").
cat > dl.py <<'EOF'
import time
from torch.utils.data import DataLoader
for x in DataLoader(list(range(400)), batch_size=4, num_workers=0):
    time.sleep(0.02)
EOF
"$STOKER" doctor data.stk --steps 4 --time 0.1 --python dl.py > dl.txt 2> err.txt ||
    fail "doctor --python dl.py: $(cat err.txt dl.txt)"
grep -q "python: __getitem__ in the main process (num_workers=0)" dl.txt ||
    fail "doctor --python dl.py: no python line: $(cat dl.txt)"
"$STOKER" doctor data.stk --steps 4 --time 0.1 --json --python dl.py > dl.json ||
    fail "doctor --python dl.py --json"
$PY -c 'import json; c = json.load(open("dl.json"))["python"]["costs"]; assert c["executor"] == "main" and c["batch_bytes"] == 32, c' ||
    fail "costs in the JSON: $(cat dl.json)"

# A script that fails: its exit status and error, exit 1.
printf 'raise ValueError("boom in the script")\n' > bad.py
expect 1 "exit status" "$STOKER" doctor data.stk --time 0.1 --steps 2 --python bad.py
grep -q "boom in the script" err.txt || fail "failing script: $(cat err.txt)"
expect 1 "cannot run the Python interpreter" env STOKER_PYTHON=/nonexistent/python3 \
    "$STOKER" doctor data.stk --time 0.1 --steps 2 --python train.py 0.01

# Bad input: a clear message naming the thing, non-zero exit, no hang.
expect 1 "missing.stk" "$STOKER" doctor missing.stk --step-ms 1
expect 2 "no DATA" "$STOKER" doctor --step-ms 1
expect 2 "unknown transform recipe 'resnet'" "$STOKER" doctor data.stk --recipe resnet --step-ms 1
expect 2 "--step-ms" "$STOKER" doctor data.stk --step-ms -1
expect 2 "--step-ms" "$STOKER" doctor data.stk --step-ms fast
expect 2 "--step-ms and --python" "$STOKER" doctor data.stk --step-ms 1 --python train.py
expect 2 "--python" "$STOKER" doctor data.stk --python
expect 2 "--step-kind" "$STOKER" doctor data.stk --step-ms 1 --step-kind nap
expect 2 "--threads" "$STOKER" doctor data.stk --step-ms 1 --threads 0
expect 2 "--bogus" "$STOKER" doctor data.stk --bogus
expect 1 "data.stk: not a .npy file" "$STOKER" doctor --format npy data.stk --step-ms 1
# any format, detected or named: the ImageFolder tree itself
"$STOKER" doctor src --format imagefolder --batch-size 8 --steps 3 --json > tree.json ||
    fail "doctor on the tree: $(cat tree.json)"
$PY -c 'import json; d = json.load(open("tree.json")); assert d["records"] == 24 and d["ceiling"], d' ||
    fail "doctor on the tree: $(cat tree.json)"
expect 1 "unknown format 'tar'" "$STOKER" doctor --format tar data.stk --step-ms 1
expect 1 "nothere.py" "$STOKER" doctor data.stk --python nothere.py
expect 1 "/nonexistent/t.json" "$STOKER" doctor data.stk --step-ms 0 --steps 2 --batch-size 8 \
    --trace /nonexistent/t.json
PYTHONPATH="$STK_BUILD/python" $PY -c 'import stoker; stoker.write_shard("empty.stk", {"image": "bytes"}, [])'
expect 1 "empty" "$STOKER" doctor empty.stk --step-ms 1
# Records that are not images under an image recipe: the error names shard and record.
mkdir -p junk/x && head -c 500 /dev/urandom > junk/x/1.jpg
"$STOKER" pack --quiet junk junk.stk > /dev/null || fail "pack junk"
expect 1 "junk.stk record" "$STOKER" doctor junk.stk --recipe imagenet-val --step-ms 1
expect 0 "usage: stoker doctor" "$STOKER" doctor --help
echo "doctor: ok"

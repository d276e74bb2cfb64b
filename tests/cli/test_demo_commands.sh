# test_demo_commands.sh: the commands `make demo` prints at its end (bench/bench_images.py's
# "commands" lines) run as printed, pasted into a shell where the demo ran: the stoker binary
# and the data named by paths valid there, `bench` spelt out (they once read
# `stoker bench/out/...`). A tiny run (10 images, no DataLoader sweep).
. "$(dirname "$0")/lib.sh"
root="$(cd "$(dirname "$0")/../.." && pwd)"
$PY "$root/bench/bench_images.py" --images 10 --repeat 1 --skip-torch --epochs 1 --threads 1 \
    --out out > demo.txt 2>&1 || fail "bench_images.py: $(cat demo.txt)"
sed -n '/^commands/,$p' demo.txt | tail -n +2 | sed 's/^    //' > commands.txt
[ "$(wc -l < commands.txt)" -eq 3 ] || fail "expected 3 commands: $(cat demo.txt)"
grep -q " bench out/jpeg_small_10.stk " commands.txt || fail "$(cat commands.txt)"
while IFS= read -r line; do
    bash -c "$line" > run.txt 2>&1 || fail "printed command failed: $line: $(cat run.txt)"
    grep -q "samples/s" run.txt || fail "printed command gave no figures: $line: $(cat run.txt)"
done < commands.txt
echo "demo commands: ok"

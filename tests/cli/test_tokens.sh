# test_tokens.sh: token corpora on the command line (docs/tokens.md): `stoker inspect` on each
# format (tokens, documents, the document-length histogram, rows with --seq-len), a bad header
# named by file, and the C example examples/train_tokens.c (built by `make examples`) looping over
# batches, saving its state at step 5 and resuming: the resumed steps are the uninterrupted ones.
# Run by scripts/run_cli_tests.sh in a fresh temp dir with $STOKER set.
. "$(dirname "$0")/lib.sh"
REPO=$(cd "$(dirname "$0")/../.." && pwd)
TRAIN="$STK_BUILD/examples/train_tokens"
[ -x "$TRAIN" ] || fail "$TRAIN is not built (make examples)"

PYTHONPATH="$REPO/python/tests" $PY - <<'EOF'
import numpy as np
from token_corpora import documents, stream, write_llmc, write_megatron, write_nanogpt
docs = documents(300, seed=1, eos=50256, vocab=50000)
ids = stream(docs)
write_nanogpt("train.bin", ids)
for k in range(3):
    write_llmc(f"fw_{k:06d}.bin", ids[k * 3000:(k + 1) * 3000])
write_megatron("corpus_text_document", documents(200, seed=2, eos=None), split=2)
open("ntok.txt", "w").write(str(len(ids)))
EOF
ntok=$(cat ntok.txt)

# ---- inspect ----
expect 0 "format:      nanogpt (2-byte ids)" "$STOKER" inspect train.bin
grep -q "documents:   1 (one per file: no boundaries known" out.txt || fail "no-boundary line: $(cat out.txt)"
expect 0 "documents:   300" "$STOKER" inspect train.bin --eos 50256
grep -qE "^ +[0-9]+ - [0-9]+ +[0-9,]+  #+" out.txt || fail "histogram: $(cat out.txt)"
expect 0 "packed rows of 64" "$STOKER" inspect train.bin --eos 50256 --seq-len 64 --tokens packed
grep -q "padding" out.txt || fail "packed padding: $(cat out.txt)"
expect 0 "format:      llmc" "$STOKER" inspect 'fw_*.bin'
grep -q "tokens:      9,000" out.txt || fail "llmc tokens: $(cat out.txt)"
expect 0 "format:      megatron" "$STOKER" inspect corpus_text_document.idx
grep -q "documents:   200" out.txt || fail "megatron documents: $(cat out.txt)"
"$STOKER" inspect --json corpus_text_document.idx --seq-len 32 | $PY -c '
import json, sys
d = json.load(sys.stdin)
t = d["tokens"]
assert d["format"] == "megatron" and t["n_documents"] == 200 and t["boundaries"], t
assert t["mode"] == "windows" and t["n_rows"] == (t["n_tokens"] - 1) // 32 == d["records"], t
assert sum(t["doc_hist"]) == 200
' || fail "inspect --json tokens"
"$STOKER" inspect --json train.bin --eos 50256 | $PY -c "
import json, sys
t = json.load(sys.stdin)['tokens']
assert t['n_tokens'] == $ntok and t['n_documents'] == 300, t
" || fail "inspect --json nanogpt"

# bad input: named by file
head -c 3000 fw_000001.bin > cut.bin
expect 1 "cut.bin: truncated llm.c shard" "$STOKER" inspect cut.bin
printf 'XXIDIDX\0\0' | dd of=corpus_text_document.idx conv=notrunc status=none
expect 1 "corpus_text_document.idx: bad header" "$STOKER" inspect corpus_text_document.idx
expect 2 "--tokens" "$STOKER" inspect train.bin --tokens sliding

# ---- the C trainer example: a loop over batches, a saved state, a resume ----
"$TRAIN" 'fw_*.bin' --seq-len 32 --batch 4 --steps 12 --seed 3 > full.txt 2> full.err ||
    fail "train_tokens: $(cat full.err)"
[ "$(grep -c '^step ' full.txt)" -eq 12 ] || fail "12 steps: $(cat full.txt)"
grep -q "llmc, 9000 tokens" full.err || fail "train_tokens header: $(cat full.err)"
"$TRAIN" 'fw_*.bin' --seq-len 32 --batch 4 --steps 5 --seed 3 --save-state s.json --save-at 5 \
    > part1.txt 2>/dev/null || fail "train_tokens --save-state"
grep -q '"consumed": 20' s.json || fail "state after 5 steps: $(cat s.json)"
"$TRAIN" 'fw_*.bin' --seq-len 32 --batch 4 --steps 7 --seed 99 --resume s.json > part2.txt \
    2>/dev/null || fail "train_tokens --resume"
sums() { sed -E 's/.* sum ([0-9a-f]+) .*/\1/' "$1"; }
[ "$(sums part1.txt)" = "$(sums full.txt | head -n 5)" ] || fail "the first 5 steps differ"
[ "$(sums part2.txt)" = "$(sums full.txt | tail -n 7)" ] || fail "resumed steps differ:
$(cat part2.txt)
---
$(cat full.txt)"
# each rank of two takes half of every global batch (ranks from the environment, as torchrun)
RANK=1 WORLD_SIZE=2 "$TRAIN" 'fw_*.bin' --seq-len 32 --batch 2 --steps 3 --seed 3 > r1.txt \
    2>/dev/null || fail "train_tokens on rank 1"
[ "$(grep -c 'rows 2 ' r1.txt)" -eq 3 ] || fail "rank 1 batches: $(cat r1.txt)"
expect 1 "nothing.bin" "$TRAIN" nothing.bin
echo "ok"

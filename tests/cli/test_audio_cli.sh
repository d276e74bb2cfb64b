# test_audio_cli.sh (issue 27): `stoker verify` on audio data decodes every file as the loader's
# strict first read does and names each broken one by file and record (a folder per class, a
# WebDataset tar, a .stk pack with --decode); `stoker bench --recipe kws-train` runs the
# keyword-spotting recipe on the same data, with its ceiling (libsndfile decoding the files).
# Run by scripts/run_cli_tests.sh in a fresh temp dir with $STOKER set.
. "$(dirname "$0")/lib.sh"

command -v sox > /dev/null || fail "sox is not installed (scripts/deps.sh installs it)"

# 2 classes x 3 good clips (16-bit WAV at 44.1 kHz, 1.2-1.6 s; one FLAC), then damaged ones: a
# truncated FLAC, a WAV whose data chunk says more than follows, a file that is not audio.
mkdir -p sounds/no sounds/yes
for c in no yes; do
    for i in 0 1 2; do
        sox -n -r 44100 -c 1 -b 16 "sounds/$c/$i.wav" synth "1.$((2 + i * 2))" sine "$((300 + i * 100))" vol 0.3
    done
done
sox sounds/yes/2.wav sounds/yes/3.flac
cp -r sounds good
head -c 3000 sounds/yes/3.flac > sounds/no/cut.flac
head -c 20000 sounds/no/1.wav > sounds/no/short.wav
printf 'this is not a sound' > sounds/yes/text.wav

# ---- a folder per class: every file decoded, each broken one named by file and record ----
expect 1 "10 records in 1 shard: 3 bad (imagefolder keeps no checksums; audio of 'audio' decoded" \
    "$STOKER" verify --quiet sounds
grep -q "^sounds/no/cut.flac (record [0-9]*): audio: FLAC: " out.txt || fail "cut.flac: $(cat out.txt)"
grep -q "^sounds/no/short.wav (record [0-9]*): audio: WAV: truncated: its data chunk at byte 36 says " \
    out.txt || fail "short.wav: $(cat out.txt)"
grep -q "^sounds/yes/text.wav (record [0-9]*): audio: not a supported audio file" out.txt ||
    fail "text.wav: $(cat out.txt)"
[ "$(grep -c ': audio: ' out.txt)" -eq 3 ] || fail "verify sounds lists more: $(cat out.txt)"
expect 0 "7 records in 1 shard: all good, 0 bad (imagefolder keeps no checksums; audio of 'audio' decoded" \
    "$STOKER" verify --quiet good

# ---- a WebDataset tar: members key.wav (the format from the bytes: one is FLAC), key.cls ----
$PY - <<'PYEOF' || fail "making the tar"
import io, os, tarfile
with tarfile.open("sounds.tar", "w") as t:
    for k, (path, cls) in enumerate([("good/no/0.wav", 0), ("sounds/no/cut.flac", 0),
                                     ("good/yes/0.wav", 1), ("sounds/no/short.wav", 0)]):
        for name, data in ((f"{k:04d}.wav", open(path, "rb").read()),
                           (f"{k:04d}.cls", str(cls).encode())):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
PYEOF
expect 1 "2 bad" "$STOKER" verify --quiet sounds.tar
grep -q "0001.*: wav: FLAC: " out.txt || fail "tar: the cut FLAC member: $(cat out.txt)"
grep -q "0003.*: wav: WAV: truncated" out.txt || fail "tar: the short WAV member: $(cat out.txt)"
grep -q "4 records in 1 shard: 2 bad (wds keeps no checksums; audio of 'wav' decoded" out.txt ||
    fail "tar: the summary: $(cat out.txt)"

# ---- a .stk pack: the checksums hold (they were taken of the broken bytes); --decode decodes ----
"$STOKER" pack --quiet sounds sounds.stk
expect 0 "all good, 0 bad (XXH3 checksums checked;" "$STOKER" verify --quiet sounds.stk
expect 1 "3 bad (XXH3 checksums checked; audio of 'audio' decoded" "$STOKER" verify --decode --quiet sounds.stk
grep -q '^sounds.stk record [0-9]* (global [0-9]*, path "no/cut.flac"): audio: FLAC: ' out.txt ||
    fail "stk --decode: cut.flac: $(cat out.txt)"
expect 1 "3 bad" "$STOKER" verify --decode=audio --threads 1 --quiet sounds.stk
"$STOKER" pack --quiet good good.stk
expect 0 "all good, 0 bad (XXH3 checksums checked; audio of 'audio' decoded" \
    "$STOKER" verify --decode --quiet good.stk

# ---- bench --recipe kws-train / kws-val on the good clips: a folder and its pack ----
expect 0 "kws-train" "$STOKER" bench --help
for data in good good.stk; do
    "$STOKER" bench "$data" --recipe kws-train --threads 2 --epochs 2 --batch-size 4 --json \
        --quiet > b.json || fail "bench --recipe kws-train $data: $(cat b.json)"
    $PY - <<'PYEOF' || fail "bench kws-train --json: $(cat b.json)"
import json
d = json.load(open("b.json"))
assert d["recipe"] == "kws-train" and d["samples"] == 14, d
assert d["first_epoch"]["samples"] == 7 and d["later_epochs"]["samples"] == 7, d
assert d["samples_per_s"] > 0, d
PYEOF
done
expect 0 "recipe kws-val" "$STOKER" bench good --recipe kws-val --threads 1 --batch-size 7 --quiet
# the audio ceiling: libsndfile decoding the same files whole, first and later epochs apart
"$STOKER" bench good.stk --recipe kws-train --threads 2 --epochs 3 --batch-size 4 --ceiling \
    --json --quiet > c.json || fail "bench --recipe kws-train --ceiling: $(cat c.json)"
$PY - <<'PYEOF' || fail "bench kws-train --ceiling --json: $(cat c.json)"
import json
d = json.load(open("c.json"))
c = d["ceiling"]
assert c["kind"] == "audio decode" and c["samples"] == 21, c
assert c["first_epoch"]["samples"] == 7 and c["later_epochs"]["samples"] == 14, c
for k in ("ratio_to_ceiling", "cpu_ratio_to_ceiling", "first_epoch_ratio_to_ceiling",
          "later_epochs_ratio_to_ceiling"):
    assert d[k] is not None and d[k] > 0, (k, d)
PYEOF
expect 0 "(audio decode, same records and threads)" \
    "$STOKER" bench good --recipe kws-val --threads 1 --epochs 2 --batch-size 7 --ceiling --quiet
grep -q "^  later epochs .*; / ceiling [0-9.]*, per CPU second [0-9.]*" out.txt ||
    fail "bench kws-val --ceiling: no later epochs' ratio: $(cat out.txt)"
# a broken clip fails the bench naming it, as the loader does
expect 1 "cut.flac (record" "$STOKER" bench sounds --recipe kws-val --threads 1 --quiet

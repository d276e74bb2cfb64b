"""Audio test data made here (issue 27): speech from espeak-ng in several voices and speeds,
music-like chords, sweeps and noise from sox, encoded by sox and ffmpeg to every codec stoker
reads (WAV PCM 8/16/24/32 and float, FLAC, Ogg Vorbis, Opus, MP3) at several rates and channel
counts; damaged copies (truncated, corrupted, empty, not audio) for the error tests. Nothing is
downloaded; a corpus takes a few seconds and ~3 MB.

make_corpus(dir) writes the files and returns a dict name -> path (and the groups the tests
use); tools_missing() says which of espeak-ng, sox and ffmpeg is absent (tests skip then).
"""
import os
import random
import shutil
import subprocess

TOOLS = ("espeak-ng", "sox", "ffmpeg")

# (name, espeak voice, words per minute, text)
SPEECH = [
    ("us_slow", "en-us", 120, "Stoker keeps the accelerator fed with audio."),
    ("gb_fast", "en-gb", 200, "Yes no up down left right on off stop go."),
    ("de", "de", 160, "Eins zwei drei vier fuenf sechs sieben."),
    ("scot", "en-gb-scotland", 150, "The quick brown fox jumps over the lazy dog."),
]

# (name, sox synth arguments): music-like tones and noise, 2-3 s
SYNTH = [
    ("chord", ["3", "sine", "220", "sine", "277", "sine", "330", "fade", "0.05", "3", "0.3"]),
    ("sweep", ["2.5", "sine", "200-3000"]),
    ("pluck", ["2", "pluck", "C3", "pluck", "E3"]),
    ("pink", ["1.5", "pinknoise", "vol", "0.3"]),
]


def tools_missing():
    return [t for t in TOOLS if shutil.which(t) is None]


def _run(args):
    if args[0] == "sox":  # repeatable: the same dither and noise in every session, so that a
        # test's margin does not depend on the draw (a TimeStretch case failed 1 run in ~15)
        args = ["sox", "-R", *args[1:]]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _ff(src, dst, *args):
    _run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-i", src, *args, dst])


def make_sources(d):
    """The raw material: speech at 22050 Hz mono (espeak-ng's rate) and synth at 44100 Hz
    stereo, as 16-bit WAV."""
    os.makedirs(d, exist_ok=True)
    out = {}
    for name, voice, wpm, text in SPEECH:
        p = os.path.join(d, f"speech_{name}.wav")
        _run(["espeak-ng", "-v", voice, "-s", str(wpm), "-w", p, text])
        out[f"speech_{name}"] = p
    for name, synth in SYNTH:
        p = os.path.join(d, f"synth_{name}.wav")
        _run(["sox", "-n", "-r", "44100", "-c", "2", "-b", "16", p, "synth", *synth])
        out[f"synth_{name}"] = p
    return out


def make_corpus(d):
    """Every codec and sample format, from the sources. Returns {name: path} with names
    '<source>.<variant>' (e.g. 'speech_us_slow.flac16_16k') and the damaged copies."""
    src = make_sources(os.path.join(d, "src"))
    enc = os.path.join(d, "enc")
    os.makedirs(enc, exist_ok=True)
    out = {}

    def add(key, path):
        out[key] = path
        return path

    sp, sy = src["speech_us_slow"], src["synth_chord"]
    # WAV sample formats (sox): 8-bit unsigned, 16, 24, 32-bit signed, 32-bit float
    for bits, enc_args in (("u8", ["-b", "8", "-e", "unsigned-integer"]), ("s16", ["-b", "16"]),
                           ("s24", ["-b", "24"]), ("s32", ["-b", "32"]),
                           ("f32", ["-b", "32", "-e", "floating-point"])):
        _run(["sox", sy, *enc_args, add(f"synth_chord.wav_{bits}",
                                        os.path.join(enc, f"chord_{bits}.wav"))])
    _run(["sox", sp, "-r", "16000", add("speech_us_slow.wav_16k", os.path.join(enc, "sp16k.wav"))])
    _run(["sox", sp, "-r", "48000", "-c", "2",
          add("speech_us_slow.wav_48k_st", os.path.join(enc, "sp48k.wav"))])
    # FLAC 16 and 24 bit, several rates and channel counts
    _run(["sox", sy, "-b", "16", add("synth_chord.flac16", os.path.join(enc, "chord16.flac"))])
    _run(["sox", sy, "-b", "24", "-r", "48000",
          add("synth_chord.flac24_48k", os.path.join(enc, "chord24.flac"))])
    _run(["sox", sp, "-r", "16000", add("speech_us_slow.flac_16k",
                                        os.path.join(enc, "sp16k.flac"))])
    _ff(src["synth_sweep"], add("synth_sweep.flac", os.path.join(enc, "sweep.flac")))
    # Lossy: Ogg Vorbis, Opus, MP3 (ffmpeg), mono and stereo
    _ff(sy, add("synth_chord.ogg", os.path.join(enc, "chord.ogg")), "-c:a", "libvorbis")
    _ff(sp, add("speech_us_slow.ogg", os.path.join(enc, "sp.ogg")), "-c:a", "libvorbis")
    _ff(sy, add("synth_chord.opus", os.path.join(enc, "chord.opus")), "-c:a", "libopus")
    _ff(sp, add("speech_us_slow.opus", os.path.join(enc, "sp.opus")), "-c:a", "libopus")
    _ff(sy, add("synth_chord.mp3", os.path.join(enc, "chord.mp3")), "-c:a", "libmp3lame")
    _ff(sp, add("speech_us_slow.mp3", os.path.join(enc, "sp.mp3")), "-c:a", "libmp3lame")
    _ff(src["synth_pluck"], add("synth_pluck.mp3_22k", os.path.join(enc, "pluck22.mp3")),
        "-c:a", "libmp3lame", "-ar", "22050", "-ac", "1")
    out.update({k: v for k, v in src.items()})

    # Damaged copies
    bad = os.path.join(d, "bad")
    os.makedirs(bad, exist_ok=True)
    rnd = random.Random(27)
    for key in ("synth_chord.wav_s16", "synth_chord.flac16", "synth_chord.ogg",
                "synth_chord.opus", "synth_chord.mp3"):
        data = open(out[key], "rb").read()
        ext = os.path.splitext(out[key])[1]
        tr = os.path.join(bad, f"truncated_{key.split('.')[1]}{ext}")
        with open(tr, "wb") as f:
            f.write(data[:len(data) * 6 // 10])
        out[f"truncated.{key.split('.')[1]}"] = tr
        if ext != ".wav":  # PCM has no integrity check: corrupt bytes are just other samples
            cr = bytearray(data)
            for _ in range(3):
                at = rnd.randrange(len(cr) // 3, len(cr) * 2 // 3)
                for j in range(64):
                    cr[at + j] = rnd.randrange(256)
            p = os.path.join(bad, f"corrupt_{key.split('.')[1]}{ext}")
            with open(p, "wb") as f:
                f.write(bytes(cr))
            out[f"corrupt.{key.split('.')[1]}"] = p
    p = os.path.join(bad, "empty.wav")
    open(p, "wb").close()
    out["empty"] = p
    p = os.path.join(bad, "notaudio.wav")
    with open(p, "w") as f:
        f.write("hello, this is text and not a WAV file\n" * 10)
    out["notaudio"] = p
    return out


def tree(root, files_by_class):
    """A class-per-folder tree: {class: [paths]} -> root/<class>/<basename> (symlinks)."""
    for cls, paths in files_by_class.items():
        os.makedirs(os.path.join(root, cls), exist_ok=True)
        for i, p in enumerate(paths):
            dst = os.path.join(root, cls, f"{i:02d}_{os.path.basename(p)}")
            if not os.path.exists(dst):
                os.symlink(os.path.abspath(p), dst)
    return root

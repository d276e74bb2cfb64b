"""audio.Downmix(2) of 3 to 8 channels (issue 27) against FFmpeg's stereo downmix as torchaudio
0.13 gives it (torchaudio.io.StreamReader with `aformat=channel_layouts=stereo`: libswresample's
default matrix on the layout FFmpeg reads from the file), on files made here: speech (espeak-ng)
and tones (sox) merged into 3..8 channels, as WAV with a channel mask (torchaudio.save), WAV
without one and FLAC (sox), Ogg Vorbis and Opus (ffmpeg). Measured (pytest -s prints it): WAV and
FLAC bit for bit; Ogg Vorbis 2.4e-7 away from its first and last 256 frames (FFmpeg's Vorbis
decoder and libvorbis differ at the stream's ends), asserted 1e-5; Opus 2.4e-7 (FFmpeg's Opus
decoder against libopus), asserted 5e-4.
"""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import stoker
from stoker import audio as A

sys.path.insert(0, os.path.dirname(__file__))
import audio_data  # noqa: E402

HAS = stoker._core.has_audio()
try:
    import torch
    import torchaudio
    from torchaudio.io import StreamReader
except ImportError:
    torchaudio = None

pytestmark = [
    pytest.mark.skipif(not HAS["sndfile"], reason="stoker was built without libsndfile"),
    pytest.mark.skipif(bool(audio_data.tools_missing()),
                       reason=f"{audio_data.tools_missing()} not installed"),
    pytest.mark.skipif(torchaudio is None, reason="torchaudio is not installed"),
]

RATE = 16000


def _run(args):
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """{(channels, kind): path}: each channel its own signal (a voice or a tone), 1 s."""
    d = str(tmp_path_factory.mktemp("downmix"))
    voices = [("en-us", 140), ("en-gb", 190), ("de", 160), ("fr", 170)]
    mono = []
    for i, (voice, wpm) in enumerate(voices):
        p = os.path.join(d, f"v{i}.wav")
        _run(["espeak-ng", "-v", voice, "-s", str(wpm), "-w", p + ".raw.wav", "one two three"])
        _run(["sox", p + ".raw.wav", "-r", str(RATE), "-c", "1", "-b", "16", p, "trim", "0", "1",
              "pad", "0", "1", "trim", "0", "1"])
        mono.append(p)
    for i, f in enumerate((220, 330, 470, 610)):
        p = os.path.join(d, f"t{i}.wav")
        _run(["sox", "-n", "-r", str(RATE), "-c", "1", "-b", "16", p, "synth", "1", "sine",
              str(f), "vol", "0.3"])
        mono.append(p)
    out = {}
    for ch in range(3, 9):
        x = np.stack([torchaudio.load(mono[(k * 3) % len(mono)])[0][0].numpy() for k in range(ch)])
        ext = os.path.join(d, f"c{ch}.wav")  # WAVE_FORMAT_EXTENSIBLE with a channel mask
        torchaudio.save(ext, torch.from_numpy(x), RATE, encoding="PCM_S",
                        bits_per_sample=16)
        out[ch, "wav_mask"] = ext
        out[ch, "wav"] = os.path.join(d, f"c{ch}p.wav")
        _run(["sox", ext, "-t", "wavpcm", out[ch, "wav"]])
        out[ch, "flac"] = os.path.join(d, f"c{ch}.flac")
        _run(["sox", ext, out[ch, "flac"]])
        out[ch, "vorbis"] = os.path.join(d, f"c{ch}.ogg")
        _run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-i", out[ch, "wav"], "-c:a",
              "libvorbis", out[ch, "vorbis"]])
        if ch >= 4:  # libopus has no 3-channel mapping for FFmpeg's 3-channel default (2.1)
            out[ch, "opus"] = os.path.join(d, f"c{ch}.opus")
            _run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-i", ext, "-c:a",
                  "libopus", out[ch, "opus"]])
    return out


def ffmpeg_stereo(path):
    s = StreamReader(path)
    s.add_audio_stream(frames_per_chunk=1 << 24,
                       filter_desc="aformat=sample_fmts=fltp:channel_layouts=stereo")
    s.process_all_packets()
    (z,) = s.pop_chunks()
    return z.T.numpy(), int(s.get_src_stream_info(s.default_audio_stream).sample_rate)


def stoker_first(path, ops):
    d = tempfile.mkdtemp(prefix="stk_dm_")
    os.makedirs(os.path.join(d, "c"))
    shutil.copy(path, os.path.join(d, "c", os.path.basename(path)))
    with stoker.Loader(d, 1, transforms=ops, output="numpy") as loader:
        return next(iter(loader))["audio"][0]


@pytest.mark.parametrize("kind", ["wav_mask", "wav", "flac", "vorbis", "opus"])
def test_downmix_stereo_equals_ffmpeg(files, kind):
    worst = 0.0
    for ch in range(3, 9):
        if (ch, kind) not in files:
            continue
        want, sr = ffmpeg_stereo(files[ch, kind])
        x = stoker_first(files[ch, kind], [A.Downmix(2), A.PadTo(want.shape[1] / sr)])
        assert x.shape == want.shape
        if kind == "vorbis":
            x, want = x[:, 256:-256], want[:, 256:-256]
        err = float(np.abs(x - want).max())
        worst = max(worst, err)
        bound = {"vorbis": 1e-5, "opus": 5e-4}.get(kind, 0.0)
        assert err <= bound, (ch, kind, err)
        # a wrong layout would be far off: each channel carries its own signal
        assert float(np.abs(want).max()) > 0.1
    print(f"Downmix(2) {kind}: largest difference from FFmpeg's {worst:.3g}")


def test_downmix_stereo_then_the_recipe(files):
    """Downmix(2) before Resample and a spectrogram, and Downmix() (the mean) unchanged."""
    path = files[6, "wav"]
    x = stoker_first(path, [A.Downmix(2), A.Resample(RATE, 8000), A.CenterCrop(0.5),
                            A.MelSpectrogram(8000, n_mels=32)])
    assert x.shape == (2, 32, 21)
    ref, _ = torchaudio.load(path)
    m = stoker_first(path, [A.Downmix(), A.PadTo(1.0)])
    assert np.abs(m[0] - ref.mean(0).numpy()).max() < 1e-6


def test_downmix_stereo_refusals(tmp_path):
    """More than 8 channels, and a WAV mask naming a channel outside FFmpeg's stereo rules."""
    x = torch.zeros(9, 1600)
    p9 = str(tmp_path / "c9.wav")
    torchaudio.save(p9, x, RATE, encoding="PCM_S", bits_per_sample=16)
    with pytest.raises(stoker.StokerFormatError, match=r"c9.wav \(record 0\).*9 channels: "
                       r"audio.Downmix\(2\) mixes 3 to 8"):
        stoker_first(p9, [A.Downmix(2), A.PadTo(0.1)])
    # a 3-channel WAV whose mask is FL FR TC (top centre, bit 11)
    p = str(tmp_path / "top.wav")
    torchaudio.save(p, torch.zeros(3, 1600), RATE, encoding="PCM_S", bits_per_sample=16)
    b = bytearray(open(p, "rb").read())
    at = b.index(b"fmt ") + 8
    assert b[at:at + 2] == b"\xfe\xff"
    b[at + 20:at + 24] = (0x3 | 1 << 11).to_bytes(4, "little")
    open(p, "wb").write(bytes(b))
    with pytest.raises(stoker.StokerFormatError, match=r"channel mask 0x803 has channel bit 11"):
        stoker_first(p, [A.Downmix(2), A.PadTo(0.1)])
    assert stoker_first(p, [A.Downmix(), A.PadTo(0.1)]).shape == (1, 1600)


def _flac_with_comments(src, dst, comments):
    """src (a FLAC file) with a VORBIS_COMMENT block of `comments` (KEY=value strings) in place
    of any it had, after STREAMINFO."""
    b = open(src, "rb").read()
    assert b[:4] == b"fLaC"
    at, blocks, last = 4, [], False
    while not last:
        last = bool(b[at] & 0x80)
        n = int.from_bytes(b[at + 1:at + 4], "big")
        blocks.append((b[at] & 0x7F, b[at + 4:at + 4 + n]))
        at += 4 + n
    vendor = b"stoker test"
    body = len(vendor).to_bytes(4, "little") + vendor + len(comments).to_bytes(4, "little")
    for c in comments:
        body += len(c.encode()).to_bytes(4, "little") + c.encode()
    blocks = [blocks[0], (4, body)] + [bl for bl in blocks[1:] if bl[0] != 4]
    out = b"fLaC"
    for i, (kind, data) in enumerate(blocks):
        out += bytes([kind | (0x80 if i == len(blocks) - 1 else 0)]) + len(data).to_bytes(3, "big")
        out += data
    open(dst, "wb").write(out + b[at:])


# A mask per channel count whose layout differs from FLAC's own for that count (and moves the
# downmix: an LFE, a back centre or front centre-sides where FLAC has other channels).
FLAC_MASKS = {3: 0x0B, 4: 0x107, 5: 0x10F, 6: 0x137, 7: 0x637, 8: 0xFF}


def test_flac_channel_mask_comment_equals_ffmpeg(files, tmp_path):
    """A FLAC file's WAVEFORMATEXTENSIBLE_CHANNEL_MASK comment is its layout, as FFmpeg reads it:
    hex, decimal or octal, the key in any case; a mask naming another number of channels, 0, or
    bits FFmpeg calls invalid leave FLAC's own order."""
    worst = 0.0
    for ch, m in FLAC_MASKS.items():
        assert bin(m).count("1") == ch
        for form in ("0x%x", "%d", "0%o"):
            key = "waveformatextensible_channel_mask" if form == "%d" else \
                "WAVEFORMATEXTENSIBLE_CHANNEL_MASK"
            p = str(tmp_path / f"m{ch}_{len(form)}.flac")
            _flac_with_comments(files[ch, "flac"], p, ["TITLE=x", f"{key}={form % m}"])
            want, sr = ffmpeg_stereo(p)
            plain, _ = ffmpeg_stereo(files[ch, "flac"])
            assert np.abs(want - plain).max() > 0.05, (ch, "the mask must move FFmpeg's downmix")
            x = stoker_first(p, [A.Downmix(2), A.PadTo(want.shape[1] / sr)])
            err = float(np.abs(x - want).max())
            worst = max(worst, err)
            assert err == 0.0, (ch, form, err)
    for bad in ("0x3", "0", "0x40000", "-1", "x"):  # 2 channels named, 0, bit 18, not a number
        p = str(tmp_path / "bad.flac")
        _flac_with_comments(files[5, "flac"], p, [f"WAVEFORMATEXTENSIBLE_CHANNEL_MASK={bad}"])
        want, sr = ffmpeg_stereo(p)
        plain, _ = ffmpeg_stereo(files[5, "flac"])
        assert np.array_equal(want, plain), bad
        x = stoker_first(p, [A.Downmix(2), A.PadTo(want.shape[1] / sr)])
        assert np.array_equal(x, want), bad
    print(f"Downmix(2) FLAC with a channel mask comment: largest difference {worst:.3g}")


def test_flac_channel_mask_comment_refused_channel(files, tmp_path):
    """A FLAC mask naming a top channel is refused by name, as a WAV's is."""
    p = str(tmp_path / "top.flac")
    _flac_with_comments(files[3, "flac"], p, ["WAVEFORMATEXTENSIBLE_CHANNEL_MASK=0x803"])
    with pytest.raises(stoker.StokerFormatError,
                       match=r"top.flac \(record 0\).*FLAC channel mask 0x803 has channel bit 11"):
        stoker_first(p, [A.Downmix(2), A.PadTo(0.1)])
    assert stoker_first(p, [A.Downmix(), A.PadTo(0.1)]).shape == (1, 1600)

"""Audio from every source (issue 27): class-per-folder trees (the folder source's audio mode and
format="audiofolder"), WebDataset tars with .flac/.wav/.mp3 members, HDF5 and .npy waveform
arrays, and .stk shards packed from each (`stoker pack`, stoker.pack): the same samples from
each, the batch field `audio`, labels where the source has them."""
import io
import os
import subprocess
import sys
import tarfile
import tempfile

import numpy as np
import pytest

import stoker
from stoker import audio as A

sys.path.insert(0, os.path.dirname(__file__))
import audio_data  # noqa: E402

HAS = stoker._core.has_audio()
pytestmark = [pytest.mark.skipif(bool(audio_data.tools_missing()),
                                 reason=f"{audio_data.tools_missing()} not installed"),
              pytest.mark.skipif(not HAS["sndfile"],
                                 reason="stoker was built without libsndfile")]

KEYS = ["speech_us_slow", "speech_gb_fast", "speech_de", "speech_scot"]
OPS = [A.Resample(22050, 16000), A.CenterCrop(1.0)]


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    return audio_data.make_corpus(str(tmp_path_factory.mktemp("audio_src_corpus")))


@pytest.fixture(scope="session")
def speech_tree(corpus, tmp_path_factory):
    """Two classes of two speech files each (22050 Hz mono WAV)."""
    root = str(tmp_path_factory.mktemp("speech_tree"))
    return audio_data.tree(root, {"no": [corpus[k] for k in KEYS[:2]],
                                  "yes": [corpus[k] for k in KEYS[2:]]})


def batches(data, ops=OPS, **kw):
    kw.setdefault("output", "numpy")
    with stoker.Loader(data, 4, transforms=ops, **kw) as loader:
        return [{k: np.array(v) for k, v in b.items()} for b in loader]


def test_folder_tree_is_audio_with_labels(speech_tree):
    ds = stoker.Dataset(speech_tree)
    assert [f["name"] for f in ds.fields] == ["audio", "label", "path"]
    assert ds.classes == ["no", "yes"] if hasattr(ds, "classes") else True
    b = batches(speech_tree)[0]
    assert b["audio"].shape == (4, 1, 16000) and b["audio"].dtype == np.float32
    assert list(b["label"]) == [0, 0, 1, 1]
    assert set(b) == {"audio", "label", "path", "path_lengths", "index"}


def test_torch_output(speech_tree):
    torch = pytest.importorskip("torch")
    with stoker.Loader(speech_tree, 4, transforms=OPS) as loader:
        b = next(iter(loader))
    assert isinstance(b["audio"], torch.Tensor) and b["audio"].dtype == torch.float32
    assert tuple(b["audio"].shape) == (4, 1, 16000) and b["label"].dtype == torch.int64


def test_mixed_tree_images_win_unless_audiofolder(corpus, tmp_path):
    """A tree holding images reads its images, as before; format="audiofolder" reads its audio
    files (music with cover art)."""
    from PIL import Image
    root = audio_data.tree(str(tmp_path / "mixed"), {"a": [corpus["speech_us_slow"]],
                                                     "b": [corpus["speech_de"]]})
    for c in "ab":
        Image.new("RGB", (8, 8)).save(os.path.join(root, c, "cover.jpg"))
    assert stoker.Dataset(root).fields[0]["name"] == "image"
    ds = stoker.Dataset(root, format="audiofolder")
    assert ds.fields[0]["name"] == "audio" and len(ds) == 2
    b = batches(root, format="audiofolder")[0]
    assert b["audio"].shape == (2, 1, 16000)
    empty = audio_data.tree(str(tmp_path / "noaudio"), {"a": [corpus["speech_de"]]})
    os.makedirs(os.path.join(empty, "b"))
    with pytest.raises(ValueError, match="class folder 'b' .* contains no audio files"):
        stoker.Dataset(empty)


def _tar(path, members):
    with tarfile.open(path, "w") as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return path


def test_webdataset_tar_members(corpus, speech_tree, tmp_path):
    """A WebDataset shard of .flac members (the field picked by its extension) with .cls labels:
    the same samples as the folder of the WAVs they were encoded from (FLAC is lossless)."""
    flacs = {}
    for k in KEYS:
        p = str(tmp_path / f"{k}.flac")
        subprocess.run(["sox", corpus[k], p], check=True)
        flacs[k] = open(p, "rb").read()
    labels = [0, 0, 1, 1]
    shard = _tar(str(tmp_path / "train-000000.tar"),
                 [m for i, k in enumerate(KEYS) for m in
                  ((f"s{i:04d}.flac", flacs[k]), (f"s{i:04d}.cls", str(labels[i]).encode()))])
    got = batches(shard)[0]
    want = batches(speech_tree)[0]
    assert np.array_equal(got["audio"], want["audio"])
    assert list(got["cls"]) == labels and "__key__" in got
    wav = _tar(str(tmp_path / "wav.tar"),
               [(f"s{i:04d}.wav", open(corpus[k], "rb").read()) for i, k in enumerate(KEYS)])
    assert np.array_equal(batches(wav)[0]["audio"], want["audio"])


def _wave_arrays(corpus):
    """The four speech files as int16 (4, 2, S) (channel 1 = channel 0 halved) and float32."""
    import wave
    arrs = []
    for k in KEYS:
        with wave.open(corpus[k]) as w:
            arrs.append(np.frombuffer(w.readframes(w.getnframes()), np.int16))
    S = max(len(a) for a in arrs)
    x = np.zeros((len(arrs), 2, S), np.int16)
    for i, a in enumerate(arrs):
        x[i, 0, :len(a)] = a
        x[i, 1, :len(a)] = a // 2
    return x


def test_npy_waveform_arrays(corpus, tmp_path):
    """A directory of x.npy (int16 (N, 2, S), scaled as PCM: / 32768) and y.npy labels: the
    waveform array is the transform's field (renamed `audio`); its rate is sample_rate= (or
    Resample's orig_freq): arrays carry none."""
    x = _wave_arrays(corpus)
    d = tmp_path / "npy"
    d.mkdir()
    np.save(d / "x.npy", x)
    np.save(d / "y.npy", np.array([3, 1, 4, 1], np.int64))
    S = x.shape[2]
    got = batches(str(d), [A.PadTo(S / 22050)], sample_rate=22050)[0]
    assert got["audio"].shape == (4, 2, S) and list(got["y"]) == [3, 1, 4, 1]
    assert np.array_equal(got["audio"], x.astype(np.float32) / 32768)
    same = batches(str(d), [A.Resample(22050, 16000), A.CenterCrop(1.0)])[0]
    assert same["audio"].shape == (4, 2, 16000)
    with pytest.raises(ValueError, match="waveform array, which has no sample rate"):
        stoker.Loader(str(d), 4, transforms=[A.CenterCrop(1.0)])
    np.save(d / "z.npy", x[:, 0].astype(np.float32))  # a second candidate: name it
    with pytest.raises(ValueError, match="2 fields are waveform arrays"):
        stoker.Loader(str(d), 4, transforms=[A.CenterCrop(1.0)], sample_rate=22050)
    got = batches(str(d), [A.CenterCrop(1.0)], sample_rate=22050, transform_field="z")[0]
    assert got["audio"].shape == (4, 1, 22050) and "x" in got


def test_hdf5_waveform_arrays(corpus, tmp_path):
    """An HDF5 file of float32 waveforms (N, S) and int64 labels; stoker pack of it gives the
    same batches."""
    h5py = pytest.importorskip("h5py")
    x = (_wave_arrays(corpus)[:, 0].astype(np.float32) / 32768)
    p = str(tmp_path / "speech.h5")
    with h5py.File(p, "w") as f:
        f["wave"] = x
        f["label"] = np.array([0, 0, 1, 1], np.int64)
    ops = [A.Resample(22050, 16000), A.CenterCrop(1.0)]
    got = batches(p, ops)[0]
    assert got["audio"].shape == (4, 1, 16000) and list(got["label"]) == [0, 0, 1, 1]
    stoker.pack(p, str(tmp_path / "h5.stk"))
    assert np.array_equal(batches(str(tmp_path / "h5.stk"), ops)[0]["audio"], got["audio"])


def test_stk_packed_from_folder_and_tar(corpus, speech_tree, tmp_path):
    """`stoker pack` of the audio tree (CLI) and stoker.pack of the tar: .stk shards whose batches
    equal the source's, RandomCrop included (the same (seed, epoch, index) draws)."""
    build = os.environ.get("STK_BUILD", "build")
    out = str(tmp_path / "tree.stk")
    subprocess.run([os.path.join(build, "stoker"), "pack", speech_tree, out], check=True,
                   stdout=subprocess.DEVNULL)
    ops = [A.Resample(22050, 16000), A.RandomCrop(0.5), A.MelSpectrogram(16000, n_mels=32)] \
        if HAS["fftw"] else [A.Resample(22050, 16000), A.RandomCrop(0.5)]
    a = batches(speech_tree, ops, shuffle=True, seed=4)
    b = batches(out, ops, shuffle=True, seed=4)
    for x, y in zip(a, b):
        assert np.array_equal(x["audio"], y["audio"]) and np.array_equal(x["label"], y["label"])
    shard = _tar(str(tmp_path / "t.tar"), [(f"s{i:04d}.wav", open(corpus[k], "rb").read())
                                           for i, k in enumerate(KEYS)])
    stoker.pack(shard, str(tmp_path / "tar.stk"))
    assert np.array_equal(batches(str(tmp_path / "tar.stk"), ops, seed=4)[0]["audio"],
                          batches(shard, ops, seed=4)[0]["audio"])


def test_memory_budget_counts_audio_buffers(speech_tree):
    """The decode and resampling buffers are charged to memory_budget as they grow: a budget
    with room for the ring only fails the first record, named, with the reason."""
    with stoker.Loader(speech_tree, 4, transforms=OPS, output="numpy", num_workers=1) as loader:
        info = loader.info()
    fixed = info["slot_size"] * info["n_slots"]  # (a tree's files are read in place: no read
    # buffer; the decoder's read of the header and the window is charged as it grows)
    with stoker.Loader(speech_tree, 4, transforms=OPS, output="numpy", num_workers=1,
                       memory_budget=fixed + 40_000) as loader:
        with pytest.raises(stoker.StokerLimitError, match="audio buffer, over the memory budget"):
            next(iter(loader))


def test_in_place_reads_equal_whole_reads(tmp_path):
    """A folder tree is read in place (the header, then the bytes a crop keeps) where a .stk pack
    of it is read whole: the batches are the same to the bit for crops at the start, middle and
    end, crops longer than a clip (zero padding), 3 and 5 channels, WAV and FLAC, strict and
    lenient; the WAV tree reads a fraction of its bytes."""
    build = os.environ.get("STK_BUILD", "build")
    root = tmp_path / "tree"
    clips = [(0.3, 3, "wav"), (0.9, 3, "wav"), (2.5, 3, "wav"), (4.0, 3, "wav"),
             (1.7, 5, "flac"), (3.1, 5, "flac"), (0.6, 5, "flac"), (2.2, 3, "flac")]
    for i, (secs, ch, ext) in enumerate(clips):
        d = root / ("a" if i % 2 else "b")
        d.mkdir(parents=True, exist_ok=True)
        tones = [x for c in range(ch) for x in ("sine", str(200 + 90 * c))]
        audio_data._run(["sox", "-n", "-r", "22050", "-c", str(ch), "-b", "16",
                         str(d / f"{i}.{ext}"), "synth", str(secs), *tones, "vol", "0.4"])
    packed = str(tmp_path / "tree.stk")
    subprocess.run([os.path.join(build, "stoker"), "pack", str(root), packed], check=True,
                   stdout=subprocess.DEVNULL)
    for ops in ([A.RandomCrop(1.0), A.Downmix()], [A.CenterCrop(2.0), A.Downmix()],
                [A.Resample(22050, 16000), A.RandomCrop(1.5), A.Downmix(), A.Vol(0.5)]):
        for kw in ({}, {"strict": False}):
            for seed in (1, 2, 3):
                a = batches(str(root), ops, shuffle=True, seed=seed, **kw)
                b = batches(packed, ops, shuffle=True, seed=seed, **kw)
                assert len(a) == len(b) == 2
                for x, y in zip(a, b):
                    assert np.array_equal(x["audio"], y["audio"]), (ops, kw, seed)
                    assert np.array_equal(x["label"], y["label"])
    # 10 s clips, a 1 s crop: a record reads its header and ~1 s of bytes (the C test bounds it
    # exactly). Two ring slots (prefetch=1): when the first batch arrives, at most two batches
    # of records have been read, 8 of 8; read whole, its first batch alone would be 4 files.
    wav = tmp_path / "wavs"
    (wav / "c").mkdir(parents=True)
    for i in range(8):
        audio_data._run(["sox", "-n", "-r", "22050", "-c", "1", "-b", "16",
                         str(wav / "c" / f"{i}.wav"), "synth", "10", "sine", "440"])
    size = os.path.getsize(wav / "c" / "0.wav")
    with stoker.Loader(str(wav), 4, transforms=[A.RandomCrop(1.0)], output="numpy",
                       num_workers=1, prefetch=1) as loader:
        next(iter(loader))
        read = loader.stats()["bytes_read"]
    assert 0 < read <= 8 * size / 5, (read, size)


def test_in_place_read_errors_name_the_file(tmp_path):
    """A file read in place that changed or vanished after the loader opened the tree fails its
    record, named; under on_error="skip" the record is replaced and counted."""
    root = tmp_path / "tree" / "c"
    root.mkdir(parents=True)
    for i in range(4):
        audio_data._run(["sox", "-n", "-r", "16000", "-c", "1", "-b", "16",
                         str(root / f"{i}.wav"), "synth", "2", "sine", "300"])
    for damage in ("truncate", "remove"):
        with stoker.Loader(str(tmp_path / "tree"), 1, transforms=[A.RandomCrop(0.5)],
                           output="numpy", num_workers=1, prefetch=1) as loader:
            p = root / "2.wav"
            data = p.read_bytes()
            if damage == "truncate":
                p.write_bytes(data[:1000])
            else:
                p.unlink()
            try:
                with pytest.raises(stoker.Error, match=r"c/2\.wav \(record 2\)") as e:
                    for _ in loader:
                        pass
            finally:
                p.write_bytes(data)
            assert str(e.value).count("(record 2)") == 1, e.value
            assert ("changed since the dataset was opened" if damage == "truncate"
                    else "No such file") in str(e.value)
    with stoker.Loader(str(tmp_path / "tree"), 1, transforms=[A.RandomCrop(0.5)],
                       output="numpy", on_error="skip", num_workers=1, prefetch=1) as loader:
        (root / "3.wav").write_bytes((root / "3.wav").read_bytes()[:1000])
        n = sum(len(b["audio"]) for b in loader)
        assert n == 4 and loader.stats()["skipped"] == 1


def _epochs(data, ops, n_epochs, **kw):
    """(each epoch's audio, the bytes read in all of them) of a loader over data (prefetch 1:
    little read past the last epoch)."""
    with stoker.Loader(data, 4, transforms=ops, output="numpy", shuffle=True, seed=7,
                       num_workers=2, prefetch=1, **kw) as loader:
        xs = [np.concatenate([b["audio"] for b in loader]) for _ in range(n_epochs)]
        return xs, loader.stats()["bytes_read"]


def test_stk_and_tar_read_in_place(tmp_path, monkeypatch):
    """A .stk pack's and a WebDataset tar's audio records are read in place too, through the
    folder tree's mechanism (the source's field_open): the header, then the bytes the crop
    keeps; a .stk record's checksum checked once, by reading it whole on its first read; a tar
    member's header checked; a gzipped member gunzipped whole. The same batches as read whole
    (STOKER_READ_WHOLE=1), every epoch, WAV and FLAC; after the first epoch a fraction of the
    bytes (printed); a .stk record corrupted after packing still fails its checksum, named."""
    build = os.environ.get("STK_BUILD", "build")
    root = tmp_path / "tree"
    for i in range(8):
        d = root / ("a" if i % 2 else "b")
        d.mkdir(parents=True, exist_ok=True)
        ext = "flac" if i % 4 == 3 else "wav"
        audio_data._run(["sox", "-n", "-r", "22050", "-c", "2", "-b", "16", str(d / f"{i}.{ext}"),
                         "synth", str(4 + i), "sine", str(200 + 50 * i), "sine", "310",
                         "vol", "0.4"])
    packed = str(tmp_path / "tree.stk")
    subprocess.run([os.path.join(build, "stoker"), "pack", str(root), packed], check=True,
                   stdout=subprocess.DEVNULL)
    files = sorted(p for p in root.rglob("*") if p.is_file())
    tars = {}
    for gz in (False, True):
        tars[gz] = str(tmp_path / f"tree{'_gz' if gz else ''}.tar")
        with tarfile.open(tars[gz], "w") as t:
            for k, p in enumerate(files):
                data = p.read_bytes()
                if gz:
                    import gzip
                    data = gzip.compress(data)
                for name, b in ((f"{k:03d}.{p.suffix[1:]}{'.gz' if gz else ''}", data),
                                (f"{k:03d}.cls", str(k % 2).encode())):
                    ti = tarfile.TarInfo(name)
                    ti.size = len(b)
                    t.addfile(ti, io.BytesIO(b))
    # the tars' members are one field per extension: keep them all .wav-named for one field
    ops = [A.Resample(22050, 16000), A.RandomCrop(1.0), A.Downmix()]
    for data in (packed, tars[False], tars[True]):
        if data != packed:  # the tar's members: one field (rename the FLACs' to .wav)
            fixed = data + ".one.tar"
            with tarfile.open(data) as src, tarfile.open(fixed, "w") as dst:
                for m in src.getmembers():
                    b = src.extractfile(m).read()
                    m.name = m.name.replace(".flac", ".wav")
                    dst.addfile(m, io.BytesIO(b))
            data = fixed
        monkeypatch.setenv("STOKER_READ_WHOLE", "1")
        whole, read_whole = _epochs(data, ops, 4)
        monkeypatch.delenv("STOKER_READ_WHOLE")
        inplace, read_in = _epochs(data, ops, 4)
        for x, y in zip(whole, inplace):
            assert x.shape == (8, 1, 16000) and np.array_equal(x, y), data
        print(f"{os.path.basename(data)}: bytes read in 4 epochs, whole {read_whole}, in place "
              f"{read_in} ({read_in / read_whole:.2f}x)")
        if "_gz" not in data:  # (gunzipped whole: no fewer; a .stk reads all once to check)
            assert read_in < 0.6 * read_whole, (data, read_in, read_whole)
    # a byte of a record's audio flipped after packing: its first in-place read fails the checksum
    with open(packed, "r+b") as f:
        b = bytearray(f.read())
        at = b.index(b"data") + 2000  # inside the first WAV's samples
        b[at] ^= 0xFF
        f.seek(0)
        f.write(b)
    with pytest.raises(stoker.Error, match=r"tree.stk record \d+ \(global \d+\) at byte \d+.*"
                       r"checksum mismatch \(record corrupt\)"):
        _epochs(packed, ops, 1)


def test_hdf5_audio_bytes_read_in_place(tmp_path, monkeypatch):
    """Encoded audio in an HDF5 file (h5py's vlen uint8 rows) is read in place too: a contiguous
    dataset's row where it lies in the file (the header, then the crop's bytes), a chunked and
    gzipped one's row whole through the library. The same batches as read whole
    (STOKER_READ_WHOLE=1), 3 epochs, WAV and FLAC rows; fewer bytes from the contiguous file."""
    h5py = pytest.importorskip("h5py")
    clips = []
    for i in range(8):
        ext = "flac" if i % 4 == 3 else "wav"
        p = str(tmp_path / f"{i}.{ext}")
        audio_data._run(["sox", "-n", "-r", "22050", "-c", "2", "-b", "16", p, "synth",
                         str(4 + i), "sine", str(200 + 50 * i), "sine", "310", "vol", "0.4"])
        clips.append(np.frombuffer(open(p, "rb").read(), np.uint8))
    ops = [A.Resample(22050, 16000), A.RandomCrop(1.0), A.Downmix()]
    files = {}
    for kind in ("contiguous", "gzip"):
        files[kind] = p = str(tmp_path / f"{kind}.h5")
        with h5py.File(p, "w") as f:
            kw = dict(chunks=(2,), compression="gzip") if kind == "gzip" else {}
            d = f.create_dataset("audio", (len(clips),), dtype=h5py.vlen_dtype(np.uint8), **kw)
            for k, c in enumerate(clips):
                d[k] = c
            f.create_dataset("label", data=np.arange(len(clips)) % 2)
    for kind, p in files.items():
        monkeypatch.setenv("STOKER_READ_WHOLE", "1")
        whole, read_whole = _epochs(p, ops, 3)
        monkeypatch.delenv("STOKER_READ_WHOLE")
        inplace, read_in = _epochs(p, ops, 3)
        for x, y in zip(whole, inplace):
            assert x.shape == (8, 1, 16000) and np.array_equal(x, y), kind
        print(f"HDF5 {kind}: bytes read in 3 epochs, whole {read_whole}, in place {read_in} "
              f"({read_in / read_whole:.2f}x)")
        if kind == "contiguous":
            assert read_in < 0.6 * read_whole, (read_in, read_whole)
    # a row that is not audio fails naming the file and the row, read in place as whole
    bad = str(tmp_path / "bad.h5")
    with h5py.File(bad, "w") as f:
        d = f.create_dataset("audio", (3,), dtype=h5py.vlen_dtype(np.uint8))
        d[0], d[1], d[2] = clips[0], np.frombuffer(b"not audio at all" * 8, np.uint8), clips[1]
    with pytest.raises(stoker.StokerFormatError, match=r"bad\.h5 row 1.*not a supported audio"):
        with stoker.Loader(bad, 3, transforms=ops, output="numpy") as loader:
            next(iter(loader))

"""Seed corpora for the TFRecord fuzz targets: tests/fuzz/corpus/tfrecord (whole files) and
tests/fuzz/corpus/protobuf (single serialized tf.train.Example), written with the test suite's
own writer (python/tests/test_tfrecord.py). Run from the repository root:
    PYTHONPATH=build/python /usr/bin/python3 tests/data/gen_tfrecord_corpus.py"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python", "tests"))
from test_tfrecord import example, frame  # noqa: E402

EXAMPLES = {
    "scalars": example({"image/class/label": 3, "score": 0.5, "image/encoded": b"\xff\xd8\xff"}),
    "arrays-packed": example({"bbox": [0.1, 0.2, 0.3, 0.4], "ids": [1, -2, 1 << 40]}),
    "arrays-unpacked": example({"bbox": [0.1, 0.2], "ids": [-1, 2, 3]}, packed=False),
    "unknown-fields": example({"k": b"v", "n": 7}, junk=True),
    "bytes-list-2": example({"tags": [b"a", b"bc"]}),
    "empty": b"",
    "truncated": example({"image/encoded": b"x" * 20})[:-5],
    "garbage": b"\x0a\xff\xff\xff\xff\x0f garbage",
}


def main():
    root = "tests/fuzz/corpus"
    os.makedirs(f"{root}/protobuf", exist_ok=True)
    os.makedirs(f"{root}/tfrecord", exist_ok=True)
    for name, ex in EXAMPLES.items():
        open(f"{root}/protobuf/{name}", "wb").write(ex)
    good = [EXAMPLES["scalars"], example({"image/class/label": 9, "score": 1.5,
                                          "image/encoded": b"\x89PNG"}), EXAMPLES["scalars"]]
    files = {
        "valid-3.tfrecord": b"".join(frame(e) for e in good),
        "valid-arrays.tfrecord": b"".join(frame(EXAMPLES[k]) for k in
                                          ("arrays-packed", "arrays-unpacked")),
        "schema-mismatch.tfrecord": frame(EXAMPLES["scalars"]) + frame(EXAMPLES["unknown-fields"]),
        "garbage-record.tfrecord": frame(EXAMPLES["scalars"]) + frame(EXAMPLES["garbage"]),
        "empty-record.tfrecord": frame(b""),
    }
    v = bytearray(files["valid-3.tfrecord"])
    files["bad-length-crc.tfrecord"] = bytes(v[:8] + b"\0\0\0\0" + v[12:])
    w = bytearray(v)
    w[14] ^= 1
    files["bad-data-crc.tfrecord"] = bytes(w)
    files["truncated.tfrecord"] = bytes(v[:-7])
    for name, b in files.items():
        open(f"{root}/tfrecord/{name}", "wb").write(b)


if __name__ == "__main__":
    main()

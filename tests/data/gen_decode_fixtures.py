#!/usr/bin/python3
"""gen_decode_fixtures.py OUTDIR: fixtures and PIL references for tests/unit/decode/test_decode.c.

1. Writes images that need PIL (or hand-made PNG chunks) into OUTDIR: CMYK and grayscale JPEGs,
   a JPEG with an EXIF orientation tag, and PNGs of every colour type and bit depth (8/16-bit,
   gray, gray+alpha, palette with and without tRNS, 1/2/4-bit, Adam7-interlaced), and the other
   formats of torchvision's IMG_EXTENSIONS as PIL writes them: WebP (lossy, lossless, with
   alpha), BMP (24-bit, 8-bit palette, 1-bit, 32-bit), binary PPM/PGM (and a PGM with maxval
   100, written by hand), TIFF (raw, LZW, deflate, JPEG-compressed, gray, palette).
2. For every image in OUTDIR (including the ones the C test wrote before calling this,
   e.g. a YCCK JPEG from TurboJPEG), writes NAME.rgb: width and height (uint32 little-endian)
   then the pixels of PIL's Image.open(NAME).convert('RGB'), the reference the decoder must match.
   Exception: 16-bit grayscale, where PIL's I -> RGB conversion clips at 255; the decoder keeps
   the high byte instead (see src/decode/stk_png.c), so that reference is written from numpy.

Deterministic (fixed seeds); uses only Debian's python3-pil and python3-numpy.
"""
import io
import os
import struct
import sys
import zlib

import numpy as np
from PIL import Image


def photo(w, h, seed):
    """A photo-like RGB image: smooth colour fields, gradients, hard edges and fine noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.zeros((h, w, 3))
    for c in range(3):
        coarse = rng.random((h // 16 + 2, w // 16 + 2))
        smooth = np.kron(coarse, np.ones((16, 16)))[:h, :w]
        img[..., c] = 90 * smooth + 80 * (xx / w) * (c + 1) / 3 + 60 * np.sin(yy / (7 + 3 * c))
    for _ in range(6):  # rectangles with hard edges
        x0, y0 = rng.integers(0, w), rng.integers(0, h)
        img[y0:y0 + h // 4, x0:x0 + w // 5] += rng.integers(-80, 80, 3)
    img += rng.normal(0, 6, img.shape)
    return np.clip(img + 40, 0, 255).astype(np.uint8)


def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bytes(w, h, bit_depth, color_type, rows, plte=None, trns=None, interlace=False):
    """A PNG from raw scanlines (filter byte 0). rows(y0, dy, x0, dx) returns one pass's bytes."""
    ihdr = struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, 1 if interlace else 0)
    if interlace:
        passes = [(0, 8, 0, 8), (0, 8, 4, 8), (4, 8, 0, 4), (0, 4, 2, 4), (2, 4, 0, 2),
                  (0, 2, 1, 2), (1, 2, 0, 1)]
    else:
        passes = [(0, 1, 0, 1)]
    raw = b"".join(rows(*p) for p in passes)
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
    if plte is not None:
        out += chunk(b"PLTE", plte)
    if trns is not None:
        out += chunk(b"tRNS", trns)
    return out + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def packed_rows(samples, bit_depth):
    """rows() for samples of shape (h, w) or (h, w, channels)."""
    def rows(y0, dy, x0, dx):
        sub = samples[y0::dy, x0::dx]
        if sub.size == 0:
            return b""
        out = bytearray()
        for r in sub.reshape(sub.shape[0], -1):
            if bit_depth == 16:
                line = r.astype(">u2").tobytes()
            elif bit_depth == 8:
                line = r.astype(np.uint8).tobytes()
            else:
                line = np.packbits(np.unpackbits(r.astype(np.uint8)[:, None], axis=1)
                                   [:, 8 - bit_depth:].reshape(-1)).tobytes()
            out += b"\x00" + line
        return bytes(out)
    return rows


def write_pil_fixtures(d):
    rgb = photo(61, 47, 1)
    Image.fromarray(rgb).convert("CMYK").save(os.path.join(d, "cmyk.jpg"), quality=90)
    Image.fromarray(rgb).convert("L").save(os.path.join(d, "gray.jpg"), quality=85)

    # EXIF orientation 6 (rotate 90 CW to display): must still decode as stored, 40x24
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(photo(40, 24, 2)).save(os.path.join(d, "exif6.jpg"), quality=90,
                                           exif=exif.tobytes())

    rng = np.random.default_rng(3)
    w, h = 37, 29
    g8 = rng.integers(0, 256, (h, w), dtype=np.uint16)
    g16 = rng.integers(0, 65536, (h, w), dtype=np.uint32)
    rgb16 = rng.integers(0, 65536, (h, w, 3), dtype=np.uint32)
    rgba16 = rng.integers(0, 65536, (h, w, 4), dtype=np.uint32)
    ga16 = rng.integers(0, 65536, (h, w, 2), dtype=np.uint32)
    rgb8 = photo(w, h, 4)
    rgba8 = np.concatenate([photo(w, h, 5), rng.integers(0, 256, (h, w, 1))], axis=2)
    ga8 = rng.integers(0, 256, (h, w, 2))
    idx = rng.integers(0, 200, (h, w))
    plte = rng.integers(0, 256, 200 * 3, dtype=np.uint8).tobytes()
    fixtures = {
        "png_gray8": (8, 0, g8, {}),
        "png_gray16": (16, 0, g16, {}),
        "png_ga8": (8, 4, ga8, {}),
        "png_ga16": (16, 4, ga16, {}),
        "png_rgb8": (8, 2, rgb8, {}),
        "png_rgb16": (16, 2, rgb16, {}),
        "png_rgba8": (8, 6, rgba8, {}),
        "png_rgba16": (16, 6, rgba16, {}),
        "png_pal8": (8, 3, idx, {"plte": plte}),
        "png_pal8_trns": (8, 3, idx, {"plte": plte, "trns": bytes(range(0, 250, 5))}),
        "png_pal4": (4, 3, idx % 16, {"plte": plte[:48]}),
        "png_gray1": (1, 0, g8 % 2, {}),
        "png_gray2": (2, 0, g8 % 4, {}),
        "png_gray4": (4, 0, g8 % 16, {}),
        "png_gray8_trns": (8, 0, g8, {"trns": b"\x00\x80"}),
        "png_rgb8_adam7": (8, 2, rgb8, {"interlace": True}),
        "png_rgba16_adam7": (16, 6, rgba16, {"interlace": True}),
    }
    for name, (bd, ct, samples, kw) in fixtures.items():
        data = png_bytes(w, h, bd, ct, packed_rows(samples, bd), **kw)
        with open(os.path.join(d, name + ".png"), "wb") as f:
            f.write(data)
    write_other_formats(d)
    return {"png_gray16.png": np.repeat((g16 >> 8).astype(np.uint8)[..., None], 3, axis=2)}


def write_other_formats(d):
    """WebP, BMP, PPM/PGM and TIFF fixtures, as PIL writes them."""
    im = Image.fromarray(photo(43, 31, 6))
    rgba = Image.fromarray(np.concatenate(
        [photo(43, 31, 7), np.random.default_rng(8).integers(0, 256, (31, 43, 1), np.uint8)], 2))
    saves = {
        "webp_lossy.webp": (im, dict(quality=80)),
        "webp_lossless.webp": (im, dict(lossless=True)),
        "webp_alpha.webp": (rgba, dict(quality=90)),
        "bmp_rgb24.bmp": (im, {}),
        "bmp_pal8.bmp": (im.convert("P"), {}),
        "bmp_gray8.bmp": (im.convert("L"), {}),
        "bmp_bw1.bmp": (im.convert("1"), {}),
        "bmp_rgba32.bmp": (rgba, {}),
        "pnm_rgb.ppm": (im, {}),
        "pnm_gray.pgm": (im.convert("L"), {}),
        "tiff_raw.tif": (im, {}),
        "tiff_lzw.tif": (im, dict(compression="tiff_lzw")),
        "tiff_deflate.tif": (im, dict(compression="tiff_adobe_deflate")),
        "tiff_jpeg.tif": (im, dict(compression="jpeg")),
        "tiff_gray.tif": (im.convert("L"), {}),
        "tiff_pal.tif": (im.convert("P"), {}),
    }
    for name, (img, kw) in saves.items():
        img.save(os.path.join(d, name), **kw)
    # maxval 100: samples scaled by PIL to round(v / 100 * 255)
    g = (np.asarray(im.convert("L"), np.uint16) * 100 // 255).astype(np.uint8)
    with open(os.path.join(d, "pnm_max100.pgm"), "wb") as f:
        f.write(b"P5\n# a comment\n43 31\n100\n" + g.tobytes())


def main():
    d = sys.argv[1]
    overrides = write_pil_fixtures(d)
    for name in sorted(os.listdir(d)):
        if not name.endswith((".jpg", ".png", ".webp", ".bmp", ".ppm", ".pgm", ".tif")):
            continue
        if name in overrides:
            px = overrides[name]
        else:
            px = np.asarray(Image.open(os.path.join(d, name)).convert("RGB"))
        h, w = px.shape[:2]
        with open(os.path.join(d, os.path.splitext(name)[0] + ".rgb"), "wb") as f:
            f.write(struct.pack("<II", w, h) + np.ascontiguousarray(px).tobytes())


if __name__ == "__main__":
    main()

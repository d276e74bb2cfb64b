/*
 * stk_imgfield.h: image fields, what a transform reads. stk_dataset_image_field (public, in
 * stoker.h) picks the field when the caller names none; the functions below say whether a field
 * is a decoded image (a uint8 array) and give its pixels as the RGB a decoder would.
 */
#ifndef STK_IMGFIELD_H
#define STK_IMGFIELD_H

#include "stk_internal.h"

/* The geometry of a uint8 image array field: (H, W, C) with C 3 or 1, (H, W), or (C, H, W). */
typedef struct stk__imgarray {
    uint32_t width, height;
    uint32_t channels; /* 3 (RGB) or 1 (grayscale) */
    bool chw;          /* planes (C, H, W) rather than interleaved (H, W, C) */
    size_t size;       /* bytes of one value: H * W * C */
} stk__imgarray;

/* Whether field `f` is a uint8 image array: STK_OK with *out filled, else STK_EINVAL with the
 * reason in err naming the field, its kind or dtype and shape. Shapes (H, W, 3) and (H, W, 1)
 * are interleaved, (H, W) grayscale, (3, H, W) and (1, H, W) planes (a last dimension of 3 or 1
 * wins over a first one). */
stk_status stk__imgarray_of(const stk_field *f, stk__imgarray *out, char *err, size_t err_size);

/* Whether one value needs converting (grayscale or planes) before it is interleaved RGB. */
static inline bool stk__imgarray_converts(const stk__imgarray *a)
{
    return a->channels != 3 || a->chw;
}

/* The value `src` (a->size bytes) as interleaved RGB, rows of width * 3 bytes: `src` itself
 * when it already is, else converted into `buf` (width * height * 3 bytes) and `buf` returned.
 * A grayscale value is replicated into the three channels, as PIL's convert("RGB") and the
 * decoders do for a grayscale JPEG or PNG. */
const uint8_t *stk__imgarray_rgb(const stk__imgarray *a, const uint8_t *src, uint8_t *buf);

/* The field a transform of `media` reads when none is named: stk_dataset_image_field's steps with
 * that kind's names, magics and arrays (audio: `audio`, wav/flac/mp3/..., RIFF/fLaC/OggS/ID3...,
 * waveform arrays). STK_EINVAL (none or several; stk_last_errmsg says which and how to name it),
 * or record 0's read error. */
stk_status stk__dataset_media_field(const stk_dataset *ds, stk_media media, size_t *field);

#endif /* STK_IMGFIELD_H */

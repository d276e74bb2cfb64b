/*
 * stk_imgfield.c: which field a transform reads when the caller names none
 * (stk_dataset_image_field: the loader, the Python Loader and `stoker bench` all ask it; an
 * audio transform's through stk__dataset_media_field, by the same steps with audio's names,
 * magics and arrays), and uint8 image array fields as RGB pixels (stk_imgfield.h).
 *
 * The pick for images, in order, each step only when the one before found nothing:
 *  1. a field named `image`;
 *  2. bytes fields named as encoded images: a name whose extension (after the last dot of its
 *     last `/` component, or the whole component) is an image format's (jpg, jpeg, png, webp,
 *     bmp, tif, tiff, ppm, pgm, pnm: WebDataset's fields), or ending in `image/encoded`
 *     (TFRecord's key);
 *  3. the other bytes fields whose value in record 0 starts with an image's magic (JPEG, PNG,
 *     WebP, TIFF; LMDB's `value`, an HDF5 vlen dataset);
 *  4. uint8 image arrays of three channels (H, W, 3) or (3, H, W), then of one channel (H, W),
 *     (H, W, 1) or (1, H, W); both sides at least 8 pixels (smaller 2-D arrays are rarely
 *     images).
 * For audio: a field named `audio`; bytes fields named wav, flac, mp3, ogg, oga, opus, aif,
 * aiff, au, snd; the bytes fields whose record 0 starts with an audio magic (RIFF/WAVE, fLaC,
 * OggS, ID3, FORM/AIFF, .snd, caff); waveform arrays (samples,) or (channels <= 8, samples) of
 * float32, float64, int16 or int32, 64 samples or more.
 * For video: a field named `video`; bytes fields named mp4, m4v, mov, mkv, webm, avi; the bytes
 * fields whose record 0 starts with a container's magic (an MP4 "ftyp" box, EBML, RIFF/AVI).
 * One candidate in a step is the pick; several are an error naming them; none at all an error
 * listing the fields. Either error says how to name the field.
 */
#include "source/stk_imgfield.h"

#include <ctype.h>
#include <inttypes.h>
#include <string.h>

#define MIN_AUTO_SIDE 8 /* step 4: smaller arrays are not picked without being named */
#define HOW_TO_NAME "name it with transform_field= (Python) or --field (stoker bench)"

stk_status stk__imgarray_of(const stk_field *f, stk__imgarray *out, char *err, size_t err_size)
{
    char shape[96] = "";
    size_t at = 0;
    for (uint32_t d = 0; f->kind == STK_FIELD_ARRAY && d < f->ndim && d < STK_MAX_DIMS; d++)
        at += (size_t)snprintf(shape + at, sizeof(shape) - at, "%s%" PRId64, d ? ", " : "",
                               f->shape[d]);
    const int64_t *s = f->shape;
    int64_t h = 0, w = 0, ch = 0;
    bool chw = false;
    if (f->kind == STK_FIELD_ARRAY && f->dtype == STK_DTYPE_UINT8) {
        if (f->ndim == 2) {
            h = s[0], w = s[1], ch = 1;
        } else if (f->ndim == 3 && (s[2] == 3 || s[2] == 1)) {
            h = s[0], w = s[1], ch = s[2];
        } else if (f->ndim == 3 && (s[0] == 3 || s[0] == 1)) {
            h = s[1], w = s[2], ch = s[0], chw = true;
        }
    }
    if (ch == 0 || h < 1 || w < 1 || h > UINT32_MAX / 4 || w > UINT32_MAX / 4) {
        if (f->kind != STK_FIELD_ARRAY)
            return stk__set_error(
                err, err_size, STK_EINVAL,
                "field '%.*s' is %s: a transform reads an encoded image (a bytes field) or a "
                "uint8 image array (H, W, 3), (H, W, 1), (H, W), (3, H, W) or (1, H, W)",
                STK_MAX_NAME, f->name, f->kind == STK_FIELD_INT64 ? "an int64" : "a float32");
        return stk__set_error(err, err_size, STK_EINVAL,
                              "field '%.*s' is a %s array of shape (%s%s): a transform reads an "
                              "encoded image (a bytes field) or a uint8 image array (H, W, 3), "
                              "(H, W, 1), (H, W), (3, H, W) or (1, H, W)",
                              STK_MAX_NAME, f->name, stk_dtype_name(f->dtype), shape,
                              f->ndim == 1 ? "," : "");
    }
    out->width = (uint32_t)w;
    out->height = (uint32_t)h;
    out->channels = (uint32_t)ch;
    out->chw = chw;
    out->size = (size_t)w * (size_t)h * (size_t)ch;
    return STK_OK;
}

const uint8_t *stk__imgarray_rgb(const stk__imgarray *a, const uint8_t *src, uint8_t *buf)
{
    if (!stk__imgarray_converts(a))
        return src;
    size_t npix = (size_t)a->width * a->height;
    if (a->channels == 1) { /* (H, W), (H, W, 1) and (1, H, W) are the same bytes */
        for (size_t i = 0; i < npix; i++)
            buf[3 * i] = buf[3 * i + 1] = buf[3 * i + 2] = src[i];
    } else { /* (3, H, W): interleave the planes */
        const uint8_t *r = src, *g = src + npix, *b = src + 2 * npix;
        for (size_t i = 0; i < npix; i++) {
            buf[3 * i] = r[i];
            buf[3 * i + 1] = g[i];
            buf[3 * i + 2] = b[i];
        }
    }
    return buf;
}

/* Step 2: `name`'s extension (after the last dot of its last `/` component, or the whole
 * component). */
static const char *name_ext(const char *name)
{
    const char *last = strrchr(name, '/');
    last = last ? last + 1 : name;
    const char *dot = strrchr(last, '.');
    return dot ? dot + 1 : last;
}

/* Step 2 for images: an image extension (WebDataset), or a name ending in `image/encoded`
 * (TFRecord). */
static bool named_as_image(const char *name)
{
    size_t n = strnlen(name, STK_MAX_NAME);
    static const char enc[] = "image/encoded";
    size_t ne = sizeof(enc) - 1;
    if (n >= ne && strcmp(name + n - ne, enc) == 0 && (n == ne || name[n - ne - 1] == '/'))
        return true;
    return stk__image_ext(name_ext(name));
}

/* Step 2 for audio: an audio extension (WebDataset's .wav/.flac/.mp3 members). */
static bool named_as_audio(const char *name)
{
    return stk__audio_ext(name_ext(name));
}

/* Step 2 for video: a video container's extension (WebDataset's .mp4 members). */
static bool named_as_video(const char *name)
{
    return stk__video_ext(name_ext(name));
}

/* Step 3: whether `p` starts with the magic of an image format (stk__image_magic, the decoders'
 * own; only magics too long to occur in text by chance: BMP's "BM" and Netpbm's "P6" are left to
 * the names). */
static bool image_magic(const uint8_t *p, size_t n)
{
    stk__imgfmt fmt = stk__image_magic(p, n);
    return fmt == STK__IMG_JPEG || fmt == STK__IMG_PNG || fmt == STK__IMG_WEBP ||
           fmt == STK__IMG_TIFF;
}

/* Step 3 for audio: the audio decoders' magics, the long ones only (not a bare MPEG sync). */
static bool audio_magic(const uint8_t *p, size_t n)
{
    return stk__audio_magic(p, n, true) != STK__AUD_UNKNOWN;
}

/* Step 4: 2 for a uint8 image array of three channels, 1 for one channel, 0 for neither (or too
 * small to be picked unnamed). */
static uint32_t image_array_rank(const stk_field *f)
{
    stk__imgarray a;
    char why[8];
    if (stk__imgarray_of(f, &a, why, sizeof(why)) < 0 || a.width < MIN_AUTO_SIDE ||
        a.height < MIN_AUTO_SIDE)
        return 0;
    return a.channels == 3 ? 2 : 1;
}

/* Step 4 for audio: a waveform array, (samples,) or (channels, samples), of a float or int16 /
 * int32 dtype (uint8 and int8 arrays are more often something else: name them). */
static uint32_t audio_array_rank(const stk_field *f)
{
    if (f->kind != STK_FIELD_ARRAY ||
        !(f->dtype == STK_DTYPE_FLOAT32 || f->dtype == STK_DTYPE_FLOAT64 ||
          f->dtype == STK_DTYPE_INT16 || f->dtype == STK_DTYPE_INT32))
        return 0;
    if (f->ndim == 1)
        return f->shape[0] >= 64 ? 2 : 0;
    return f->ndim == 2 && f->shape[0] >= 1 && f->shape[0] <= 8 && f->shape[1] >= 64 ? 2 : 0;
}

/* Step 4 for video: none (decoded frames stored as arrays are images). */
static uint32_t video_array_rank(const stk_field *f)
{
    (void)f;
    return 0;
}

/* What a media kind's transforms read: the four steps' tests and their words for messages. */
typedef struct field_rule {
    const char *name;                           /* step 1: the field so named */
    bool (*named)(const char *name);            /* step 2 */
    bool (*magic)(const uint8_t *p, size_t n);  /* step 3 */
    uint32_t (*array_rank)(const stk_field *f); /* step 4: 2 first, then 1 */
    const char *what[4];                        /* each step's candidates, for messages */
    const char *none;                           /* what none of them is, for the last message */
} field_rule;

static const field_rule image_rule = {
    "image",
    named_as_image,
    image_magic,
    image_array_rank,
    {"named as encoded images", "holding an encoded image in record 0",
     "uint8 image arrays of three channels", "uint8 image arrays of one channel"},
    "none is named 'image', named as encoded images (jpg, png, ..., image/encoded), holds an "
    "encoded image in record 0 or is a uint8 image array (H, W, 3), (3, H, W) or (H, W)"};

static const field_rule audio_rule = {
    "audio",
    named_as_audio,
    audio_magic,
    audio_array_rank,
    {"named as encoded audio", "holding encoded audio in record 0", "waveform arrays",
     "waveform arrays"},
    "none is named 'audio', named as encoded audio (wav, flac, mp3, ogg, opus, ...), holds "
    "encoded audio in record 0 or is a waveform array (samples,) or (channels, samples) of "
    "float32, float64, int16 or int32"};

static const field_rule video_rule = {
    "video",
    named_as_video,
    stk__video_magic,
    video_array_rank,
    {"named as videos", "holding a video file in record 0", "", ""},
    "none is named 'video', named as a video (mp4, mkv, webm, avi, mov, m4v) or holds a video "
    "file (MP4/MOV, Matroska/WebM, AVI) in record 0"};

/* Append "'name'" (", " between) to list. */
static void list_add(char *list, size_t size, const char *name)
{
    size_t at = strlen(list);
    snprintf(list + at, size - at, "%s'%.*s'", at ? ", " : "", STK_MAX_NAME, name);
}

/* Sniff the bytes fields of record 0 that step 2 did not look at; mark the candidates. */
static stk_status sniff_record0(const stk_dataset *ds, const field_rule *r, bool *cand,
                                size_t *n_cand)
{
    stk_status rc = STK_OK;
    size_t nf = stk_dataset_n_fields(ds), size = stk_dataset_max_record_size(ds);
    bool any = false;
    for (size_t f = 0; f < nf; f++)
        any |= stk_dataset_field(ds, f)->kind == STK_FIELD_BYTES;
    if (!any || stk_dataset_n_records(ds) == 0)
        return STK_OK;
    uint8_t *buf = stk__malloc(size ? size : 1);
    if (!buf)
        return stk__set_last_error(STK_ENOMEM, "out of memory reading record 0 (%zu bytes)", size);
    stk_record rec;
    stk_record_init(&rec);
    rc = stk_dataset_read(ds, 0, buf, size, &rec);
    if (rc < 0) {
        char why[STK_ERRMSG_SIZE];
        snprintf(why, sizeof(why), "%s", stk_last_errmsg());
        stk__set_last_error(rc, "%s (read to find the field the transforms apply to; %s)", why,
                            HOW_TO_NAME);
        goto fail;
    }
    for (size_t f = 0; f < nf && f < STK_MAX_FIELDS; f++)
        if (stk_dataset_field(ds, f)->kind == STK_FIELD_BYTES &&
            r->magic(rec.field[f], rec.field_size[f])) {
            cand[f] = true;
            (*n_cand)++;
        }
fail:
    stk__free(buf);
    return rc;
}

/* The field rule r picks in ds (see the top of this file). */
static stk_status pick_field(const stk_dataset *ds, const field_rule *r, size_t *field)
{
    size_t nf = STK_MIN(stk_dataset_n_fields(ds), (size_t)STK_MAX_FIELDS);
    int named = stk_dataset_find_field(ds, r->name);
    if (named >= 0) {
        *field = (size_t)named;
        return STK_OK;
    }
    for (int step = 0; step < 4; step++) {
        bool cand[STK_MAX_FIELDS] = {false};
        size_t n = 0;
        for (size_t f = 0; f < nf; f++) {
            const stk_field *fd = stk_dataset_field(ds, f);
            bool c = step == 0   ? fd->kind == STK_FIELD_BYTES && r->named(fd->name)
                     : step == 2 ? r->array_rank(fd) == 2
                     : step == 3 ? r->array_rank(fd) == 1
                                 : false;
            cand[f] = c;
            n += c;
        }
        if (step == 1) {
            stk_status rc = sniff_record0(ds, r, cand, &n);
            if (rc < 0)
                return rc;
        }
        if (n == 0)
            continue;
        char list[STK_MAX_FIELDS * (STK_MAX_NAME + 4) + 1] = "";
        for (size_t f = 0; f < nf; f++)
            if (cand[f]) {
                *field = f;
                list_add(list, sizeof(list), stk_dataset_field(ds, f)->name);
            }
        if (n == 1)
            return STK_OK;
        return stk__set_last_error(STK_EINVAL,
                                   "cannot tell which field the transforms apply to: %zu fields "
                                   "are %s (%s); %s",
                                   n, r->what[step], list, HOW_TO_NAME);
    }
    char list[STK_MAX_FIELDS * (STK_MAX_NAME + 16) + 1] = "";
    for (size_t f = 0; f < nf; f++) {
        const stk_field *fd = stk_dataset_field(ds, f);
        size_t at = strlen(list);
        snprintf(list + at, sizeof(list) - at, "%s'%.*s' (%s%s%s)", at ? ", " : "", STK_MAX_NAME,
                 fd->name, fd->kind == STK_FIELD_ARRAY ? stk_dtype_name(fd->dtype) : "",
                 fd->kind == STK_FIELD_ARRAY ? " " : "", stk_field_kind_name(fd->kind));
    }
    return stk__set_last_error(STK_EINVAL,
                               "no field for the transforms to apply to: %s; the fields: %s; %s",
                               r->none, list, HOW_TO_NAME);
}

stk_status stk_dataset_image_field(const stk_dataset *ds, size_t *field)
{
    if (!ds || !field)
        return stk__set_last_error(STK_EINVAL, "stk_dataset_image_field: NULL %s",
                                   !ds ? "dataset" : "field");
    return pick_field(ds, &image_rule, field);
}

stk_status stk__dataset_media_field(const stk_dataset *ds, stk_media media, size_t *field)
{
    switch (media) {
    case STK_MEDIA_IMAGE:
        return pick_field(ds, &image_rule, field);
    case STK_MEDIA_AUDIO:
        return pick_field(ds, &audio_rule, field);
    case STK_MEDIA_VIDEO:
        return pick_field(ds, &video_rule, field);
    }
    return stk__set_last_error(STK_EINVAL, "no field rule for media kind %d", (int)media);
}

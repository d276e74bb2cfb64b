/*
 * stk_tfexample.c: a small protobuf wire-format reader for tf.train.Example (varints,
 * length-delimited fields, packed and unpacked repeated lists; unknown fields skipped with bounds
 * checks), for the TFRecord source. It never reads outside the bytes it is given: every length
 * is checked against what remains (fuzz_protobuf).
 */
#include "common/stk_endian.h"
#include "source/tfrecord/stk_tfrecord.h"

#include <string.h>

/* ---- protobuf wire format ---- */

typedef struct pbuf {
    const uint8_t *p;
    size_t n, pos;
} pbuf;

static bool pb_varint(pbuf *b, uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 64 && b->pos < b->n; shift += 7) {
        uint8_t c = b->p[b->pos++];
        x |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *v = x;
            return true;
        }
    }
    return false; /* truncated, or longer than 10 bytes */
}

/* The next field's key; false at the end or on error (*bad set). */
static bool pb_key(pbuf *b, uint32_t *field, uint32_t *wt, const char **bad)
{
    uint64_t k;
    if (b->pos >= b->n)
        return false;
    if (!pb_varint(b, &k)) {
        *bad = "truncated field key";
        return false;
    }
    *field = (uint32_t)STK_MIN(k >> 3, UINT32_MAX);
    *wt = (uint32_t)(k & 7);
    if (*field == 0) {
        *bad = "field number 0";
        return false;
    }
    return true;
}

/* A length-delimited value: its bytes; false (with *bad) when it overruns. */
static bool pb_bytes(pbuf *b, const uint8_t **v, size_t *len, const char **bad)
{
    uint64_t l;
    if (!pb_varint(b, &l) || l > b->n - b->pos) {
        *bad = "length-delimited value overruns its message";
        return false;
    }
    *v = b->p + b->pos;
    *len = (size_t)l;
    b->pos += (size_t)l;
    return true;
}

/* Skip a value of wire type wt. */
static bool pb_skip(pbuf *b, uint32_t wt, const char **bad)
{
    uint64_t v;
    const uint8_t *s;
    size_t l;
    switch (wt) {
    case 0:
        if (pb_varint(b, &v))
            return true;
        *bad = "truncated varint";
        return false;
    case 1:
    case 5: {
        size_t w = wt == 1 ? 8 : 4;
        if (w <= b->n - b->pos) {
            b->pos += w;
            return true;
        }
        *bad = "truncated fixed-width value";
        return false;
    }
    case 2:
        return pb_bytes(b, &s, &l, bad);
    default:
        *bad = wt == 3 || wt == 4 ? "groups are not supported" : "invalid wire type";
        return false;
    }
}

/* Count the values of a list message of the given kind; false (with *bad) when malformed. */
static bool pb_list_count(const uint8_t *p, size_t n, int kind, uint64_t *count, const char **bad)
{
    pbuf b = {p, n, 0};
    uint32_t field, wt;
    uint64_t c = 0;
    while (pb_key(&b, &field, &wt, bad)) {
        if (field != 1) {
            if (!pb_skip(&b, wt, bad))
                return false;
            continue;
        }
        if (kind == STK__TF_BYTES && wt == 2) {
            const uint8_t *v;
            size_t l;
            if (!pb_bytes(&b, &v, &l, bad))
                return false;
            c++;
        } else if (kind == STK__TF_FLOAT && wt == 5) {
            if (!pb_skip(&b, wt, bad))
                return false;
            c++;
        } else if (kind == STK__TF_INT64 && wt == 0) {
            if (!pb_skip(&b, wt, bad))
                return false;
            c++;
        } else if (kind != STK__TF_BYTES && wt == 2) { /* packed */
            const uint8_t *v;
            size_t l;
            if (!pb_bytes(&b, &v, &l, bad))
                return false;
            if (kind == STK__TF_FLOAT) {
                if (l % 4) {
                    *bad = "packed float list whose length is not a multiple of 4";
                    return false;
                }
                c += l / 4;
            } else {
                pbuf pk = {v, l, 0};
                uint64_t x;
                while (pk.pos < pk.n) {
                    if (!pb_varint(&pk, &x)) {
                        *bad = "truncated varint in a packed int64 list";
                        return false;
                    }
                    c++;
                }
            }
        } else {
            *bad = "list value of the wrong wire type";
            return false;
        }
    }
    if (*bad)
        return false;
    *count = c;
    return true;
}

static int pb_fail(char *why, size_t why_size, const char *what, const char *bad, size_t at)
{
    if (why && why_size)
        snprintf(why, why_size, "%s: %s at byte %zu", what, bad, at);
    return -1;
}

/* One map entry (key = 1, value = 2) of Features. */
static int pb_entry(const uint8_t *p, size_t n, size_t base, stk__tf_feature_fn fn, void *ctx,
                    char *why, size_t why_size)
{
    pbuf b = {p, n, 0};
    const char *bad = NULL;
    uint32_t field, wt;
    stk__tf_feature f = {.key = p, .key_len = 0, .kind = STK__TF_NONE};
    const uint8_t *feat = NULL;
    size_t feat_len = 0;
    size_t feat_at = 0;
    while (pb_key(&b, &field, &wt, &bad)) {
        if (field == 1 && wt == 2) {
            if (!pb_bytes(&b, &f.key, &f.key_len, &bad))
                break;
        } else if (field == 2 && wt == 2) {
            if (!pb_bytes(&b, &feat, &feat_len, &bad))
                break;
            feat_at = b.pos - feat_len;
        } else if (!pb_skip(&b, wt, &bad)) {
            break;
        }
    }
    if (bad)
        return pb_fail(why, why_size, "feature map entry", bad, base + b.pos);
    if (feat) { /* Feature: oneof bytes_list = 1, float_list = 2, int64_list = 3 (last wins) */
        pbuf fb = {feat, feat_len, 0};
        while (pb_key(&fb, &field, &wt, &bad)) {
            if (field >= 1 && field <= 3 && wt == 2) {
                if (!pb_bytes(&fb, &f.list, &f.list_len, &bad))
                    break;
                f.kind = (int)field;
            } else if (!pb_skip(&fb, wt, &bad)) {
                break;
            }
        }
        if (bad)
            return pb_fail(why, why_size, "Feature", bad, base + feat_at + fb.pos);
        if (f.kind != STK__TF_NONE && !pb_list_count(f.list, f.list_len, f.kind, &f.count, &bad))
            return pb_fail(why, why_size, "value list", bad,
                           base + (size_t)(f.list - p)); /* offset of the list in the Example */
    }
    return fn(ctx, &f);
}

int stk__tf_example_parse(const uint8_t *p, size_t n, stk__tf_feature_fn fn, void *ctx, char *why,
                          size_t why_size)
{
    pbuf b = {p, n, 0};
    const char *bad = NULL;
    uint32_t field, wt;
    while (pb_key(&b, &field, &wt, &bad)) {
        if (field != 1 || wt != 2) { /* Example.features = 1 (repeated occurrences merge) */
            if (!pb_skip(&b, wt, &bad))
                break;
            continue;
        }
        const uint8_t *fs;
        size_t fl;
        if (!pb_bytes(&b, &fs, &fl, &bad))
            break;
        pbuf fb = {fs, fl, 0};
        size_t fbase = (size_t)(fs - p);
        while (pb_key(&fb, &field, &wt, &bad)) {
            if (field != 1 || wt != 2) { /* Features.feature = 1 (map entries) */
                if (!pb_skip(&fb, wt, &bad))
                    break;
                continue;
            }
            const uint8_t *e;
            size_t el;
            if (!pb_bytes(&fb, &e, &el, &bad))
                break;
            int r = pb_entry(e, el, (size_t)(e - p), fn, ctx, why, why_size);
            if (r != 0)
                return r;
        }
        if (bad)
            return pb_fail(why, why_size, "Features", bad, fbase + fb.pos);
    }
    if (bad)
        return pb_fail(why, why_size, "Example", bad, b.pos);
    return 0;
}

int stk__tf_bytes_value(const stk__tf_feature *f, const uint8_t **value, size_t *len)
{
    pbuf b = {f->list, f->list_len, 0};
    const char *bad = NULL;
    uint32_t field, wt;
    bool found = false;
    if (f->kind != STK__TF_BYTES || f->count != 1)
        return -1;
    while (pb_key(&b, &field, &wt, &bad)) {
        if (field != 1) {
            if (!pb_skip(&b, wt, &bad))
                return -1;
            continue;
        }
        if (wt != 2 || !pb_bytes(&b, value, len, &bad))
            return -1;
        found = true; /* one value (count 1): the last is the only */
    }
    return found && !bad ? 0 : -1;
}

int stk__tf_feature_value(const stk__tf_feature *f, void *dst, size_t cap, size_t *size)
{
    size_t w = f->kind == STK__TF_INT64 ? 8 : f->kind == STK__TF_FLOAT ? 4 : 0;
    uint8_t *out = dst;
    size_t at = 0;
    pbuf b = {f->list, f->list_len, 0};
    const char *bad = NULL;
    uint32_t field, wt;
    *size = 0;
    if (f->kind == STK__TF_NONE || (f->kind == STK__TF_BYTES && f->count != 1))
        return -1;
    if (f->kind == STK__TF_BYTES) {
        const uint8_t *v;
        size_t l;
        if (stk__tf_bytes_value(f, &v, &l) < 0)
            return -1;
        *size = l;
        if (l > cap)
            return 1;
        memcpy(out, v, l);
        return 0;
    }
    if (w) {
        if (f->count > SIZE_MAX / w)
            return -1;
        *size = (size_t)f->count * w;
        if (*size > cap)
            return 1;
    }
    while (pb_key(&b, &field, &wt, &bad)) {
        const uint8_t *v;
        size_t l;
        if (field != 1) {
            if (!pb_skip(&b, wt, &bad))
                return -1;
            continue;
        }
        pbuf vals = b;
        bool packed = wt == 2;
        if (packed) {
            if (!pb_bytes(&b, &v, &l, &bad))
                return -1;
            vals = (pbuf){v, l, 0};
        } else if (!((f->kind == STK__TF_INT64 && wt == 0) ||
                     (f->kind == STK__TF_FLOAT && wt == 5))) {
            return -1;
        }
        for (bool one = true; packed ? vals.pos < vals.n : one; one = false) {
            if (at + w > *size)
                return -1;
            if (f->kind == STK__TF_INT64) {
                uint64_t x;
                if (!pb_varint(&vals, &x))
                    return -1;
                stk__st64(out + at, x); /* two's complement, as int64 is on the wire */
            } else {
                if (vals.n - vals.pos < 4)
                    return -1;
                memcpy(out + at, vals.p + vals.pos, 4); /* fixed32: already little-endian */
                vals.pos += 4;
            }
            at += w;
        }
        if (!packed)
            b.pos = vals.pos;
    }
    if (bad || (w && at != *size))
        return -1;
    return 0;
}

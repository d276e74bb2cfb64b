/*
 * stk_resume.c: the loader's resume state, a flat JSON object: the dataset it belongs to (record
 * count and fingerprint), the seed, shuffle, and the consumer's position (epoch, samples
 * consumed, and the world size it was counted in). Loading it checks the dataset, the shuffle and
 * the position and restarts the loader there.
 */
#include "loader/stk_loader_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define STATE_VERSION 1

stk_status stk_loader_save_state(const stk_loader *L, char *buf, size_t buf_size)
{
    core *c = L->c;
    pthread_mutex_lock(&c->r.mu);
    uint64_t epoch = c->c_epoch, consumed = c->c_consumed;
    pthread_mutex_unlock(&c->r.mu);
    char order[40] = ""; /* only for an order other than STK_ORDER_ALL */
    if (c->order_hash)
        snprintf(order, sizeof(order), ", \"order\": \"%016" PRIx64 "\"", c->order_hash);
    int n = snprintf(buf, buf_size,
                     "{\"format\": \"stoker-state\", \"version\": %d, \"records\": %" PRIu64
                     ", \"fingerprint\": \"%016" PRIx64 "\", \"seed\": %" PRIu64
                     ", \"shuffle\": %s, \"epoch\": %" PRIu64 ", \"consumed\": %" PRIu64
                     ", \"world\": %" PRIu32 "%s}",
                     STATE_VERSION, c->n, stk_dataset_fingerprint(c->ds), c->seed,
                     c->shuffle ? "true" : "false", epoch, consumed, c->world, order);
    if (n < 0 || (size_t)n >= buf_size)
        return STK_ELIMIT;
    return STK_OK;
}

/* The value of top-level key `key` of the state (the library's JSON reader), or NULL. */
static const char *json_find(const char *json, const char *key)
{
    const char *v;
    size_t n;
    return stk_json_member(json, key, &v, &n) ? v : NULL;
}

/* Read the unsigned integer value of `key` into *out: 1, or 0 when the key is missing, or -1 when
 * its value is not a plain unsigned integer ("5", -1, 1.5, 1e3, or past 2^64 - 1). */
static int json_u64(const char *json, const char *key, uint64_t *out)
{
    const char *p = json_find(json, key);
    if (!p)
        return 0;
    if (*p < '0' || *p > '9')
        return -1;
    char *end;
    errno = 0;
    *out = strtoull(p, &end, 10);
    if (errno || !(*end == ',' || *end == '}' || *end == ' ' || *end == '\t' || *end == '\n' ||
                   *end == '\r'))
        return -1;
    return 1;
}

/* Read the required unsigned integer `key` of a state, or say which key is missing or wrong. */
static stk_status state_u64(stk_loader *L, const char *json, const char *key, uint64_t *out)
{
    int r = json_u64(json, key, out);
    if (r > 0)
        return STK_OK;
    if (r == 0)
        return stk__set_error(L->errmsg, sizeof(L->errmsg), STK_EINVAL,
                              "state has no \"%s\" (not a whole state?)", key);
    const char *p = json_find(json, key);
    size_t n = 0;
    while (n < 24 && p[n] && p[n] != ',' && p[n] != '}')
        n++;
    return stk__set_error(
        L->errmsg, sizeof(L->errmsg), STK_EINVAL,
        "state's \"%s\" is %.*s, not a whole number >= 0 (a corrupt or edited state?)", key, (int)n,
        p);
}

stk_status stk_loader_load_state(stk_loader *L, const char *json)
{
    core *c = L->c;
    stk_status rc = STK_OK;
    uint64_t version, records, seed, epoch, consumed, fp;
    L->errmsg[0] = '\0';
    if (!json)
        STK_FAIL(L->errmsg, STK_EINVAL, "state is NULL");
    const char *fmt = json_find(json, "format");
    if (!fmt || strncmp(fmt, "\"stoker-state\"", 14) != 0)
        STK_FAIL(L->errmsg, STK_EINVAL,
                 "not a stoker loader state (no \"format\": "
                 "\"stoker-state\")");
    STK_TRY(state_u64(L, json, "version", &version));
    if (version > STATE_VERSION)
        STK_FAIL(L->errmsg, STK_ENOTSUP,
                 "state version %" PRIu64 " is newer than this stoker (reads %d)", version,
                 STATE_VERSION);
    STK_TRY(state_u64(L, json, "records", &records));
    STK_TRY(state_u64(L, json, "seed", &seed));
    STK_TRY(state_u64(L, json, "epoch", &epoch));
    STK_TRY(state_u64(L, json, "consumed", &consumed));
    const char *fps = json_find(json, "fingerprint");
    if (!fps || *fps != '"')
        STK_FAIL(L->errmsg, STK_EINVAL, "state has no \"fingerprint\" string");
    fp = strtoull(fps + 1, NULL, 16);
    const char *sh = json_find(json, "shuffle");
    bool shuffle = sh && strncmp(sh, "true", 4) == 0;
    if (records != c->n || fp != stk_dataset_fingerprint(c->ds))
        STK_FAIL(L->errmsg, STK_EINVAL,
                 "state belongs to another dataset (%" PRIu64 " records, fingerprint %016" PRIx64
                 "; this one has %" PRIu64 ", %016" PRIx64 ")",
                 records, fp, c->n, stk_dataset_fingerprint(c->ds));
    if (shuffle != c->shuffle)
        STK_FAIL(L->errmsg, STK_EINVAL,
                 "state was taken with shuffle=%s, this loader has "
                 "shuffle=%s",
                 shuffle ? "true" : "false", c->shuffle ? "true" : "false");
    const char *ord = json_find(json, "order");
    uint64_t oh = ord && *ord == '"' ? strtoull(ord + 1, NULL, 16) : 0;
    if (oh != c->order_hash)
        STK_FAIL(L->errmsg, STK_EINVAL,
                 "state was taken with another epoch order (sampler: %s), this loader has %s; a "
                 "custom sampler resumes exactly only if it gives the same indices again",
                 oh ? "a list or weights" : "every record",
                 c->order_hash ? "its own"
                               : "every "
                                 "record");
    /* The epoch's end is its length padded up to a multiple of the state's world size (states
     * from before "world" was saved bound it by the largest world instead). */
    uint64_t world = 0x7fffffffULL;
    int hw = json_u64(json, "world", &world);
    if (hw < 0 || (hw > 0 && (world < 1 || world > 0x7fffffffULL)))
        STK_FAIL(L->errmsg, STK_EINVAL, "state's \"world\" is not a world size");
    uint64_t end = hw > 0 ? (c->m + world - 1) / world * world : c->m + world;
    if (consumed > end)
        STK_FAIL(L->errmsg, STK_EINVAL,
                 "state position %" PRIu64 " is past the epoch's end (%" PRIu64
                 " samples%s): a corrupt or edited state?",
                 consumed, end, hw > 0 && end > c->m ? " with the ranks' padding" : "");
    stk__loader_reset(c, seed, epoch, consumed);
    return STK_OK;
fail:
    return rc;
}

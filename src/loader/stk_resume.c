/*
 * stk_resume.c: the loader's resume state, a flat JSON object: the dataset it belongs to (record
 * count and fingerprint), the seed, shuffle, and the consumer's position (epoch, samples
 * consumed). Loading it checks the dataset and the shuffle and restarts the loader there.
 */
#include "loader/stk_loader_int.h"

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
                     ", \"shuffle\": %s, \"epoch\": %" PRIu64 ", \"consumed\": %" PRIu64 "%s}",
                     STATE_VERSION, c->n, stk_dataset_fingerprint(c->ds), c->seed,
                     c->shuffle ? "true" : "false", epoch, consumed, order);
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

/* Read an unsigned integer value; false if missing or malformed. */
static bool json_u64(const char *json, const char *key, uint64_t *out)
{
    const char *p = json_find(json, key);
    if (!p || *p < '0' || *p > '9')
        return false;
    char *end;
    *out = strtoull(p, &end, 10);
    return end != p;
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
    if (!json_u64(json, "version", &version))
        STK_FAIL(L->errmsg, STK_EINVAL, "state has no valid \"version\"");
    if (version > STATE_VERSION)
        STK_FAIL(L->errmsg, STK_ENOTSUP,
                 "state version %" PRIu64 " is newer than this stoker (reads %d)", version,
                 STATE_VERSION);
    const char *fps = json_find(json, "fingerprint");
    if (!json_u64(json, "records", &records) || !json_u64(json, "seed", &seed) ||
        !json_u64(json, "epoch", &epoch) || !json_u64(json, "consumed", &consumed) || !fps ||
        *fps != '"')
        STK_FAIL(L->errmsg, STK_EINVAL,
                 "state is missing records, seed, epoch, consumed or "
                 "fingerprint");
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
    if (consumed > c->m + 0x7fffffffULL) /* padding is always below one world size */
        STK_FAIL(L->errmsg, STK_EINVAL, "state position %" PRIu64 " is past the epoch's end",
                 consumed);
    stk__loader_reset(c, seed, epoch, consumed);
    return STK_OK;
fail:
    return rc;
}

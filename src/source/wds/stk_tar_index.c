/*
 * stk_tar_index.c: the member-list cache of a tar shard (stk_tar.h). The members found by one
 * scan are kept as index `stkidx` (stk_idxfile.h): beside a local shard as `<shard>.stkidx` when
 * its directory is writable, validated at the next open against the shard's size, mtime and
 * inode; for a remote shard, as an entry of the block cache (when one is set) keyed by its URL,
 * ETag or Last-Modified and size, so that reopening costs a HEAD instead of reading every header
 * again. Both are checked (magic, identity, sizes, the XXH3 checksum) and rebuilt when anything
 * differs. Writing is best effort: a read-only directory or no cache only means the next open
 * scans again. Moved out of stk_src_wds.c.
 */
#include "common/stk_endian.h"
#include "source/stk_idxfile.h"
#include "source/wds/stk_tar.h"

#include <string.h>

#define CACHE_NAME "stkidx"
#define CACHE_MAGIC "STKWDSX2" /* X2: 32-bit member sizes and the .gz trailer size */
#define BODY_HEAD 24           /* n_members, names_size, reserved */

/* The member list in the index body b (n bytes) when it is consistent with a shard of
 * shard_size bytes; false otherwise (ml empty). */
static bool decode(const uint8_t *b, size_t n, uint64_t shard_size, stk__tar_members *ml)
{
    if (n < BODY_HEAD)
        return false;
    uint64_t nm = stk__ld64(b), names = stk__ld64(b + 8);
    if (nm > (n - BODY_HEAD) / 24 || names != n - BODY_HEAD - nm * 24 || names > UINT32_MAX)
        return false;
    ml->v = stk__malloc(nm ? (size_t)nm * sizeof(stk__tar_member) : 1);
    ml->names = stk__malloc(names ? (size_t)names : 1);
    if (!ml->v || !ml->names)
        goto bad;
    const uint8_t *e = b + BODY_HEAD;
    for (uint64_t i = 0; i < nm; i++, e += 24) {
        stk__tar_member m = {stk__ld64(e), stk__ld32(e + 8), stk__ld32(e + 16), stk__ld32(e + 20),
                             stk__ld32(e + 12)};
        if (m.data_off < STK__TAR_BLOCK || m.data_off > shard_size ||
            m.size > shard_size - m.data_off || m.name_off > names ||
            m.name_len > names - m.name_off)
            goto bad;
        ml->v[i] = m;
    }
    memcpy(ml->names, e, (size_t)names);
    ml->n = ml->cap = (size_t)nm;
    ml->names_len = ml->names_cap = (size_t)names;
    return true;
bad:
    stk__tar_members_free(ml);
    return false;
}

/* The index of the member list (stk__idx_new; NULL when out of memory), not yet sealed. */
static uint8_t *encode(const uint64_t id[3], const stk__tar_members *ml, size_t *n)
{
    uint8_t *b = stk__idx_new(CACHE_MAGIC, id, BODY_HEAD + ml->n * 24 + ml->names_len, n);
    if (!b)
        return NULL;
    uint8_t *e = b + STK__IDX_HEAD;
    stk__st64(e, ml->n);
    stk__st64(e + 8, ml->names_len);
    e += BODY_HEAD;
    for (size_t i = 0; i < ml->n; i++, e += 24) {
        stk__st64(e, ml->v[i].data_off);
        stk__st32(e + 8, (uint32_t)ml->v[i].size); /* the scan refuses members of 4 GiB */
        stk__st32(e + 12, ml->v[i].gz_size);
        stk__st32(e + 16, ml->v[i].name_off);
        stk__st32(e + 20, ml->v[i].name_len);
    }
    if (ml->names_len)
        memcpy(e, ml->names, ml->names_len);
    return b;
}

stk_status stk__tar_index(stk__file *f, stk__tar_members *ml, bool *from_cache, char *err,
                          size_t err_size)
{
    uint64_t id[3] = {0};
    size_t n;
    *from_cache = false;
    bool cacheable = stk__idx_identity(f, id);
    uint8_t *b = cacheable ? stk__idx_load(f, CACHE_NAME, true, CACHE_MAGIC, id, &n) : NULL;
    if (b && decode(b + STK__IDX_HEAD, n - STK__IDX_HEAD - STK__IDX_TAIL, f->size, ml)) {
        *from_cache = true;
        stk__free(b);
        return STK_OK;
    }
    stk__free(b);
    stk_status rc = stk__tar_scan(f, ml, err, err_size);
    if (rc == STK_OK && cacheable && (b = encode(id, ml, &n)))
        stk__idx_store(f, CACHE_NAME, true, b, n);
    stk__free(b);
    return rc;
}

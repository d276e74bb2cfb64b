/*
 * stk_wds_group.c: a WebDataset shard's tar members grouped into samples: the key is the member
 * path up to the first dot of its last component, the extension after it names the field; the
 * members of one key must be adjacent (a key seen again later is an error, found through a hash
 * set of keys). Moved out of stk_src_wds.c, which builds the dataset from the groups.
 */
#include "source/wds/stk_wds_group.h"

#include <xxhash.h>

#include <inttypes.h>
#include <string.h>

#define TAR_BLOCK STK__TAR_BLOCK

static bool grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    size_t c = STK_MAX(*cap * 2, need + 1024);
    void *q = stk__realloc(*p, c * elem);
    if (!q)
        return false;
    *p = q;
    *cap = c;
    return true;
}

/* Split a member name into key and extension (lowercased into ext); false when it has none. */
static bool split_name(const char *name, size_t len, size_t *key_len, char *ext, size_t ext_size,
                       size_t *ext_len)
{
    size_t base = len;
    while (base > 0 && name[base - 1] != '/')
        base--;
    const char *dot = memchr(name + base, '.', len - base);
    if (!dot || dot == name + base)
        return false; /* no extension, or a hidden file */
    *key_len = (size_t)(dot - name);
    size_t el = len - *key_len - 1;
    *ext_len = el;
    for (size_t i = 0; i < el && i + 1 < ext_size; i++) {
        char c = dot[1 + i];
        ext[i] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
    }
    ext[STK_MIN(el, ext_size - 1)] = '\0';
    return true;
}

static bool valid_ext(const char *e, size_t len)
{
    if (len == 0 || len >= STK_MAX_NAME)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = e[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-'))
            return false;
    }
    return strcmp(e, "__key__") != 0;
}

/* Open-addressing set of key hashes -> record, to find a key whose files are not adjacent. */
typedef struct keyset {
    uint64_t *h;
    uint32_t *rec;
    size_t cap;
} keyset;

/* Group one shard's members into samples (appended to b); keys go to *keys_out. */
stk_status stk__wds_group_shard(stk__wds_builder *b, uint32_t s, const char *path,
                                const stk__tar_members *ml, char **keys_out, uint64_t *count,
                                char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    keyset ks = {0};
    char *keys = NULL;
    size_t keys_len = 0, keys_cap = 0;
    size_t first_rec = b->n_recs;
    ks.cap = 64;
    while (ks.cap < ml->n * 2)
        ks.cap *= 2;
    ks.h = stk__calloc(ks.cap, sizeof(*ks.h));
    ks.rec = stk__calloc(ks.cap, sizeof(*ks.rec));
    if (!ks.h || !ks.rec)
        STK_FAIL_E(STK_ENOMEM, "%s: out of memory indexing the tar", path);
    const char *cur_key = NULL;
    size_t cur_len = 0;
    for (size_t m = 0; m < ml->n; m++) {
        const stk__tar_member *mb = &ml->v[m];
        const char *name = ml->names + mb->name_off;
        size_t klen, elen;
        char ext[STK_MAX_NAME + 1];
        size_t base = mb->name_len;
        while (base > 0 && name[base - 1] != '/')
            base--;
        if (mb->name_len - base >= 2 && name[base] == '_' && name[base + 1] == '_')
            continue; /* __meta__ and the like */
        if (!split_name(name, mb->name_len, &klen, ext, sizeof(ext), &elen))
            continue; /* no extension: not part of a sample */
        uint64_t hoff = mb->data_off - TAR_BLOCK;
        uint32_t gz_size = STK__TAR_NOT_GZ;
        if (elen > 3 && elen < sizeof(ext) && strcmp(ext + elen - 3, ".gz") == 0) {
            elen -= 3; /* "json.gz": field json, gunzipped at read, as webdataset does */
            ext[elen] = '\0';
            gz_size = mb->gz_size;
        }
        if (!valid_ext(ext, elen))
            STK_FAIL_E(STK_EINVAL,
                       "%s: member '%.*s' at byte %" PRIu64
                       ": extension '%.*s' cannot be a field name (1 to %d characters of "
                       "[a-z0-9_.-])",
                       path, (int)STK_MIN(mb->name_len, 200), name, hoff, (int)STK_MIN(elen, 60),
                       name + klen + 1, STK_MAX_NAME - 1);
        if (klen >= UINT32_MAX / 2)
            STK_FAIL_E(STK_ELIMIT, "%s: key too long at byte %" PRIu64, path, hoff);
        size_t e = 0;
        while (e < b->ext.n && strcmp(b->ext.name[e], ext) != 0)
            e++;
        if (e == b->ext.n) {
            if (e == STK_MAX_FIELDS - 1)
                STK_FAIL_E(STK_ELIMIT,
                           "%s: member '%.*s' at byte %" PRIu64
                           ": more than %d distinct extensions (fields)",
                           path, (int)STK_MIN(mb->name_len, 200), name, hoff, STK_MAX_FIELDS - 1);
            memcpy(b->ext.name[e], ext, STK_MAX_NAME);
            b->ext.n++;
        }
        bool same = cur_key && cur_len == klen && memcmp(cur_key, name, klen) == 0;
        if (!same) {
            /* a new sample: its key must not have appeared before in this shard */
            uint64_t hv = XXH3_64bits(name, klen) | 1;
            size_t slot = (size_t)hv & (ks.cap - 1);
            while (ks.h[slot]) {
                const stk__wds_tmprec *o = &b->recs[ks.rec[slot]];
                if (ks.h[slot] == hv && o->key_len == klen &&
                    memcmp(keys + o->key_off, name, klen) == 0)
                    break;
                slot = (slot + 1) & (ks.cap - 1);
            }
            if (ks.h[slot])
                STK_FAIL_E(STK_EFORMAT,
                           "%s: sample '%.*s': its files are not adjacent (member '%.*s' at byte "
                           "%" PRIu64 " comes after another sample's files; WebDataset shards "
                           "keep the files of one key together)",
                           path, (int)STK_MIN(klen, 200), name, (int)STK_MIN(mb->name_len, 200),
                           name, hoff);
            if (b->n_recs >= UINT32_MAX)
                STK_FAIL_E(STK_ELIMIT, "%s: too many samples", path);
            ks.h[slot] = hv;
            ks.rec[slot] = (uint32_t)b->n_recs;
            if (!grow((void **)&b->recs, &b->cap_recs, b->n_recs + 1, sizeof(*b->recs)) ||
                !grow((void **)&keys, &keys_cap, keys_len + klen, 1))
                STK_FAIL_E(STK_ENOMEM, "%s: out of memory indexing the tar", path);
            if (keys_len + klen > UINT32_MAX)
                STK_FAIL_E(STK_ELIMIT, "%s: keys over 4 GiB", path);
            b->recs[b->n_recs] =
                (stk__wds_tmprec){s, (uint32_t)b->n_mems, (uint32_t)keys_len, (uint32_t)klen, 0};
            b->n_recs++;
            memcpy(keys + keys_len, name, klen);
            keys_len += klen;
            cur_key = name;
            cur_len = klen;
        }
        stk__wds_tmprec *r = &b->recs[b->n_recs - 1];
        for (uint32_t k = 0; k < r->n; k++)
            if (b->mems[r->first + k].ext == e)
                STK_FAIL_E(STK_EFORMAT,
                           "%s: sample '%.*s' has two '%s' members (the second at byte %" PRIu64
                           ")",
                           path, (int)STK_MIN(klen, 200), name, ext, hoff);
        if (b->n_mems >= UINT32_MAX ||
            !grow((void **)&b->mems, &b->cap_mems, b->n_mems + 1, sizeof(*b->mems)))
            STK_FAIL_E(STK_ENOMEM, "%s: out of memory indexing the tar", path);
        b->mems[b->n_mems++] =
            (stk__wds_tmpmem){mb->data_off, (uint32_t)mb->size, (uint8_t)e, gz_size};
        r->n++;
    }
    *count = b->n_recs - first_rec;
    *keys_out = keys;
    keys = NULL;
fail:
    stk__free(keys);
    stk__free(ks.h);
    stk__free(ks.rec);
    return rc;
}

/*
 * stk_idxfile.c: the envelope of the formats' indexes (stk_idxfile.h), beside a local file or in
 * the remote byte source's cache. Moved out of stk_tar_index.c, whose .stkidx layout it keeps
 * byte for byte.
 */
#include "source/stk_idxfile.h"
#include "common/stk_endian.h"
#include "io/stk_vfs_http.h"

#include <xxhash.h>

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define IDX_MAX ((uint64_t)1 << 40) /* a larger index file is not read */
#define OFFSETS_MAGIC "STKOFFS1"

static bool is_local(const stk__file *f)
{
    return f->vfs == &stk__vfs_posix;
}

bool stk__idx_identity(const stk__file *f, uint64_t id[3])
{
    if (!is_local(f)) {
        id[0] = f->size;
        id[1] = XXH3_64bits(f->path, strlen(f->path));
        id[2] = 0;
        return true;
    }
    /* the version the open pinned (not the path's now: a file replaced since by another is
     * not the one read through f) */
    id[0] = f->size;
    id[1] = f->mtime_ns;
    id[2] = f->ino;
    return true;
}

uint8_t *stk__idx_new(const char magic[8], const uint64_t id[3], size_t body_len, size_t *n)
{
    *n = STK__IDX_HEAD + body_len + STK__IDX_TAIL;
    uint8_t *b = stk__calloc(1, *n);
    if (b) {
        memcpy(b, magic, 8);
        for (int k = 0; k < 3; k++)
            stk__st64(b + 8 + 8 * k, id[k]);
    }
    return b;
}

/* `<path>.<name>` (a fresh string; NULL when out of memory). */
static char *beside_path(const char *path, const char *name)
{
    size_t pl = strlen(path), nl = strlen(name);
    char *p = stk__malloc(pl + nl + 2);
    if (p) {
        memcpy(p, path, pl);
        p[pl] = '.';
        memcpy(p + pl + 1, name, nl + 1);
    }
    return p;
}

/* The bytes of the local index file at p, or NULL. */
static uint8_t *read_local(const char *p, size_t *n)
{
    stk__file *cf = NULL;
    uint8_t *b = NULL;
    if (stk__vfs_open(p, &cf, NULL, 0) == STK_OK && cf->size <= IDX_MAX &&
        (b = stk__malloc(cf->size ? (size_t)cf->size : 1)) &&
        stk__vfs_read(cf, 0, b, (size_t)cf->size, NULL, 0) == STK_OK) {
        *n = (size_t)cf->size;
    } else {
        stk__free(b);
        b = NULL;
    }
    stk__vfs_close(cf);
    return b;
}

/* A local file's index where its directory takes none (read-only, or the name is taken): an aux
 * entry of the cache directory (STOKER_CACHE_DIR, cache_dir=) under the key "local:<path>", as
 * remote objects' are under their URL. NULL: no cache directory set. */
static stk__cache *local_cache(const char *path, char **key)
{
    stk__cache *c = NULL;
    *key = NULL;
    if (stk__cache_from_env(&c, NULL, 0) != STK_OK || !c)
        return NULL;
    size_t pl = strlen(path);
    if (!(*key = stk__malloc(pl + 7)))
        return NULL;
    memcpy(*key, "local:", 6);
    memcpy(*key + 6, path, pl + 1);
    return c;
}

/* b (n bytes) when it is a sealed index with this magic and identity; else freed, NULL. */
static uint8_t *checked(uint8_t *b, size_t *n, const char magic[8], const uint64_t id[3])
{
    if (b && *n >= STK__IDX_HEAD + STK__IDX_TAIL && memcmp(b, magic, 8) == 0 &&
        stk__ld64(b + 8) == id[0] && stk__ld64(b + 16) == id[1] && stk__ld64(b + 24) == id[2] &&
        XXH3_64bits(b, *n - STK__IDX_TAIL) == stk__ld64(b + *n - STK__IDX_TAIL))
        return b;
    stk__free(b);
    *n = 0;
    return NULL;
}

uint8_t *stk__idx_load(stk__file *f, const char *name, bool beside, const char magic[8],
                       const uint64_t id[3], size_t *n)
{
    uint8_t *b = NULL;
    *n = 0;
    if (!is_local(f)) {
        stk__vfs_aux_get(f, name, &b, n);
        return checked(b, n, magic, id);
    }
    return beside ? stk__idx_load_local(f->path, name, magic, id, n) : NULL;
}

uint8_t *stk__idx_load_local(const char *path, const char *name, const char magic[8],
                             const uint64_t id[3], size_t *n)
{
    *n = 0;
    char *p = beside_path(path, name);
    uint8_t *b = p ? read_local(p, n) : NULL;
    stk__free(p);
    if ((b = checked(b, n, magic, id)) != NULL)
        return b;
    char *key; /* none beside it (or a stale or damaged one): the cache directory's, if any */
    stk__cache *c = local_cache(path, &key);
    if (c && stk__cache_aux_get(c, key, name, &b, n))
        b = checked(b, n, magic, id);
    stk__free(key);
    return b;
}

/* Write b beside the local file as p, atomically (temp file + rename); failures leave nothing
 * and return false. */
static bool write_local(const char *p, const uint8_t *b, size_t n)
{
    static _Atomic unsigned seq;
    char *tmp = stk__malloc(strlen(p) + 48);
    bool ok = false;
    if (!tmp)
        return false;
    sprintf(tmp, "%s.tmp.%ld.%u", p, (long)getpid(), seq++);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
        bool done = stk__write_full(fd, b, n);
        ok = close(fd) == 0 && done && rename(tmp, p) == 0;
        if (!ok)
            unlink(tmp);
    }
    stk__free(tmp);
    return ok;
}

bool stk__idx_store(stk__file *f, const char *name, bool beside, uint8_t *b, size_t n)
{
    if (is_local(f))
        return beside && stk__idx_store_local(f->path, name, b, n) != STK__IDX_NOWHERE;
    stk__st64(b + n - STK__IDX_TAIL, XXH3_64bits(b, n - STK__IDX_TAIL));
    stk__vfs_aux_put(f, name, b, n);
    return f->vfs->aux_put != NULL;
}

stk__idx_where stk__idx_store_local(const char *path, const char *name, uint8_t *b, size_t n)
{
    stk__st64(b + n - STK__IDX_TAIL, XXH3_64bits(b, n - STK__IDX_TAIL));
    char *p = beside_path(path, name);
    bool done = p && write_local(p, b, n);
    stk__free(p);
    if (done)
        return STK__IDX_BESIDE;
    char *key = NULL;
    stk__cache *c = local_cache(path, &key);
    done = c && key && stk__cache_aux_put(c, key, name, b, n);
    stk__free(key);
    return done ? STK__IDX_CACHE : STK__IDX_NOWHERE;
}

/* A part's entry name: name's first letter and 15 hex digits of XXH3(name, off, len) (the cache's
 * aux names are at most 16 lower-case letters and digits). */
static void part_name(const char *name, uint64_t off, uint64_t len, char out[17])
{
    uint8_t k[16];
    stk__st64(k, off);
    stk__st64(k + 8, len);
    uint64_t h = XXH3_64bits_withSeed(k, sizeof(k), XXH3_64bits(name, strlen(name)));
    snprintf(out, 17, "%c%015llx", name[0], (unsigned long long)(h >> 4));
}

/* The aux entry `name` of a part of f: in the remote cache, or the cache directory's entry
 * for a local f (false: none, or no cache directory). */
static bool part_get(stk__file *f, const char *name, uint8_t **b, size_t *n)
{
    if (!is_local(f))
        return stk__vfs_aux_get(f, name, b, n);
    char *key;
    stk__cache *c = local_cache(f->path, &key);
    bool got = c && key && stk__cache_aux_get(c, key, name, b, n);
    stk__free(key);
    return got;
}

uint8_t *stk__idx_part_load(stk__file *f, const char *name, const char magic[8], uint64_t off,
                            uint64_t len, const uint8_t **body, size_t *body_len)
{
    char pn[17];
    uint64_t id[3];
    uint8_t *b = NULL;
    size_t n = 0;
    *body = NULL;
    *body_len = 0;
    part_name(name, off, len, pn);
    if (!stk__idx_identity(f, id) || !part_get(f, pn, &b, &n))
        return NULL;
    if (!(b = checked(b, &n, magic, id)))
        return NULL;
    const uint8_t *p = b + STK__IDX_HEAD;
    size_t pl = n - STK__IDX_HEAD - STK__IDX_TAIL;
    if (pl < 16 || stk__ld64(p) != off || stk__ld64(p + 8) != len) {
        stk__free(b); /* another part's under a colliding name */
        return NULL;
    }
    *body = p + 16;
    *body_len = pl - 16;
    return b;
}

void stk__idx_part_store(stk__file *f, const char *name, const char magic[8], uint64_t off,
                         uint64_t len, const void *body, size_t body_len)
{
    char pn[17];
    uint64_t id[3];
    size_t n;
    uint8_t *b = stk__idx_identity(f, id) && body_len <= IDX_MAX
                     ? stk__idx_new(magic, id, 16 + body_len, &n)
                     : NULL;
    if (!b)
        return;
    part_name(name, off, len, pn);
    stk__st64(b + STK__IDX_HEAD, off);
    stk__st64(b + STK__IDX_HEAD + 8, len);
    memcpy(b + STK__IDX_HEAD + 16, body, body_len);
    stk__st64(b + n - STK__IDX_TAIL, XXH3_64bits(b, n - STK__IDX_TAIL));
    if (!is_local(f)) {
        stk__vfs_aux_put(f, pn, b, n);
    } else {
        char *key;
        stk__cache *c = local_cache(f->path, &key);
        if (c && key)
            stk__cache_aux_put(c, key, pn, b, n);
        stk__free(key);
    }
    stk__free(b);
}

bool stk__idx_offsets_load(stk__file *f, const char *name, uint64_t min_gap, uint64_t **off,
                           uint64_t *count)
{
    uint64_t id[3];
    size_t n;
    *off = NULL;
    *count = 0;
    if (is_local(f) || !stk__idx_identity(f, id))
        return false;
    uint8_t *b = stk__idx_load(f, name, false, OFFSETS_MAGIC, id, &n);
    if (!b)
        return false;
    const uint8_t *body = b + STK__IDX_HEAD;
    size_t body_len = n - STK__IDX_HEAD - STK__IDX_TAIL;
    uint64_t c = body_len >= 8 ? stk__ld64(body) : 0;
    uint64_t *o = NULL;
    bool ok = c >= 1 && c < body_len / 8 && body_len == 8 + (c + 1) * 8 &&
              (o = stk__malloc((size_t)(c + 1) * sizeof(*o)));
    for (uint64_t k = 0; ok && k <= c; k++) {
        o[k] = stk__ld64(body + 8 + 8 * k);
        ok = k == 0 ? o[0] == 0 : o[k] >= o[k - 1] && o[k] - o[k - 1] >= min_gap;
    }
    ok = ok && o[c] == f->size;
    stk__free(b);
    if (!ok) {
        stk__free(o);
        return false;
    }
    *off = o;
    *count = c;
    return true;
}

void stk__idx_offsets_store(stk__file *f, const char *name, const uint64_t *off, uint64_t count)
{
    uint64_t id[3];
    size_t n;
    if (is_local(f) || !f->vfs->aux_put || count == 0 || count > IDX_MAX / 8 ||
        !stk__idx_identity(f, id))
        return;
    uint8_t *b = stk__idx_new(OFFSETS_MAGIC, id, (size_t)(count + 2) * 8, &n);
    if (!b)
        return;
    stk__st64(b + STK__IDX_HEAD, count);
    for (uint64_t k = 0; k <= count; k++)
        stk__st64(b + STK__IDX_HEAD + 8 + 8 * k, off[k]);
    stk__idx_store(f, name, false, b, n);
    stk__free(b);
}

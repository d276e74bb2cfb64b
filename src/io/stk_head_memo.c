/*
 * stk_head_memo.c: the answers of remote HEAD requests (size, and the ETag or Last-Modified),
 * kept by path for the length of one dataset open (stk__head_memo in stk_vfs.h; the open puts
 * one in the thread's stk__vfs_opts and clears it when it returns). The HTTP transport asks here
 * before a HEAD and notes each answer; an S3 listing notes what it says of each object. So a URL
 * asked about several times during an open (the path expansion's existence check, the directory
 * check, the format probe, the open) costs one request, and a listed object none. A hash table
 * by path, open addressing, at most half full. Moved out of stk_vfs_http.c.
 */
#include "io/stk_http_int.h"

#include <xxhash.h>

#include <stdio.h>
#include <string.h>

static uint64_t path_hash(const char *s)
{
    return XXH3_64bits(s, strlen(s));
}

static stk__head_seen *memo_slot(const stk__head_memo *m, const char *path, uint64_t h)
{
    size_t i = (size_t)h & (m->cap - 1);
    while (m->v[i].path && (m->v[i].hash != h || strcmp(m->v[i].path, path) != 0))
        i = (i + 1) & (m->cap - 1);
    return &m->v[i];
}

/* Remember a HEAD's answer (best effort: out of memory only means asking again). */
static void memo_put(stk__head_memo *m, const char *path, uint64_t size, const char *validator)
{
    if (2 * (m->n + 1) > m->cap) { /* grow to keep the table at most half full */
        size_t cap = m->cap ? 2 * m->cap : 64;
        stk__head_seen *v = stk__calloc(cap, sizeof(*v));
        if (!v)
            return;
        stk__head_memo g = {v, 0, cap};
        for (size_t i = 0; i < m->cap; i++)
            if (m->v[i].path) {
                *memo_slot(&g, m->v[i].path, m->v[i].hash) = m->v[i];
                g.n++;
            }
        stk__free(m->v);
        *m = g;
    }
    uint64_t h = path_hash(path);
    stk__head_seen *e = memo_slot(m, path, h);
    if (e->path)
        return;
    char *p = stk__strdup(path), *val = stk__strdup(validator);
    if (!p || !val) {
        stk__free(p);
        stk__free(val);
        return;
    }
    *e = (stk__head_seen){p, val, h, size};
    m->n++;
}

/* The calling thread's memo: set during a dataset open (stk_dataset_open_v2), else NULL. */
static stk__head_memo *current(void)
{
    const stk__vfs_opts *o = stk__vfs_opts_current();
    return o ? o->heads : NULL;
}

bool stk__head_memo_get(const char *path, uint64_t *size, char *validator, size_t vsize)
{
    stk__head_memo *m = current();
    if (!m || !m->cap)
        return false;
    const stk__head_seen *e = memo_slot(m, path, path_hash(path));
    if (!e->path)
        return false;
    *size = e->size;
    if (validator)
        snprintf(validator, vsize, "%s", e->validator);
    return true;
}

void stk__head_memo_note(const char *path, uint64_t size, const char *validator)
{
    stk__head_memo *m = current();
    if (m && validator)
        memo_put(m, path, size, validator);
}

void stk__head_memo_clear(stk__head_memo *m)
{
    for (size_t i = 0; i < m->cap; i++) {
        stk__free(m->v[i].path);
        stk__free(m->v[i].validator);
    }
    stk__free(m->v);
    memset(m, 0, sizeof(*m));
}

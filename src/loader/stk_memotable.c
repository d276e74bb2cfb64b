/*
 * stk_memotable.c: the memo blobs (video frame indexes) of the parts of a local shard (its tar
 * members, its .stk records' fields), kept as one table beside the shard, `<shard>.<name>`
 * (video: `x.tar.stkvidx`), so that a new loader of the shard finds every part's blob in one
 * small read instead of deriving each again (a demux pass over each video).
 *
 * The file: the envelope of stk_idxfile.h (magic TAB_MAGIC, the shard's size, mtime and inode,
 * the body, an XXH3 checksum of all before it), body = the memo's own magic (8 bytes), a count,
 * then per part its offset and length in the shard, its blob's length and the blob (padded to 8
 * bytes). A file whose envelope or layout does not check is ignored as a whole, never trusted in
 * part, and replaced by the next write. Where the shard's directory takes no file (read-only, or
 * the name is taken), the same table goes to the cache directory (cache_dir=, STOKER_CACHE_DIR)
 * as the entry `name` under the key "local:<shard path>" (stk__idx_store_local); with neither,
 * the blobs stay in the loader's memo, counted as unsaved.
 *
 * When: the table of a shard is read on the first lookup of one of its parts. A blob derived by
 * the loader is added to its shard's table, which is written (merged with what the file holds by
 * then, so loaders sharing a shard add to each other's tables) when its new blobs are as many as
 * those it last wrote or read, and at destroy: a shard of n videos is written about log2(n) + 1
 * times, O(n) bytes in all. A process killed between two writes loses the blobs since the last
 * (derived again by the next loader). Writes are atomic (temporary file + rename): loaders
 * writing one shard's table at once each leave a whole, valid file.
 *
 * Threads: every call is serialised by the table's lock (a write holds it: a few KiB per write).
 */
#include "loader/stk_loader_int.h"
#include "common/stk_endian.h"
#include "source/stk_idxfile.h"

#include <pthread.h>
#include <string.h>

#include <xxhash.h>

#define TAB_MAGIC "STKPTAB1"
#define TAB_PARTS_MAX ((uint64_t)1 << 32)

typedef struct {
    uint64_t off, len;
    uint8_t *blob;
    size_t n;
} part;

typedef struct {
    char *path;
    uint64_t id[3]; /* the shard's identity (stk__idx_identity) */
    uint64_t key;   /* XXH3 of path and id: the cheap comparison */
    bool loaded;    /* its file was looked for */
    bool nowhere;   /* a write found no place (no writable directory, no cache directory) */
    part *parts;
    uint32_t n, cap;
    uint32_t *slot; /* open addressing over (off, len): part index + 1, 0 empty */
    uint32_t n_slots;
    uint32_t saved; /* parts the file held when last read or written */
    uint32_t fresh; /* parts added or replaced by this loader since */
} shard;

struct stk__memotab {
    pthread_mutex_t lock;
    char *name;
    char magic[8]; /* the memo blobs' layout */
    shard *shards;
    uint32_t n, cap;
};

stk__memotab *stk__memotab_create(const char *name, const char magic[8])
{
    stk__memotab *t = stk__calloc(1, sizeof(*t));
    if (!t || !(t->name = stk__strdup(name))) {
        stk__free(t);
        return NULL;
    }
    memcpy(t->magic, magic, 8);
    pthread_mutex_init(&t->lock, NULL);
    return t;
}

static uint32_t part_hash(uint64_t off, uint64_t len)
{
    uint64_t k[2] = {off, len};
    return (uint32_t)XXH3_64bits(k, sizeof(k));
}

static part *find(const shard *s, uint64_t off, uint64_t len)
{
    if (!s->n_slots)
        return NULL;
    for (uint32_t h = part_hash(off, len) & (s->n_slots - 1);; h = (h + 1) & (s->n_slots - 1)) {
        uint32_t v = s->slot[h];
        if (!v)
            return NULL;
        part *p = &s->parts[v - 1];
        if (p->off == off && p->len == len)
            return p;
    }
}

static void place(shard *s, uint32_t i)
{
    uint32_t h = part_hash(s->parts[i].off, s->parts[i].len) & (s->n_slots - 1);
    while (s->slot[h])
        h = (h + 1) & (s->n_slots - 1);
    s->slot[h] = i + 1;
}

/* Add a copy of blob as part (off, len) of s; a part s has already is replaced when `replace`
 * (a blob derived again: the one kept did not describe its video), else kept. false: out of
 * memory. */
static bool add(shard *s, uint64_t off, uint64_t len, const void *blob, size_t n, bool replace)
{
    part *had = find(s, off, len);
    if (had && (!replace || (had->n == n && memcmp(had->blob, blob, n) == 0)))
        return true;
    if (had) {
        uint8_t *b = stk__malloc(n ? n : 1);
        if (!b)
            return false;
        memcpy(b, blob, n);
        stk__free(had->blob);
        had->blob = b;
        had->n = n;
        s->fresh++;
        return true;
    }
    if (s->n == s->cap) {
        uint32_t cap = s->cap ? s->cap * 2 : 16;
        part *np = stk__realloc(s->parts, (size_t)cap * sizeof(*np));
        if (!np)
            return false;
        s->parts = np;
        s->cap = cap;
    }
    if ((uint64_t)(s->n + 1) * 2 > s->n_slots) { /* keep the slots at most half full */
        uint32_t ns = s->n_slots ? s->n_slots * 2 : 32;
        uint32_t *sl = stk__calloc(ns, sizeof(*sl));
        if (!sl)
            return false;
        stk__free(s->slot);
        s->slot = sl;
        s->n_slots = ns;
        for (uint32_t i = 0; i < s->n; i++)
            place(s, i);
    }
    part *p = &s->parts[s->n];
    if (!(p->blob = stk__malloc(n ? n : 1)))
        return false;
    memcpy(p->blob, blob, n);
    p->off = off;
    p->len = len;
    p->n = n;
    place(s, s->n++);
    s->fresh += replace;
    return true;
}

/* The parts the shard's table file holds, added to s (those s lacks); the count the file held,
 * or 0 (none, stale, damaged: ignored whole). */
static uint32_t read_file(stk__memotab *t, shard *s)
{
    size_t n = 0;
    uint8_t *b = stk__idx_load_local(s->path, t->name, TAB_MAGIC, s->id, &n);
    if (!b)
        return 0;
    const uint8_t *p = b + STK__IDX_HEAD, *end = b + n - STK__IDX_TAIL;
    uint64_t count = (size_t)(end - p) >= 16 ? stk__ld64(p + 8) : 0;
    bool ok = (size_t)(end - p) >= 16 && memcmp(p, t->magic, 8) == 0 && count < TAB_PARTS_MAX;
    const uint8_t *q = p + 16;
    for (uint64_t k = 0; ok && k < count; k++) { /* check the whole layout before using any */
        uint64_t len = (size_t)(end - q) >= 24 ? stk__ld64(q + 16) : UINT64_MAX;
        ok = len <= (size_t)(end - q) - 24 && (len + 7) / 8 * 8 <= (size_t)(end - q) - 24;
        q = ok ? q + 24 + (len + 7) / 8 * 8 : q;
    }
    ok = ok && q == end;
    q = p + 16;
    for (uint64_t k = 0; ok && k < count; k++) {
        uint64_t len = stk__ld64(q + 16);
        ok = add(s, stk__ld64(q), stk__ld64(q + 8), q + 24, (size_t)len, false);
        q += 24 + (len + 7) / 8 * 8;
    }
    stk__free(b);
    return ok ? (uint32_t)count : 0;
}

/* Write s's table (merged with the file's parts first); false when it went nowhere. Out of
 * memory counts as written (the blobs stay in the memo; the next write tries again). */
static bool write_file(stk__memotab *t, shard *s)
{
    read_file(t, s); /* what another loader added since */
    size_t body = 16;
    for (uint32_t i = 0; i < s->n; i++)
        body += 24 + (s->parts[i].n + 7) / 8 * 8;
    size_t n;
    uint8_t *b = stk__idx_new(TAB_MAGIC, s->id, body, &n);
    if (!b)
        return true;
    uint8_t *q = b + STK__IDX_HEAD;
    memcpy(q, t->magic, 8);
    stk__st64(q + 8, s->n);
    q += 16;
    for (uint32_t i = 0; i < s->n; i++) {
        const part *p = &s->parts[i];
        stk__st64(q, p->off);
        stk__st64(q + 8, p->len);
        stk__st64(q + 16, p->n);
        memcpy(q + 24, p->blob, p->n); /* the padding is the calloc's zeros */
        q += 24 + (p->n + 7) / 8 * 8;
    }
    bool stored = stk__idx_store_local(s->path, t->name, b, n) != STK__IDX_NOWHERE;
    stk__free(b);
    if (stored) {
        s->saved = s->n;
        s->fresh = 0;
    }
    return stored;
}

/* src's shard entry (created, its file read, on first use); NULL when out of memory. */
static shard *shard_of(stk__memotab *t, const stk__file *src)
{
    uint64_t id[3];
    stk__idx_identity(src, id);
    uint64_t key = XXH3_64bits_withSeed(id, sizeof(id), XXH3_64bits(src->path, strlen(src->path)));
    for (uint32_t i = 0; i < t->n; i++) {
        shard *s = &t->shards[i];
        if (s->key == key && memcmp(s->id, id, sizeof(id)) == 0 && strcmp(s->path, src->path) == 0)
            return s;
    }
    if (t->n == t->cap) {
        uint32_t cap = t->cap ? t->cap * 2 : 8;
        shard *ns = stk__realloc(t->shards, (size_t)cap * sizeof(*ns));
        if (!ns)
            return NULL;
        t->shards = ns;
        t->cap = cap;
    }
    shard *s = &t->shards[t->n];
    memset(s, 0, sizeof(*s));
    if (!(s->path = stk__strdup(src->path)))
        return NULL;
    memcpy(s->id, id, sizeof(id));
    s->key = key;
    t->n++;
    return s;
}

/* shard_of, its file read on its first use. */
static shard *shard_read(stk__memotab *t, const stk__file *src)
{
    shard *s = shard_of(t, src);
    if (s && !s->loaded) {
        s->loaded = true;
        s->saved = read_file(t, s);
    }
    return s;
}

bool stk__memotab_get(stk__memotab *t, const stk__file *src, uint64_t off, uint64_t len,
                      stk__memo *memo, uint64_t rec)
{
    bool got = false;
    pthread_mutex_lock(&t->lock);
    shard *s = shard_read(t, src);
    const part *p = s ? find(s, off, len) : NULL;
    if (p)
        got = stk__memo_set(memo, rec, p->blob, p->n);
    pthread_mutex_unlock(&t->lock);
    return got;
}

uint64_t stk__memotab_put(stk__memotab *t, const stk__file *src, uint64_t off, uint64_t len,
                          const void *blob, size_t n)
{
    uint64_t unsaved = 0;
    pthread_mutex_lock(&t->lock);
    shard *s = shard_read(t, src);
    if (!s || !add(s, off, len, blob, n, true)) {
        unsaved = 1; /* out of memory: in the memo only */
    } else if (s->nowhere) {
        unsaved = 1;
    } else if (s->fresh >= STK_MAX(s->saved, 1u)) {
        uint32_t fresh = s->fresh;
        if (!write_file(t, s)) {
            s->nowhere = true; /* every blob not written yet stays in memory only */
            unsaved = fresh;
        }
    }
    pthread_mutex_unlock(&t->lock);
    return unsaved;
}

void stk__memotab_destroy(stk__memotab *t)
{
    if (!t)
        return;
    for (uint32_t i = 0; i < t->n; i++) {
        shard *s = &t->shards[i];
        if (!s->nowhere && s->fresh)
            write_file(t, s);
        for (uint32_t k = 0; k < s->n; k++)
            stk__free(s->parts[k].blob);
        stk__free(s->parts);
        stk__free(s->slot);
        stk__free(s->path);
    }
    stk__free(t->shards);
    stk__free(t->name);
    pthread_mutex_destroy(&t->lock);
    stk__free(t);
}

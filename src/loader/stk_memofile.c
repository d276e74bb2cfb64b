/*
 * stk_memofile.c: a loader's per-record memo (stk_memo.c: each video's frame index) kept on disk,
 * so that a new loader, in this process or another, finds a record's blob instead of deriving it
 * again (a video's index: one demux pass over the whole file).
 *
 * Where: the blob of a record whose transformed field is a whole file read in place (a
 * class-per-folder tree's video) lies beside that file as `<file>.<name>` (video: `.stkvidx`) in
 * the envelope of stk_idxfile.h: checked against the file's identity as the read opened it (size,
 * mtime, inode: a rewritten or replaced file is derived again and its index rewritten) and a
 * checksum (a damaged or truncated index file is ignored, never trusted, and rewritten). A field
 * that is part of a local source's file (a tar member, a .stk record's field: lent by the source,
 * stk__vfs_origin) is an entry of its shard's table, beside the shard as `<shard>.<name>`
 * (stk_memotable.c), keyed by its place in the shard and checked against the shard's identity.
 * Precedence, for both: beside the data first (it travels with the data and serves every user
 * and machine reading it); where the data's directory takes no file (read-only, the name taken)
 * and a cache directory is set, the cache directory holds the same file; with neither, the blob
 * stays in the loader's memo (counted in stats' `index_unsaved`). A remote object's blob goes to
 * the remote cache (none without one), a remote shard's part's as an entry of its own
 * (stk__idx_part_store).
 *
 * Trust: what the file holds passed its identity and checksum; the transform still checks the
 * blob (a packed index that does not unpack is derived again) and the decoder checks it against
 * the video (a frame not where the index says: indexed again, stk_video.c), so a wrong file costs
 * time, never a wrong clip.
 *
 * Threads: called by the workers, for the record each is reading, under the record's memo claim
 * (stk__memo_claim: one thread of a loader derives and stores a record's blob while the others
 * wanting it wait); an index file is written atomically (temporary file + rename, as the cache's
 * entries are), so processes racing on one file each write a whole, valid one.
 *
 * Counted (stats): a blob derived by this loader counts in `indexed`, one read from disk in
 * `index_loaded`, a local one derived that found no place on disk in `index_unsaved`.
 */
#include "loader/stk_loader_int.h"
#include "source/stk_idxfile.h"

/* Where record field range r of f is kept on disk. */
typedef enum {
    NOT_KEPT, /* no memo file, an empty field, bytes in memory of no known origin */
    WHOLE,    /* a whole local or remote file: its own index, beside it (stk_idxfile.c) */
    TABLE,    /* a part of a local source's file (a tar member, a .stk record's field: f lent by
                 the source): an entry of the shard's table, beside it (stk_memotable.c) */
    PART,     /* a part of a remote source's file: a remote cache entry of its own */
} kept_where;

/* Where r of f is kept, and for a part its source file *src and the offset *off there. */
static kept_where kept_on_disk(const core *c, stk__file *f, stk__brange r, stk__file **src,
                               uint64_t *off)
{
    if (!c->memo || !c->memo_file || r.len == 0)
        return NOT_KEPT;
    if (!stk__vfs_lent(f))
        return r.off == 0 && r.len == f->size ? WHOLE : NOT_KEPT;
    uint64_t at;
    if (!stk__vfs_origin(f, src, &at))
        return NOT_KEPT;
    *off = at + r.off;
    return (*src)->vfs == &stk__vfs_posix && c->memo_tab ? TABLE : PART;
}

const uint8_t *stk__memofile_load(core *c, uint64_t rec, stk__file *f, stk__brange r)
{
    size_t size = 0;
    const uint8_t *held = stk__memo_get(c->memo, rec, &size);
    stk__file *src;
    uint64_t off;
    kept_where where = held ? NOT_KEPT : kept_on_disk(c, f, r, &src, &off);
    if (where == TABLE) {
        stk__memotab_get(c->memo_tab, src, off, r.len, c->memo, rec);
    } else if (where == PART) {
        const uint8_t *body;
        size_t len;
        uint8_t *b = stk__idx_part_load(src, c->memo_file, c->memo_magic, off, r.len, &body, &len);
        if (b && len)
            stk__memo_set(c->memo, rec, body, len);
        stk__free(b);
    } else if (where == WHOLE) {
        uint64_t id[3];
        size_t n = 0;
        uint8_t *b = stk__idx_identity(f, id)
                         ? stk__idx_load(f, c->memo_file, true, c->memo_magic, id, &n)
                         : NULL;
        if (b && n > STK__IDX_HEAD + STK__IDX_TAIL)
            stk__memo_set(c->memo, rec, b + STK__IDX_HEAD, n - STK__IDX_HEAD - STK__IDX_TAIL);
        stk__free(b);
    }
    const uint8_t *got = held ? held : stk__memo_get(c->memo, rec, &size);
    if (!held && got)
        atomic_fetch_add_explicit(&c->st_index_loaded, 1, memory_order_relaxed);
    return got;
}

void stk__memofile_store(core *c, uint64_t rec, stk__file *f, stk__brange r, const uint8_t *before)
{
    size_t size = 0;
    const uint8_t *now = stk__memo_get(c->memo, rec, &size);
    stk__file *src;
    uint64_t off;
    if (!now || now == before)
        return; /* nothing new: derived by no one, or the one loaded (or already stored) */
    atomic_fetch_add_explicit(&c->st_indexed, 1, memory_order_relaxed);
    uint64_t unsaved = 0;
    switch (kept_on_disk(c, f, r, &src, &off)) {
    case NOT_KEPT:
        break;
    case TABLE:
        unsaved = stk__memotab_put(c->memo_tab, src, off, r.len, now, size);
        break;
    case PART:
        stk__idx_part_store(src, c->memo_file, c->memo_magic, off, r.len, now, size);
        break;
    case WHOLE: {
        uint64_t id[3];
        size_t n = 0;
        uint8_t *b = stk__idx_identity(f, id) ? stk__idx_new(c->memo_magic, id, size, &n) : NULL;
        if (b) {
            memcpy(b + STK__IDX_HEAD, now, size);
            unsaved = !stk__idx_store(f, c->memo_file, true, b, n);
        } else {
            unsaved = 1; /* out of memory: kept in memory only */
        }
        stk__free(b);
        break;
    }
    }
    if (unsaved)
        atomic_fetch_add_explicit(&c->st_index_unsaved, unsaved, memory_order_relaxed);
}

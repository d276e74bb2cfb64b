/*
 * stk_memofile.c: a loader's per-record memo (stk_memo.c: each video's frame index) kept on disk,
 * so that a new loader, in this process or another, finds a record's blob instead of deriving it
 * again (a video's index: one demux pass over the whole file).
 *
 * Where: the blob of a record whose transformed field is a whole file read in place (a
 * class-per-folder tree's video) lies beside that file as `<file>.<name>` (video: `.stkvidx`) in
 * the envelope of stk_idxfile.h: checked against the file's identity as the read opened it (size,
 * mtime, inode: a rewritten or replaced file is derived again and its index rewritten) and a
 * checksum (a damaged or truncated index file is ignored, never trusted, and rewritten). Where the
 * directory takes no file (read-only) and a cache directory is set, the cache directory holds it;
 * a remote object's goes to the remote cache (none without one). A field that is part of a
 * source's file (a tar member, a .stk record's field: lent by the source, stk__vfs_origin) is
 * kept as an entry of the cache directory (a remote shard's: of the remote cache) under the
 * shard's key, named by its place in the shard, checked against the shard's identity and its
 * place (stk__idx_part_load); none without a cache directory.
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
 * Counted: a blob derived by this loader (not loaded) counts in stats' `indexed`.
 */
#include "loader/stk_loader_int.h"
#include "source/stk_idxfile.h"

/* Where record field range r of f is kept on disk: a whole file beside itself (true, *part
 * false); a part of a source's file (a tar member, a .stk record's field: f lent by the source)
 * under that file's identity and the part's offset and length (true, *part, *src, *off). false:
 * not kept (no memo file, an empty field, bytes in memory of no known origin). */
static bool kept_on_disk(const core *c, stk__file *f, stk__brange r, bool *part, stk__file **src,
                         uint64_t *off)
{
    *part = false;
    if (!c->memo || !c->memo_file || r.len == 0)
        return false;
    if (!stk__vfs_lent(f))
        return r.off == 0 && r.len == f->size;
    uint64_t at;
    if (!stk__vfs_origin(f, src, &at))
        return false;
    *part = true;
    *off = at + r.off;
    return true;
}

const uint8_t *stk__memofile_load(core *c, uint64_t rec, stk__file *f, stk__brange r)
{
    size_t size = 0;
    const uint8_t *held = stk__memo_get(c->memo, rec, &size);
    bool part;
    stk__file *src;
    uint64_t off;
    if (held || !kept_on_disk(c, f, r, &part, &src, &off))
        return held;
    if (part) {
        const uint8_t *body;
        size_t len;
        uint8_t *b = stk__idx_part_load(src, c->memo_file, c->memo_magic, off, r.len, &body, &len);
        if (b && len)
            stk__memo_set(c->memo, rec, body, len);
        stk__free(b);
        return stk__memo_get(c->memo, rec, &size);
    }
    uint64_t id[3];
    size_t n = 0;
    uint8_t *b = stk__idx_identity(f, id)
                     ? stk__idx_load(f, c->memo_file, true, c->memo_magic, id, &n)
                     : NULL;
    if (b && n > STK__IDX_HEAD + STK__IDX_TAIL)
        stk__memo_set(c->memo, rec, b + STK__IDX_HEAD, n - STK__IDX_HEAD - STK__IDX_TAIL);
    stk__free(b);
    return stk__memo_get(c->memo, rec, &size);
}

void stk__memofile_store(core *c, uint64_t rec, stk__file *f, stk__brange r, const uint8_t *before)
{
    size_t size = 0;
    const uint8_t *now = stk__memo_get(c->memo, rec, &size);
    bool part;
    stk__file *src;
    uint64_t off;
    if (!now || now == before)
        return; /* nothing new: derived by no one, or the one loaded (or already stored) */
    atomic_fetch_add_explicit(&c->st_indexed, 1, memory_order_relaxed);
    if (!kept_on_disk(c, f, r, &part, &src, &off))
        return;
    if (part) {
        stk__idx_part_store(src, c->memo_file, c->memo_magic, off, r.len, now, size);
        return;
    }
    uint64_t id[3];
    size_t n = 0;
    uint8_t *b = stk__idx_identity(f, id) ? stk__idx_new(c->memo_magic, id, size, &n) : NULL;
    if (!b)
        return; /* out of memory: kept in memory only */
    memcpy(b + STK__IDX_HEAD, now, size);
    stk__idx_store(f, c->memo_file, true, b, n);
    stk__free(b);
}

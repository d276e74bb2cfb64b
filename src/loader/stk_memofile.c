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
 * a remote object's goes to the remote cache (none without one). A field that is part of a file
 * (a tar member, a .stk record) is not kept on disk: one index file per member would not do.
 *
 * Trust: what the file holds passed its identity and checksum; the transform still checks the
 * blob (a packed index that does not unpack is derived again) and the decoder checks it against
 * the video (a frame not where the index says: indexed again, stk_video.c), so a wrong file costs
 * time, never a wrong clip.
 *
 * Threads: called by the workers, for the record each is reading; the memo is lock-free and an
 * index file is written atomically (temporary file + rename), so workers and processes racing on
 * one file each write a whole, valid one.
 */
#include "loader/stk_loader_int.h"
#include "source/stk_idxfile.h"

/* Whether record field range r of f is kept on disk: a whole file, and a transform that keeps
 * its memo there. */
static bool kept_on_disk(const core *c, const stk__file *f, stk__brange r)
{
    return c->memo && c->memo_file && r.off == 0 && r.len == f->size && r.len > 0 &&
           !stk__vfs_lent(f); /* a tar member or .stk record lent whole: part of a file */
}

const uint8_t *stk__memofile_load(core *c, uint64_t rec, stk__file *f, stk__brange r)
{
    size_t size = 0;
    const uint8_t *held = stk__memo_get(c->memo, rec, &size);
    if (held || !kept_on_disk(c, f, r))
        return held;
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
    if (!now || now == before || !kept_on_disk(c, f, r))
        return; /* nothing new: derived by no one, or the one loaded (or already stored) */
    uint64_t id[3];
    size_t n = 0;
    uint8_t *b = stk__idx_identity(f, id) ? stk__idx_new(c->memo_magic, id, size, &n) : NULL;
    if (!b)
        return; /* out of memory: kept in memory only */
    memcpy(b + STK__IDX_HEAD, now, size);
    stk__idx_store(f, c->memo_file, true, b, n);
    stk__free(b);
}

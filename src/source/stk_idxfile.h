/*
 * stk_idxfile.h: the envelope of the indexes the file formats keep so that the next open skips
 * a scan (stk_idxfile.c): a tar shard's member list (stk_tar_index.c), a remote TFRecord file's
 * frame offsets. One layout, wherever the bytes go: 8 bytes of magic, the identity of the data
 * it indexes (3 x u64), the format's body, and the XXH3-64 of everything before it (8 bytes), all
 * little-endian. A local file's index lies beside it (`<file>.<name>`, written atomically, best
 * effort), or where its directory takes none (read-only) and a cache directory is set
 * (STOKER_CACHE_DIR, cache_dir=), in that cache as an aux entry keyed "local:<path>"; a remote
 * object's is an aux entry `name` of the byte source (the block cache, keyed by URL, ETag or
 * Last-Modified and size; none without a cache). An index whose magic, identity or
 * checksum does not match is ignored: the caller scans again and stores a fresh one.
 */
#ifndef STK_IDXFILE_H
#define STK_IDXFILE_H

#include "io/stk_vfs.h"

#define STK__IDX_HEAD 32 /* magic + identity; the body follows */
#define STK__IDX_TAIL 8  /* the checksum */

/* The identity an index of f is checked against: a local file's size, mtime (ns) and inode as
 * its open pinned them (stk__file); a remote object's size and a hash of its path (the cache
 * entry's key holds its version). true (kept a bool for the callers' sake). */
bool stk__idx_identity(const stk__file *f, uint64_t id[3]);

/* A fresh, zeroed index of body_len body bytes (*n in all) with magic and id filled in; the body
 * is at STK__IDX_HEAD. NULL when out of memory. */
uint8_t *stk__idx_new(const char magic[8], const uint64_t id[3], size_t body_len, size_t *n);

/* f's index `name` ("stkidx"): beside a local file when `beside` (else local files have none;
 * the cache directory's entry when none beside it checks), or the remote object's aux entry.
 * Returned (stk__free it; *n bytes, the body at STK__IDX_HEAD, n - STK__IDX_HEAD - STK__IDX_TAIL
 * bytes long) only when its magic, identity and checksum match; NULL otherwise (none, stale,
 * corrupt, out of memory). */
uint8_t *stk__idx_load(stk__file *f, const char *name, bool beside, const char magic[8],
                       const uint64_t id[3], size_t *n);

/* Seal b (n bytes from stk__idx_new, body filled: its checksum) and store it where stk__idx_load
 * looks (a local file's in the cache directory when writing beside it fails). Best effort: a
 * read-only directory without a cache directory, or no cache, only means the next open scans.
 * true: stored (beside, in the cache directory, or handed to the remote cache). */
bool stk__idx_store(stk__file *f, const char *name, bool beside, uint8_t *b, size_t n);

/* The same for the local file at `path` (it need not be open): beside it as `<path>.<name>`
 * first, else the cache directory's entry. Load checks magic, identity and checksum as
 * stk__idx_load; store says where the index went. */
typedef enum { STK__IDX_NOWHERE, STK__IDX_BESIDE, STK__IDX_CACHE } stk__idx_where;
uint8_t *stk__idx_load_local(const char *path, const char *name, const char magic[8],
                             const uint64_t id[3], size_t *n);
stk__idx_where stk__idx_store_local(const char *path, const char *name, uint8_t *b, size_t n);

/* A part's index: of the `len` bytes at `off` of f (a tar member, a .stk record's field), or of
 * what they decode to (a gzipped member), kept as an entry of the cache directory under f's
 * "local:<path>" key (a local f; none without a cache directory) or as f's aux entry (a remote
 * f: the remote cache), never beside f. Its name is `name`'s first letter and a hash of (name,
 * off, len); its body starts with off and len, checked on load with the envelope against f's
 * identity (a shard rewritten since, or another part's entry, is ignored). Load: the body past
 * (off, len) at *body (*body_len bytes) inside the returned buffer (stk__free it), or NULL.
 * Store: best effort, as stk__idx_store. */
uint8_t *stk__idx_part_load(stk__file *f, const char *name, const char magic[8], uint64_t off,
                            uint64_t len, const uint8_t **body, size_t *body_len);
void stk__idx_part_store(stk__file *f, const char *name, const char magic[8], uint64_t off,
                         uint64_t len, const void *body, size_t body_len);

/* An index of record offsets (count + 1 of them, the last one f->size) as index `name` of f (only
 * for remote objects: local formats keep their own). Load checks, besides the envelope, that the
 * offsets start at 0, grow by at least min_gap and end at f->size: true with *off (stk__free
 * it) and *count >= 1. */
bool stk__idx_offsets_load(stk__file *f, const char *name, uint64_t min_gap, uint64_t **off,
                           uint64_t *count);
void stk__idx_offsets_store(stk__file *f, const char *name, const uint64_t *off, uint64_t count);

#endif /* STK_IDXFILE_H */

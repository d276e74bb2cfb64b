/*
 * stk_vfs_http.h: the remote byte sources (stk_vfs_http.c, stk_vfs_s3.c): `http://`, `https://`
 * (ranged GETs) and `s3://bucket/key` (the same, signed with SigV4, plus ListObjectsV2 for prefixes
 * and globs), and the on-disk block cache they share (stk_vfs_cache.c). Internal pieces are here
 * for the unit tests: the retry decision and the cache.
 */
#ifndef STK_VFS_HTTP_H
#define STK_VFS_HTTP_H

#include "io/stk_vfs.h"

extern const stk__vfs stk__vfs_http;
extern const stk__vfs stk__vfs_s3;

/* Whether a request that ended with curl code `curl_code` (0 = transfer done), HTTP status
 * `status` (0 = none) and `short_body` (fewer bytes than asked) is worth another attempt:
 * connection errors, timeouts, 408, 429, 5xx (503 SlowDown included) and short bodies are;
 * 4xx answers and a body longer than asked are not. */
bool stk__http_retryable(int curl_code, long status, bool short_body);

/* The wait before attempt `attempt` + 1 (attempt >= 1): "full jitter" exponential backoff,
 * `rnd` scaled into [cap/2, cap] where cap = min(base_ms << (attempt - 1), max_ms). */
uint64_t stk__http_backoff_ms(int attempt, uint64_t base_ms, uint64_t max_ms, uint64_t rnd);

/* ---- many requests in flight (stk_vfs_fetch.c); the decisions are pure, unit tested ---- */

/* Coalesce byte ranges into requests: r is sorted by offset in place (zero-length ranges are
 * dropped); consecutive ranges join one request when the gap between them is at most `gap` bytes
 * and the request stays at most `max` bytes long (a single range longer than max is a request of
 * its own: a record is never split; overlapping ranges always join, so requests are disjoint).
 * out[k] receives request k, useful[k] the bytes of ranges in it (overlaps counted once; the rest
 * is gap read for nothing). out and useful hold n entries. Returns the number of requests. */
size_t stk__ranges_coalesce(stk__brange *r, size_t n, uint64_t gap, uint64_t max, stk__brange *out,
                            uint64_t *useful);

/* Widen each range to whole blocks of `block` bytes, clamped to an object of `size` bytes (what
 * the block cache fetches for it). */
void stk__ranges_to_blocks(stk__brange *r, size_t n, uint64_t block, uint64_t size);

/* How many queued requests to start now: up to `limit` in flight (at least 1). */
size_t stk__fetch_to_start(size_t in_flight, size_t queued, size_t limit);

/* Whether a read-ahead of `len` bytes fits the memory budget with `held` bytes already held by
 * read-ahead (queued, in flight or unread) ranges. */
bool stk__readahead_admit(uint64_t held, uint64_t len, uint64_t budget);

/* ---- the shared on-disk cache (stk_vfs_cache.c) ---- */

#define STK_CACHE_BLOCK ((uint64_t)4 << 20) /* bytes per cache entry (the last one shorter) */

typedef struct stk__cache stk__cache;

/* Fetch `len` bytes at `off` of the remote object into buf (the cache's miss path). */
typedef stk_status (*stk__cache_fetch)(void *ctx, uint64_t off, void *buf, size_t len, char *err,
                                       size_t err_size);

/* The cache in `dir` (created if missing) holding at most `limit` bytes of entries. STK_EINVAL
 * when limit is below one block (STK_CACHE_BLOCK), STK_EIO when dir cannot be made. */
stk_status stk__cache_open(const char *dir, uint64_t limit, stk__cache **out, char *err,
                           size_t err_size);
void stk__cache_close(stk__cache *c);

/* STK_OK when `limit` holds at least one block, else STK_EINVAL saying so (naming dir, or
 * STOKER_CACHE_DIR when NULL). */
stk_status stk__cache_check_limit(const char *dir, uint64_t limit, char *err, size_t err_size);

/* The cache of the calling thread's settings (stk__vfs_opts_use), each unset one taken from
 * STOKER_CACHE_DIR / STOKER_CACHE_LIMIT (bytes, or with a K/M/G/T suffix; default 10G); one per
 * directory and limit in the process; *out NULL when no directory is set (or "" is). STK_EINVAL
 * for a limit that is not a size or is below one block, STK_EIO when the directory cannot be
 * made. */
stk_status stk__cache_from_env(stk__cache **out, char *err, size_t err_size);

/* Read pieces at `offset` of the object `key` (URL + ETag, size `size`) through the cache:
 * whole blocks fetched on a miss, written atomically (temp file + rename), evicted least recently
 * used within the limit. Thread-safe; several processes may share the directory. */
stk_status stk__cache_read(stk__cache *c, const char *key, uint64_t size, uint64_t offset,
                           const stk__iov *iov, int n_iov, stk__cache_fetch fetch, void *ctx,
                           char *err, size_t err_size);

/* Words of the `checked` bitmap of an object of `size` bytes: one bit per 4 KiB chunk. */
static inline size_t stk__cache_checked_words(uint64_t size)
{
    return (size_t)((size / 4096 + 64) / 64);
}

/* stk__cache_read that remembers the chunks it checked: `checked` (stk__cache_checked_words
 * zeroed words, the caller's, shared by its threads) gets a bit per 4 KiB chunk whose checksum a
 * hit verified; later hits of checked chunks read without checking again (as a .stk record is
 * checked on its first read), at the cost of a hit without checksums. NULL: every hit checks. */
stk_status stk__cache_read_checked(stk__cache *c, const char *key, uint64_t size, uint64_t offset,
                                   const stk__iov *iov, int n_iov, stk__cache_fetch fetch,
                                   void *ctx, _Atomic uint64_t *checked, char *err,
                                   size_t err_size);

/* Whether block `blk` of object `key` (size `size`) is in the cache, whole. */
bool stk__cache_has(stk__cache *c, const char *key, uint64_t size, uint64_t blk);

/* Insert block `blk` of object `key` (size `size`): STK_CACHE_BLOCK bytes at buf (fewer for the
 * last block), written atomically like a miss of stk__cache_read. false when it could not be
 * written (only speed is lost). */
bool stk__cache_put(stk__cache *c, const char *key, uint64_t size, uint64_t blk, const void *buf);

/* Aux entry `name` (1 to 16 of [a-z0-9], not starting with a digit: "stkidx") of object `key`:
 * a small file derived from the object (an index), kept beside its blocks. Get: its bytes in a
 * fresh buffer (*out, *n; stk__free it) and marked recently used; false when absent or
 * unreadable (the caller rebuilds it and validates what it gets). Put: written atomically (temp
 * file + rename), replacing the entry there, counted in the limit and evicted least recently
 * used like the blocks, but only once no block is left to evict; false when it could not be
 * written or exceeds the limit (only speed is lost). */
bool stk__cache_aux_get(stk__cache *c, const char *key, const char *name, uint8_t **out, size_t *n);
bool stk__cache_aux_put(stk__cache *c, const char *key, const char *name, const void *buf,
                        size_t n);

/* Bytes held by the cache's entries now (a directory scan; for tests and tools). */
uint64_t stk__cache_bytes(const char *dir);

#endif /* STK_VFS_HTTP_H */

/*
 * stk_http_int.h: what the HTTP transport (stk_vfs_http.c: curl handles, retries, one request,
 * remote files, the http:// table) and the S3 byte source (stk_vfs_s3.c: settings and
 * credentials, s3:// targets, ListObjectsV2, the s3:// table) share. Private to those two files
 * (and their unit tests).
 */
#ifndef STK_HTTP_INT_H
#define STK_HTTP_INT_H

#include "io/stk_vfs_http.h"

/* S3 settings of one open (stk_vfs_s3.c reads them from the environment). */
typedef struct stk__s3cfg {
    char region[64];
    char endpoint[1024]; /* "scheme://authority[/base]" without a trailing slash; "" = AWS */
    char akid[256], secret[256];
    char *token; /* NULL without a session token */
} stk__s3cfg;

static inline void stk__s3cfg_free(stk__s3cfg *c)
{
    stk__free(c->token);
    c->token = NULL;
}

/* What a path means: the URL to fetch, and for S3 what to sign. */
typedef struct stk__target {
    char *url;   /* without the query */
    char *host;  /* the Host header (S3) */
    char *cpath; /* the canonical URI (S3) */
    char *bucket, *key;
} stk__target;

void stk__target_free(stk__target *t);

/* An integer setting from the environment, `def` when unset or not a number, clamped. */
long stk__http_env_long(const char *name, long def, long lo, long hi);
/* Strip blanks (and CR/LF) from both ends, in place. */
void stk__http_trim(char *s);
/* A fresh stk__malloc'ed printf string (NULL on OOM). */
char *stk__http_fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));

/* Where a body goes: the caller's pieces (ranged reads) or a growing buffer (listings). */
typedef struct stk__http_sink {
    const stk__iov *iov;
    int n, i;
    size_t pos;    /* in iov[i] */
    uint64_t skip; /* bytes to drop first (a 200 answer to a ranged GET sends the whole object) */
    uint64_t range_a;
    size_t got, want;
    bool started, done, overflow;
    char *mem; /* listings */
    size_t mem_len, mem_cap;
} stk__http_sink;

#define STK_HTTP_ERRBODY 300 /* bytes of an error answer kept for the message */

typedef struct stk__http_resp {
    long status;
    char etag[256], last_modified[128];
    uint64_t length;
    bool has_length;
    char errbody[STK_HTTP_ERRBODY + 1];
    size_t errlen;
    stk__http_sink *s;
    void *c; /* the CURL handle running it */
} stk__http_resp;

/* A request: the URL to fetch, and for S3 what to sign. */
typedef struct stk__http_req {
    const char *method;    /* "HEAD" or "GET" */
    const char *url;       /* with the query string */
    const stk__s3cfg *cfg; /* NULL: plain HTTP */
    const char *host, *cpath, *query;
    bool ranged;
    uint64_t a, b; /* inclusive */
    /* The version a ranged GET must read (issue 30): the ETag (pin_etag) or Last-Modified the
     * open saw; NULL: any. Sent as If-Match (a strong ETag) or If-Unmodified-Since, and checked
     * against the answer's own validator (servers that ignore the condition). */
    const char *pin;
    bool pin_etag;
} stk__http_req;

struct curl_slist;

/* The CA bundle to verify TLS peers with: AWS_CA_BUNDLE (S3 requests only), else CURL_CA_BUNDLE,
 * else SSL_CERT_FILE; NULL (curl's default, the system's bundle) when none is set. */
const char *stk__http_ca_bundle(bool s3);
/* A directory of CA certificates (OpenSSL's hashed names, `openssl rehash DIR`) to verify TLS
 * peers with too: SSL_CERT_DIR; NULL when unset. */
const char *stk__http_ca_dir(void);

/* The answers of HEADs during the calling thread's dataset open (stk_head_memo.c; both are
 * no-ops outside an open). get: what a HEAD of `path` answered, or what a listing said of it
 * (false: not asked yet); note: keep an answer (a HEAD's, or a listing's size and ETag). */
bool stk__head_memo_get(const char *path, uint64_t *size, char *validator, size_t vsize);
void stk__head_memo_note(const char *path, uint64_t size, const char *validator);

/* Set up easy handle `handle` (a CURL *) to run q into r (headers, signing, timeouts, TLS);
 * *headers receives the header list to free once the transfer ended. STK_ENOMEM only. */
stk_status stk__http_setup(void *handle, const stk__http_req *q, stk__http_resp *r,
                           struct curl_slist **headers, char *curl_err);

/* Whether answer r is of another version of the object than q pins: 412 Precondition Failed,
 * or a 2xx answer whose validator differs from the pinned one. */
bool stk__http_changed(const stk__http_req *q, const stk__http_resp *r);

/* Run q with retries. `name` is what messages call the object (the URL as the user wrote it);
 * for ranged GETs r->s is the sink and a retry resumes after the bytes already received. A
 * pinned version that changed fails at once: STK_EIO "changed since it was opened". */
stk_status stk__http_request(stk__http_req *q, stk__http_resp *r, const char *name, char *err,
                             size_t err_size);

/* An open remote object (http://, https://, s3://). */
typedef struct stk__rfile {
    stk__file base;
    bool s3;
    stk__s3cfg cfg;
    stk__target t;
    char *cache_key; /* URL + validator */
    char *validator; /* the ETag or Last-Modified the open saw ("" when the server sent none) */
    bool validator_etag;
    stk__cache *cache;
    _Atomic uint64_t *checked; /* with the cache: the 4 KiB chunks whose checksums a hit of this
                                  open checked (stk__cache_read_checked); NULL: check every hit */
    /* read-ahead (stk_vfs_fetch.c; guarded by its lock) */
    int pf_refs;          /* read-ahead ranges in flight that still need the file */
    _Atomic bool pf_used; /* counted among the files the fetcher thread serves */
    uint8_t *cached;      /* with the cache, per block: 1 there, 2 being fetched (hints skip
                             both), 0 absent or unknown */
    bool closing;         /* closed while pf_refs > 0: the fetcher frees it */
} stk__rfile;

/* HEAD of f's target: its size and (validator non-NULL) its ETag or Last-Modified. */
stk_status stk__remote_head(stk__rfile *f, const char *path, uint64_t *size, char *validator,
                            size_t vsize, char *err, size_t err_size);

/* Open `path` served by `vfs`: a HEAD, then the cache. For S3 (cfg non-NULL) cfg and t are
 * taken over (moved into the file, freed on failure too); for HTTP both are NULL. */
stk_status stk__remote_open(const char *path, const stk__vfs *vfs, stk__s3cfg *cfg, stk__target *t,
                            stk__file **out, char *err, size_t err_size);
stk_status stk__remote_read(stk__file *file, uint64_t offset, const stk__iov *iov, int n_iov,
                            char *err, size_t err_size);
void stk__remote_close(stk__file *file);
/* The aux entries of remote files: in the block cache under the file's key (none without it). */
bool stk__remote_aux_get(stk__file *file, const char *name, uint8_t **out, size_t *n);
void stk__remote_aux_put(stk__file *file, const char *name, const void *buf, size_t n);

/* The ranged GET of bytes [offset, offset + len) of f (len > 0). */
stk__http_req stk__rfile_get(const stk__rfile *f, uint64_t offset, uint64_t len);

/* Free an open remote file now (its read-aheads are gone). */
void stk__rfile_free(stk__rfile *f);

/* ---- read-ahead (stk_vfs_fetch.c) ---- */

/* The VFS read-ahead of remote files: coalesce the ranges (STOKER_HTTP_COALESCE_GAP,
 * STOKER_HTTP_COALESCE_MAX; whole cache blocks with a cache) and queue them for the fetcher
 * thread, which keeps up to STOKER_HTTP_INFLIGHT requests in flight (curl multi) within
 * STOKER_HTTP_READAHEAD bytes of memory. */
void stk__remote_readahead(stk__file *file, stk__brange *r, size_t n);

/* Serve [off, off + len) into the pieces from a read-ahead range covering it (waiting while it
 * is in flight): STK__TAKE_HIT. STK__TAKE_CACHED: with the cache, the block was put in the cache
 * meanwhile (read it there). STK__TAKE_NONE: no read-ahead range holds it (none, failed,
 * dropped): read it directly. */
enum { STK__TAKE_NONE, STK__TAKE_HIT, STK__TAKE_CACHED };
int stk__readahead_take(stk__rfile *f, uint64_t off, const stk__iov *iov, int n_iov, size_t len);

/* The block at off was found in the cache after all (a STK__TAKE_CACHED read hit). */
void stk__readahead_cached(stk__rfile *f, uint64_t off);

/* Forget f's read-aheads at close. true when f may be freed now; false when requests in flight
 * still use it (the fetcher frees it when the last ends). */
bool stk__readahead_forget(stk__rfile *f);

#endif /* STK_HTTP_INT_H */

/*
 * stk_vfs_fetch.c: many requests in flight for the remote byte sources. The loader tells a
 * dataset which records a batch (and the batch after it) will read; their byte ranges (each
 * source's extent: .stk, TFRecord, WebDataset), gathered per file, come to the VFS read-ahead
 * (stk__vfs_readahead). Here the
 * ranges are coalesced (neighbours whose gap is at most STOKER_HTTP_COALESCE_GAP join one ranged
 * GET of at most STOKER_HTTP_COALESCE_MAX bytes; with the block cache, the missing 4 MiB blocks
 * they touch) and queued for one fetcher thread, which keeps up to STOKER_HTTP_INFLIGHT of them
 * in flight on a curl multi handle (keep-alive connections, reused easy handles). A worker's read
 * that falls inside a read-ahead range waits for it and copies its bytes; with the cache, the
 * fetched blocks go into the cache and the read finds them there.
 *
 * Exactness and retries: a read-ahead is an optimisation, never the only way to a byte. A
 * read-ahead request gets one attempt; if it fails (connection, status, short body) or was
 * dropped (over the STOKER_HTTP_READAHEAD memory budget), every read it would have served is made
 * on its own through stk__http_request, with the retries, backoff and error messages (URL,
 * record, last HTTP status) of a direct read. Bytes are handed out only from a transfer that
 * delivered exactly what was asked for, and the record checksum still checks them.
 *
 * Memory: read-ahead bytes held (queued, in flight, fetched and not yet read) stay within
 * STOKER_HTTP_READAHEAD (default 256M; 0 turns read-ahead off; STOKER_HTTP_PREFETCH before 0.3); a
 * range is freed once all its records were read, and the oldest fetched ranges are dropped when new
 * hints need the room.
 *
 * Locking: one mutex (g_mu) guards the queue, the entries and the files' read-ahead fields; the
 * fetcher thread drops it while curl runs. Readers wait on g_cv. The thread runs while some open
 * remote file has used read-ahead, and exits when the last such file closes.
 */
#include "io/stk_http_int.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- the decisions (pure) ---- */

static int by_offset(const void *a, const void *b)
{
    const stk__brange *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off ? 1 : x->len < y->len ? -1 : x->len > y->len;
}

size_t stk__ranges_coalesce(stk__brange *r, size_t n, uint64_t gap, uint64_t max, stk__brange *out,
                            uint64_t *useful)
{
    qsort(r, n, sizeof(*r), by_offset);
    size_t k = 0;
    uint64_t end = 0; /* end of the useful bytes so far in out[k - 1] */
    for (size_t i = 0; i < n; i++) {
        uint64_t a = r[i].off, b = r[i].off + r[i].len;
        if (r[i].len == 0)
            continue;
        /* overlapping ranges always join (no byte fetched twice); neighbours within max */
        if (k > 0 && (a < end || (a <= end + gap && STK_MAX(b, end) - out[k - 1].off <= max))) {
            useful[k - 1] += b > end ? b - STK_MAX(a, end) : 0;
            end = STK_MAX(b, end);
            out[k - 1].len = end - out[k - 1].off;
            continue;
        }
        out[k] = r[i];
        useful[k] = r[i].len;
        end = b;
        k++;
    }
    return k;
}

void stk__ranges_to_blocks(stk__brange *r, size_t n, uint64_t block, uint64_t size)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t a = r[i].off / block * block;
        uint64_t b = (r[i].off + r[i].len + block - 1) / block * block;
        b = STK_MIN(b, size);
        r[i].off = a;
        r[i].len = b > a ? b - a : 0;
    }
}

size_t stk__fetch_to_start(size_t in_flight, size_t queued, size_t limit)
{
    limit = STK_MAX(limit, 1);
    return in_flight >= limit ? 0 : STK_MIN(limit - in_flight, queued);
}

bool stk__readahead_admit(uint64_t held, uint64_t len, uint64_t budget)
{
    return len <= budget && held <= budget - len;
}

/* ---- entries ---- */

enum { PF_QUEUED, PF_RUNNING, PF_DONE, PF_FAILED };

typedef struct pf_entry {
    struct pf_entry *prev, *next; /* g_all, oldest first */
    struct pf_entry *qnext;       /* g_queue */
    stk__rfile *f;
    uint64_t off, len;
    stk__brange *want;   /* the hinted ranges inside it, sorted; taken ones get len 0 */
    size_t n_want, left; /* left: not taken yet (the entry goes when none is left) */
    uint8_t *buf;
    int state;
    int waiters;
    /* the transfer */
    CURL *c;
    struct curl_slist *h;
    stk__iov iov;
    stk__http_sink s;
    stk__http_resp r;
    char curl_err[CURL_ERROR_SIZE];
} pf_entry;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER; /* an entry finished */
static pf_entry *g_first, *g_last;                     /* every entry */
static pf_entry *g_qhead, *g_qtail;                    /* queued, in order */
static size_t g_queued, g_running;
static uint64_t g_held; /* bytes of every entry */
static int g_files;     /* open files that used read-ahead */
static bool g_thread;   /* the fetcher thread runs */
static CURLM *g_multi;  /* its multi handle (valid while g_thread) */

static void unlink_entry(pf_entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        g_first = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        g_last = e->prev;
    g_held -= e->len;
    stk__free(e->want);
    stk__free(e->buf);
    stk__free(e);
}

/* With the cache: note blocks [off, off + len) of f as absent (0), there (1) or being fetched
 * (2) (g_mu held). */
static void mark(stk__rfile *f, uint64_t off, uint64_t len, uint8_t v)
{
    for (uint64_t b = off / STK_CACHE_BLOCK; f->cached && b * STK_CACHE_BLOCK < off + len; b++)
        f->cached[b] = v;
}

/* Drop fetched or failed entries nobody waits for, oldest first, until `len` more bytes fit. */
static void make_room(uint64_t len, uint64_t budget)
{
    for (pf_entry *e = g_first, *nx; e && !stk__readahead_admit(g_held, len, budget); e = nx) {
        nx = e->next;
        if ((e->state == PF_DONE || e->state == PF_FAILED) && e->waiters == 0)
            unlink_entry(e);
    }
}

/* The index of the hinted range [off, off + len) in e->want not taken yet, or SIZE_MAX. */
static size_t wanted(const pf_entry *e, uint64_t off, uint64_t len)
{
    size_t lo = 0, hi = e->n_want;
    while (lo < hi) { /* the first range at or after off */
        size_t mid = lo + (hi - lo) / 2;
        if (e->want[mid].off < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (; lo < e->n_want && e->want[lo].off == off; lo++)
        if (e->want[lo].len == len)
            return lo;
    return SIZE_MAX;
}

/* The entry of f holding [off, off + len): the one it was hinted to (*slot its index in want),
 * else any whose bytes cover it (*slot SIZE_MAX); NULL when none. */
static pf_entry *covering(const stk__rfile *f, uint64_t off, uint64_t len, size_t *slot)
{
    pf_entry *any = NULL;
    for (pf_entry *e = g_first; e; e = e->next) {
        if (e->f != f || off < e->off || off + len > e->off + e->len)
            continue;
        if ((*slot = wanted(e, off, len)) != SIZE_MAX)
            return e;
        any = any ? any : e;
    }
    *slot = SIZE_MAX;
    return any;
}

/* ---- the fetcher thread ---- */

static void start(pf_entry *e, CURL **pool, size_t *n_pool)
{
    stk__rfile *f = e->f;
    e->buf = stk__malloc((size_t)e->len);
    CURL *c = *n_pool ? pool[--*n_pool] : curl_easy_init();
    if (c)
        curl_easy_reset(c);
    e->iov = (stk__iov){e->buf, (size_t)e->len};
    e->s = (stk__http_sink){.iov = &e->iov, .n = 1, .want = (size_t)e->len, .range_a = e->off};
    memset(&e->r, 0, sizeof(e->r));
    e->r.s = &e->s;
    stk__http_req q = stk__rfile_get(f, e->off, e->len);
    if (!e->buf || !c || stk__http_setup(c, &q, &e->r, &e->h, e->curl_err) < 0 ||
        (curl_easy_setopt(c, CURLOPT_PRIVATE, e), curl_multi_add_handle(g_multi, c)) != CURLM_OK) {
        if (c)
            curl_easy_cleanup(c);
        curl_slist_free_all(e->h);
        e->h = NULL;
        mark(f, e->off, e->len, 0);
        e->state = PF_FAILED;
        pthread_cond_broadcast(&g_cv);
        return;
    }
    e->c = c;
    e->state = PF_RUNNING;
    f->pf_refs++;
    g_running++;
}

/* With the cache: leave out of e the blocks at its ends that the cache holds already (noting
 * them in f->cached); true when nothing is left to fetch (g_mu held). */
static bool trim_cached(pf_entry *e)
{
    stk__rfile *f = e->f;
    uint64_t a = e->off / STK_CACHE_BLOCK, b = (e->off + e->len - 1) / STK_CACHE_BLOCK;
    while (a <= b && stk__cache_has(f->cache, f->cache_key, f->base.size, a))
        f->cached[a++] = 1;
    while (a <= b && stk__cache_has(f->cache, f->cache_key, f->base.size, b))
        f->cached[b--] = 1;
    uint64_t off = a * STK_CACHE_BLOCK, end = STK_MIN((b + 1) * STK_CACHE_BLOCK, f->base.size);
    uint64_t len = a <= b ? end - off : 0;
    g_held -= e->len - len;
    e->off = off;
    e->len = len;
    return len == 0;
}

/* A transfer ended with cc (g_mu not held). */
static void finish(pf_entry *e, CURLcode cc, CURL **pool, size_t *n_pool)
{
    long status = 0;
    curl_easy_getinfo(e->c, CURLINFO_RESPONSE_CODE, &status);
    curl_multi_remove_handle(g_multi, e->c);
    curl_easy_setopt(e->c, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(e->c, CURLOPT_ERRORBUFFER, NULL);
    curl_slist_free_all(e->h);
    e->h = NULL;
    if (cc == CURLE_WRITE_ERROR && e->s.done) /* a 200 answer: we stopped at our bytes */
        cc = CURLE_OK;
    stk__rfile *f = e->f;
    e->r.status = status;
    stk__http_req q = stk__rfile_get(f, e->off, e->len);
    /* another version's bytes are never handed out: the direct read says what changed */
    bool ok = cc == CURLE_OK && status >= 200 && status < 300 && !e->s.overflow &&
              e->s.got == e->s.want && !stk__http_changed(&q, &e->r);
    bool cached = false;
    if (ok && f->cache) { /* whole blocks: into the cache (f lives while pf_refs > 0) */
        cached = true;
        for (uint64_t b = e->off / STK_CACHE_BLOCK; b * STK_CACHE_BLOCK < e->off + e->len; b++)
            cached = stk__cache_put(f->cache, f->cache_key, f->base.size, b,
                                    e->buf + (b * STK_CACHE_BLOCK - e->off)) &&
                     cached;
    }
    pthread_mutex_lock(&g_mu);
    mark(f, e->off, e->len, cached ? 1 : 0);
    if (*n_pool < 64)
        pool[(*n_pool)++] = e->c;
    else
        curl_easy_cleanup(e->c);
    e->c = NULL;
    g_running--;
    e->state = ok ? PF_DONE : PF_FAILED;
    bool free_file = --f->pf_refs == 0 && f->closing;
    if (f->closing || (e->waiters == 0 && (!ok || cached)))
        unlink_entry(e); /* failed, in the cache already, or its file is gone */
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    if (free_file)
        stk__rfile_free(f);
}

static void *fetcher_main(void *arg)
{
    (void)arg;
    CURL *pool[64];
    size_t n_pool = 0;
    pthread_setname_np(pthread_self(), "stk-fetch");
    pthread_mutex_lock(&g_mu);
    for (;;) {
        size_t limit = (size_t)stk__http_env_long("STOKER_HTTP_INFLIGHT", 16, 1, 256);
        for (size_t k = stk__fetch_to_start(g_running, g_queued, limit); k > 0 && g_qhead; k--) {
            pf_entry *e = g_qhead;
            g_qhead = e->qnext;
            if (!g_qhead)
                g_qtail = NULL;
            g_queued--;
            if (e->f->cache && trim_cached(e)) { /* a warm cache: reads find the blocks there */
                e->state = PF_FAILED;
                if (e->waiters == 0)
                    unlink_entry(e);
                pthread_cond_broadcast(&g_cv);
                k++;
                continue;
            }
            start(e, pool, &n_pool);
            if (e->state == PF_FAILED && e->waiters == 0)
                unlink_entry(e);
        }
        if (g_running == 0 && g_queued == 0 && g_files == 0)
            break;
        pthread_mutex_unlock(&g_mu);
        int still = 0;
        curl_multi_perform(g_multi, &still);
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(g_multi, &left))) {
            if (m->msg != CURLMSG_DONE)
                continue;
            pf_entry *e = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&e);
            finish(e, m->data.result, pool, &n_pool);
        }
        pthread_mutex_lock(&g_mu);
        bool idle = g_queued == 0 || g_running >= limit;
        pthread_mutex_unlock(&g_mu);
        if (idle)
            curl_multi_poll(g_multi, NULL, 0, 1000, NULL);
        pthread_mutex_lock(&g_mu);
    }
    CURLM *m = g_multi;
    g_multi = NULL;
    g_thread = false;
    pthread_mutex_unlock(&g_mu);
    while (n_pool)
        curl_easy_cleanup(pool[--n_pool]);
    curl_multi_cleanup(m);
    return NULL;
}

/* A child of fork has no fetcher thread: forget the parent's queue and transfers (their memory
 * is left alone: it may be mid-update), so that the child's hints start a thread of its own and
 * its reads never wait for a transfer nobody runs. */
static void atfork_child(void)
{
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    g_mu = mu;
    g_cv = cv;
    g_first = g_last = g_qhead = g_qtail = NULL;
    g_queued = g_running = 0;
    g_held = 0;
    g_thread = false;
    g_multi = NULL;
}

static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

static void atfork_register(void)
{
    pthread_atfork(NULL, NULL, atfork_child);
}

/* Start the fetcher thread if it is not running (g_mu held). */
static bool ensure_thread(void)
{
    pthread_once(&g_atfork_once, atfork_register);
    if (g_thread)
        return true;
    curl_global_init(CURL_GLOBAL_DEFAULT); /* refcounted; the easy path has called it */
    if (!(g_multi = curl_multi_init()))
        return false;
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    bool ok = pthread_create(&t, &at, fetcher_main, NULL) == 0;
    pthread_attr_destroy(&at);
    if (!ok) {
        curl_multi_cleanup(g_multi);
        g_multi = NULL;
        return false;
    }
    g_thread = true;
    return true;
}

/* ---- the VFS side ---- */

static uint64_t env_size(const char *name, uint64_t def)
{
    const char *s = getenv(name);
    uint64_t v;
    return s && *s && stk__parse_size(s, &v) ? v : def;
}

void stk__remote_readahead(stk__file *file, stk__brange *r, size_t n)
{
    stk__rfile *f = (stk__rfile *)file;
    /* STOKER_HTTP_PREFETCH: the name before 0.3, still read */
    const char *ra =
        getenv("STOKER_HTTP_READAHEAD") ? "STOKER_HTTP_READAHEAD" : "STOKER_HTTP_PREFETCH";
    uint64_t budget = env_size(ra, (uint64_t)256 << 20);
    uint64_t gap = env_size("STOKER_HTTP_COALESCE_GAP", (uint64_t)128 << 10);
    uint64_t max = env_size("STOKER_HTTP_COALESCE_MAX", (uint64_t)4 << 20);
    if (budget == 0 || n == 0)
        return;
    for (size_t i = 0; i < n; i++) { /* within the object (the source checks reads again) */
        uint64_t a = STK_MIN(r[i].off, file->size);
        r[i].len = STK_MIN(r[i].len, file->size - a);
        r[i].off = a;
    }
    if (f->cache) { /* what the cache fetches: whole adjacent blocks */
        stk__ranges_to_blocks(r, n, STK_CACHE_BLOCK, file->size);
        gap = 0;
        max = STK_MAX(max, STK_CACHE_BLOCK);
    }
    uint64_t n_blocks = (file->size + STK_CACHE_BLOCK - 1) / STK_CACHE_BLOCK;
    uint8_t *cached = f->cache ? stk__calloc(n_blocks + 1, 1) : NULL; /* f->cached if unset */
    stk__brange *out = stk__malloc(n * sizeof(*out));
    uint64_t *useful = stk__malloc(n * sizeof(*useful));
    if (!out || !useful || (f->cache && !cached)) {
        stk__free(out);
        stk__free(useful);
        stk__free(cached);
        return;
    }
    pthread_mutex_lock(&g_mu);
    if (f->cache && !f->cached) {
        f->cached = cached;
        cached = NULL;
    }
    /* ranges hinted before (the read-ahead of the last batch), and blocks known to be in the
     * cache, are left out */
    size_t m = 0, slot;
    for (size_t i = 0; i < n; i++) {
        bool need = r[i].len && (!covering(f, r[i].off, r[i].len, &slot) || slot == SIZE_MAX);
        if (need && f->cache) {
            need = false;
            for (uint64_t b = r[i].off / STK_CACHE_BLOCK;
                 !need && b * STK_CACHE_BLOCK < r[i].off + r[i].len; b++)
                need = !f->cached[b]; /* neither there nor being fetched */
        }
        if (need)
            r[m++] = r[i];
    }
    size_t k = stk__ranges_coalesce(r, m, gap, max, out, useful);
    bool queued = false;
    for (size_t i = 0, j = 0; i < k; i++) {
        size_t j0 = j; /* r is sorted: request i holds the next ranges inside it */
        while (j < m && r[j].off + r[j].len <= out[i].off + out[i].len)
            j++;
        make_room(out[i].len, budget);
        if (!stk__readahead_admit(g_held, out[i].len, budget))
            break; /* the rest is read directly */
        pf_entry *e = stk__calloc(1, sizeof(*e));
        if (e && !(e->want = stk__malloc((j - j0) * sizeof(*e->want) + 1))) {
            stk__free(e);
            e = NULL;
        }
        if (!e)
            break;
        memcpy(e->want, r + j0, (j - j0) * sizeof(*e->want));
        e->n_want = e->left = j - j0;
        e->f = f;
        e->off = out[i].off;
        e->len = out[i].len;
        e->state = PF_QUEUED;
        e->prev = g_last;
        if (g_last)
            g_last->next = e;
        else
            g_first = e;
        g_last = e;
        if (g_qtail)
            g_qtail->qnext = e;
        else
            g_qhead = e;
        g_qtail = e;
        g_queued++;
        g_held += e->len;
        mark(f, e->off, e->len, 2);
        queued = true;
    }
    if (queued && !f->pf_used) {
        f->pf_used = true;
        g_files++;
    }
    if (queued && ensure_thread())
        curl_multi_wakeup(g_multi);
    else if (queued) { /* no thread: nothing will fetch them */
        for (pf_entry *e = g_first, *nx; e; e = nx) {
            nx = e->next;
            if (e->state == PF_QUEUED) {
                mark(e->f, e->off, e->len, 0);
                unlink_entry(e);
            }
        }
        g_qhead = g_qtail = NULL;
        g_queued = 0;
    }
    pthread_mutex_unlock(&g_mu);
    stk__free(cached);
    stk__free(out);
    stk__free(useful);
}

/* Copy bytes [lo, lo + len) of src into the pieces. */
static void copy_out(const stk__iov *iov, int n_iov, const uint8_t *src)
{
    size_t pos = 0;
    for (int i = 0; i < n_iov; i++) {
        memcpy(iov[i].base, src + pos, iov[i].len);
        pos += iov[i].len;
    }
}

int stk__readahead_take(stk__rfile *f, uint64_t off, const stk__iov *iov, int n_iov, size_t len)
{
    if (!f->pf_used) /* unlocked peek: set once, before any hint this reader could follow */
        return STK__TAKE_NONE;
    pthread_mutex_lock(&g_mu);
    size_t slot;
    pf_entry *e = covering(f, off, len, &slot);
    bool hit = false;
    if (e) {
        e->waiters++;
        while (e->state == PF_QUEUED || e->state == PF_RUNNING)
            pthread_cond_wait(&g_cv, &g_mu);
        e->waiters--;
        hit = e->state == PF_DONE;
        if (hit)
            copy_out(iov, n_iov, e->buf + (off - e->off));
        if (slot != SIZE_MAX && e->want[slot].len) { /* taken (a failed one too: read directly) */
            e->want[slot].len = 0;
            e->left--;
        }
        /* gone once its ranges were read (with the cache: once its blocks are there) */
        if (e->waiters == 0 && (e->state == PF_FAILED || e->left == 0 || f->cache))
            unlink_entry(e);
    }
    int rc = hit ? STK__TAKE_HIT : STK__TAKE_NONE;
    if (!hit && f->cached) {
        /* with the cache a read comes here on a miss; the fetcher may have put the block in
         * since (or found it there): read it there. Otherwise it is not there (now). */
        uint64_t b = off / STK_CACHE_BLOCK;
        rc = f->cached[b] == 1 ? STK__TAKE_CACHED : STK__TAKE_NONE;
        f->cached[b] = 0; /* set again by the read through the cache (stk__readahead_cached) */
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

void stk__readahead_cached(stk__rfile *f, uint64_t off)
{
    pthread_mutex_lock(&g_mu);
    if (f->cached)
        f->cached[off / STK_CACHE_BLOCK] = 1;
    pthread_mutex_unlock(&g_mu);
}

bool stk__readahead_forget(stk__rfile *f)
{
    pthread_mutex_lock(&g_mu);
    if (!f->pf_used) {
        pthread_mutex_unlock(&g_mu);
        return true;
    }
    pf_entry **pq = &g_qhead;
    g_qtail = NULL;
    while (*pq) { /* unqueue f's */
        if ((*pq)->f == f) {
            *pq = (*pq)->qnext;
            g_queued--;
        } else {
            g_qtail = *pq;
            pq = &(*pq)->qnext;
        }
    }
    for (pf_entry *e = g_first, *nx; e; e = nx) {
        nx = e->next;
        if (e->f == f && e->state != PF_RUNNING)
            unlink_entry(e);
    }
    g_files--;
    bool now = f->pf_refs == 0;
    f->closing = !now;
    if (g_thread)
        curl_multi_wakeup(g_multi);
    pthread_mutex_unlock(&g_mu);
    return now;
}

/*
 * stk_http.c: the HTTP transport: one request (HEAD or ranged GET, `Range: bytes=a-b`), signed for
 * S3 when a remote file has an S3 target, with its retries, on the calling thread's keep-alive
 * curl handle; and a remote file's requests (its HEAD: the size and the ETag or Last-Modified that
 * key the on-disk cache, stk_vfs_cache.c). Below everything remote: the read-ahead
 * (stk_vfs_fetch.c), the remote files' VFS ops and the http:// / https:// table (stk_vfs_http.c)
 * and the S3 byte source (stk_vfs_s3.c) all run their requests through it (stk_http_int.h).
 *
 * Connections: one curl easy handle per thread (a pthread key; easy handles are not thread-safe),
 * reset before each request so its connection stays alive between requests (keep-alive). Every
 * request is retried with exponential backoff and jitter on connection errors, timeouts, 408,
 * 429, 5xx (503 SlowDown) and short bodies, resuming after the bytes already received; after
 * STOKER_HTTP_RETRIES attempts (default 8) the error names the URL, the offset and the last HTTP
 * status. Nothing here prints.
 *
 * Settings (environment, read at each request): STOKER_HTTP_RETRIES, STOKER_HTTP_TIMEOUT
 * (seconds: connect, and the longest stall of a transfer; default 30), STOKER_HTTP_BACKOFF_MS
 * (the first retry's wait; default 100), STOKER_HTTP_INSECURE=1 (do not verify TLS
 * certificates), STOKER_CACHE_DIR / STOKER_CACHE_LIMIT.
 */
#include "io/stk_http_int.h"
#include "io/stk_sigv4.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define MAX_XML (64u << 20) /* a ListObjectsV2 page is far smaller */

/* ---- settings ---- */

long stk__http_env_long(const char *name, long def, long lo, long hi)
{
    const char *s = getenv(name);
    char *end;
    long v = s && *s ? strtol(s, &end, 10) : def;
    if (s && *s && *end)
        v = def;
    return v < lo ? lo : v > hi ? hi : v;
}

void stk__http_trim(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        s[--n] = 0;
    size_t k = strspn(s, " \t");
    memmove(s, s + k, n - k + 1);
}

/* Credentials of `profile` from the shared credentials file (none found: akid stays empty). */

const char *stk__http_ca_bundle(bool s3)
{
    const char *names[] = {"AWS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE"};
    for (size_t i = s3 ? 0 : 1; i < sizeof(names) / sizeof(names[0]); i++) {
        const char *v = getenv(names[i]);
        if (v && *v)
            return v;
    }
    return NULL;
}

const char *stk__http_ca_dir(void)
{
    const char *v = getenv("SSL_CERT_DIR");
    return v && *v ? v : NULL;
}

/* ---- curl handles: one per thread ---- */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_key;
static bool g_ok;

static void handle_free(void *h)
{
    curl_easy_cleanup(h);
}

static void global_init(void)
{
    g_ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK &&
           pthread_key_create(&g_key, handle_free) == 0;
}

static CURL *thread_handle(void)
{
    pthread_once(&g_once, global_init);
    if (!g_ok)
        return NULL;
    CURL *c = pthread_getspecific(g_key);
    if (!c) {
        c = curl_easy_init();
        if (c && pthread_setspecific(g_key, c) != 0) {
            curl_easy_cleanup(c);
            c = NULL;
        }
    } else {
        curl_easy_reset(c); /* keeps the connection cache: keep-alive */
    }
    return c;
}

/* ---- retries (pure: unit tested) ---- */

bool stk__http_retryable(int curl_code, long status, bool short_body)
{
    if (curl_code != CURLE_OK) {
        switch (curl_code) {
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_CONNECT:
        case CURLE_OPERATION_TIMEDOUT:
        case CURLE_SEND_ERROR:
        case CURLE_RECV_ERROR:
        case CURLE_GOT_NOTHING:
        case CURLE_PARTIAL_FILE:
        case CURLE_SSL_CONNECT_ERROR:
        case CURLE_HTTP2:
        case CURLE_HTTP2_STREAM:
            return true;
        default:
            return false;
        }
    }
    if (status == 408 || status == 429 || status >= 500)
        return true;
    return status >= 200 && status < 300 && short_body;
}

uint64_t stk__http_backoff_ms(int attempt, uint64_t base_ms, uint64_t max_ms, uint64_t rnd)
{
    uint64_t cap = base_ms;
    for (int i = 1; i < attempt && cap < max_ms; i++)
        cap *= 2;
    cap = STK_MIN(cap, max_ms);
    uint64_t half = cap / 2;
    return half + (cap - half ? rnd % (cap - half + 1) : 0);
}

static uint64_t rnd64(void)
{
    static _Thread_local uint64_t s;
    if (!s) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        s = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)&s;
        s |= 1;
    }
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
}

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* ---- one request ---- */

static size_t on_header(char *buf, size_t size, size_t n, void *ud)
{
    stk__http_resp *r = ud;
    size_t len = size * n;
    if (len >= 5 && strncmp(buf, "HTTP/", 5) == 0) { /* a new answer (after 100 Continue) */
        r->etag[0] = r->last_modified[0] = 0;
        r->has_length = false;
        return len;
    }
    char line[512];
    size_t k = STK_MIN(len, sizeof(line) - 1);
    memcpy(line, buf, k);
    line[k] = 0;
    stk__http_trim(line);
    char *colon = strchr(line, ':');
    if (!colon)
        return len;
    *colon = 0;
    char *v = colon + 1;
    stk__http_trim(v);
    if (strcasecmp(line, "etag") == 0)
        snprintf(r->etag, sizeof(r->etag), "%s", v);
    else if (strcasecmp(line, "last-modified") == 0)
        snprintf(r->last_modified, sizeof(r->last_modified), "%s", v);
    else if (strcasecmp(line, "content-length") == 0) {
        char *end;
        unsigned long long x = strtoull(v, &end, 10);
        r->length = x;
        r->has_length = end != v && *end == 0;
    }
    return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *ud)
{
    stk__http_resp *r = ud;
    size_t len = size * n;
    long status = 0;
    curl_easy_getinfo(r->c, CURLINFO_RESPONSE_CODE, &status);
    if (status < 200 || status >= 300) { /* keep the start of an error answer */
        size_t k = STK_MIN(len, STK_HTTP_ERRBODY - r->errlen);
        memcpy(r->errbody + r->errlen, data, k);
        r->errlen += k;
        r->errbody[r->errlen] = 0;
        return len;
    }
    stk__http_sink *s = r->s;
    if (!s)
        return len;
    if (s->mem || !s->iov) { /* a listing */
        if (s->mem_len + len + 1 > s->mem_cap) {
            size_t cap = STK_MAX(s->mem_cap * 2, s->mem_len + len + 1);
            if (cap > MAX_XML)
                return 0;
            char *m = stk__realloc(s->mem, cap);
            if (!m)
                return 0;
            s->mem = m;
            s->mem_cap = cap;
        }
        memcpy(s->mem + s->mem_len, data, len);
        s->mem_len += len;
        s->mem[s->mem_len] = 0;
        return len;
    }
    size_t used = 0;
    if (!s->started) { /* a server that ignores Range sends the object from its first byte */
        s->started = true;
        s->skip = status == 200 ? s->range_a : 0;
    }
    if (s->skip) {
        size_t k = (size_t)STK_MIN((uint64_t)len, s->skip);
        s->skip -= k;
        used = k;
    }
    while (used < len) {
        if (s->got == s->want) {
            if (status == 200) { /* the whole object: stop once we have ours */
                s->done = true;
                return 0;
            }
            s->overflow = true;
            return 0;
        }
        while (s->i < s->n && s->pos == s->iov[s->i].len) {
            s->i++;
            s->pos = 0;
        }
        size_t k = STK_MIN(len - used, s->iov[s->i].len - s->pos);
        memcpy((uint8_t *)s->iov[s->i].base + s->pos, data + used, k);
        s->pos += k;
        s->got += k;
        used += k;
    }
    return len;
}

stk_status stk__http_setup(void *handle, const stk__http_req *q, stk__http_resp *r,
                           struct curl_slist **headers, char *curl_err)
{
    CURL *c = handle;
    r->c = c;
    long timeout = stk__http_env_long("STOKER_HTTP_TIMEOUT", 30, 1, 86400);
    struct curl_slist *h = NULL, *t;
    char line[4096], range[80] = "";
    bool ok = true;
    if (q->ranged) {
        snprintf(range, sizeof(range), "bytes=%llu-%llu", (unsigned long long)q->a,
                 (unsigned long long)q->b);
        snprintf(line, sizeof(line), "Range: %s", range);
        ok = ok && (t = curl_slist_append(h, line)) && (h = t);
    }
    /* the version the open saw: a server that honours the condition answers 412 for another
     * (a weak ETag never matches If-Match's strong comparison: the answer's is checked) */
    if (q->pin && q->pin[0] && strlen(q->pin) < 1024 && !(q->pin_etag && q->pin[0] == 'W')) {
        snprintf(line, sizeof(line), "%s: %s", q->pin_etag ? "If-Match" : "If-Unmodified-Since",
                 q->pin);
        ok = ok && (t = curl_slist_append(h, line)) && (h = t);
    }
    if (q->cfg) {
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        char date[32];
        strftime(date, sizeof(date), "%Y%m%dT%H%M%SZ", &tm);
        snprintf(line, sizeof(line), "Host: %s", q->host);
        ok = ok && (t = curl_slist_append(h, line)) && (h = t);
        snprintf(line, sizeof(line), "x-amz-date: %s", date);
        ok = ok && (t = curl_slist_append(h, line)) && (h = t);
        ok = ok && (t = curl_slist_append(h, "x-amz-content-sha256: " STK_SIGV4_EMPTY_SHA256)) &&
             (h = t);
        if (q->cfg->akid[0]) {
            stk__sigv4_req sr = {.method = q->method,
                                 .host = q->host,
                                 .path = q->cpath,
                                 .query = q->query ? q->query : "",
                                 .range = q->ranged ? range : NULL,
                                 .payload_sha256 = STK_SIGV4_EMPTY_SHA256,
                                 .amz_date = date,
                                 .region = q->cfg->region,
                                 .service = "s3",
                                 .access_key = q->cfg->akid,
                                 .secret_key = q->cfg->secret,
                                 .token = q->cfg->token};
            char sig[65], auth[1024];
            ok = ok && stk__sigv4_sign(&sr, sig, auth, sizeof(auth)) == STK_OK;
            snprintf(line, sizeof(line), "Authorization: %s", auth);
            ok = ok && (t = curl_slist_append(h, line)) && (h = t);
            if (q->cfg->token) {
                char *tl = stk__malloc(strlen(q->cfg->token) + 32);
                ok = ok && tl;
                if (tl) {
                    sprintf(tl, "x-amz-security-token: %s", q->cfg->token);
                    ok = ok && (t = curl_slist_append(h, tl)) && (h = t);
                }
                stk__free(tl);
            }
        }
    }
    if (!ok) {
        curl_slist_free_all(h);
        return STK_ENOMEM;
    }
    curl_err[0] = 0;
    curl_easy_setopt(c, CURLOPT_URL, q->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_NOBODY, strcmp(q->method, "HEAD") == 0 ? 1L : 0L);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, curl_err);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, timeout);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L); /* a stalled transfer is a timeout */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, timeout);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, q->cfg ? 0L : 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_USERAGENT, "stoker/0.1");
    const char *ca = stk__http_ca_bundle(q->cfg != NULL);
    if (ca)
        curl_easy_setopt(c, CURLOPT_CAINFO, ca);
    if (stk__http_ca_dir())
        curl_easy_setopt(c, CURLOPT_CAPATH, stk__http_ca_dir());
    if (stk__http_env_long("STOKER_HTTP_INSECURE", 0, 0, 1)) {
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    *headers = h;
    return STK_OK;
}

static stk_status perform(const stk__http_req *q, stk__http_resp *r, CURLcode *cc, char *curl_err)
{
    CURL *c = thread_handle();
    struct curl_slist *h = NULL;
    if (!c || stk__http_setup(c, q, r, &h, curl_err) < 0)
        return STK_ENOMEM;
    *cc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, NULL); /* curl_err is on the caller's stack */
    curl_slist_free_all(h);
    return STK_OK;
}

/* The S3 error code in an error answer ("SlowDown", "NoSuchKey"), or "". */
static void s3_code(const char *body, char *out, size_t size)
{
    const char *a = strstr(body, "<Code>"), *b = a ? strstr(a, "</Code>") : NULL;
    out[0] = 0;
    if (a && b && b - a - 6 < (ptrdiff_t)size)
        snprintf(out, size, "%.*s", (int)(b - a - 6), a + 6);
}

bool stk__http_changed(const stk__http_req *q, const stk__http_resp *r)
{
    if (!q->pin || !q->pin[0])
        return false;
    if (r->status == 412)
        return true;
    if (r->status < 200 || r->status >= 300)
        return false;
    const char *got = q->pin_etag ? r->etag : r->last_modified;
    return got[0] && strcmp(got, q->pin) != 0;
}

/* Run q with retries. `name` is what messages call the object (the URL as the user wrote it);
 * for ranged GETs r->s is the sink and a retry resumes after the bytes already received. */
stk_status stk__http_request(stk__http_req *q, stk__http_resp *r, const char *name, char *err,
                             size_t err_size)
{
    int max = (int)stk__http_env_long("STOKER_HTTP_RETRIES", 8, 1, 100);
    uint64_t a0 = q->a;
    char curl_err[CURL_ERROR_SIZE] = "";
    CURLcode cc = CURLE_OK;
    bool short_body = false;
    for (int attempt = 1;; attempt++) {
        stk__http_sink *s = r->s;
        memset(r, 0, sizeof(*r));
        r->s = s;
        if (s && s->iov && q->ranged) {
            q->a = s->range_a = a0 + s->got;
            s->skip = 0;
            s->started = s->done = s->overflow = false;
        }
        if (s && !s->iov)
            s->mem_len = 0;
        if (perform(q, r, &cc, curl_err) < 0)
            return stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", name);
        bool is2xx = r->status >= 200 && r->status < 300;
        if (s && s->iov && cc == CURLE_WRITE_ERROR && s->done)
            cc = CURLE_OK;
        short_body = s && s->iov && is2xx && s->got < s->want;
        if (s && s->iov && s->overflow)
            return stk__set_error(err, err_size, STK_EFORMAT,
                                  "%s: the server sent more than the %zu bytes asked for at %llu "
                                  "(HTTP %ld)",
                                  name, s->want, (unsigned long long)a0, r->status);
        if (cc == CURLE_OK && stk__http_changed(q, r)) /* never retried: it will not change back */
            return stk__set_error(
                err, err_size, STK_EIO,
                "%s: changed since it was opened (%s %s, now %s%s): its records would mix two "
                "versions; reopen the dataset",
                name, q->pin_etag ? "ETag" : "Last-Modified", q->pin,
                r->status == 412 ? "another (HTTP 412 Precondition Failed" : "",
                r->status == 412 ? ")"
                : q->pin_etag    ? r->etag
                                 : r->last_modified);
        if (cc == CURLE_OK && is2xx && !short_body)
            return STK_OK;
        if (!stk__http_retryable((int)cc, cc == CURLE_OK ? r->status : 0, short_body) ||
            attempt >= max)
            break;
        sleep_ms(stk__http_backoff_ms(
            attempt, (uint64_t)stk__http_env_long("STOKER_HTTP_BACKOFF_MS", 100, 0, 60000), 5000,
            rnd64()));
    }
    char code[64];
    s3_code(r->errbody, code, sizeof(code));
    char tls[CURL_ERROR_SIZE + 300];
    if (cc == CURLE_PEER_FAILED_VERIFICATION || cc == CURLE_SSL_CACERT_BADFILE) {
        const char *ca = stk__http_ca_bundle(q->cfg != NULL), *dir = stk__http_ca_dir();
        snprintf(
            tls, sizeof(tls),
            "TLS certificate verification failed: %s (CA bundle: %s%s%s; set %sCURL_CA_BUNDLE, "
            "SSL_CERT_FILE or SSL_CERT_DIR to the CA that signed the server's certificate)",
            curl_err[0] ? curl_err : curl_easy_strerror(cc), ca ? ca : "the system's",
            dir ? ", CA directory: " : "", dir ? dir : "", q->cfg ? "AWS_CA_BUNDLE, " : "");
    }
    const char *what = cc == CURLE_PEER_FAILED_VERIFICATION || cc == CURLE_SSL_CACERT_BADFILE ? tls
                       : cc != CURLE_OK   ? (curl_err[0] ? curl_err : curl_easy_strerror(cc))
                       : short_body       ? "short body"
                       : r->status == 404 ? "not found"
                       : r->status == 403 ? "access denied (check the AWS credentials)"
                       : r->status == 416 ? "range not satisfiable (the object changed?)"
                                          : "request failed";
    stk_status code_rc = r->status == 416 ? STK_EFORMAT : STK_EIO;
    if (q->ranged && r->s && r->s->iov)
        return stk__set_error(err, err_size, code_rc,
                              "%s: read of %zu bytes at %llu failed after %d attempt(s): %s "
                              "(last HTTP status %ld%s%s)",
                              name, r->s->want, (unsigned long long)a0, max, what, r->status,
                              code[0] ? " " : "", code);
    return stk__set_error(err, err_size, code_rc, "%s: %s %s failed: %s (last HTTP status %ld%s%s)",
                          name, q->method, q->url, what, r->status, code[0] ? " " : "", code);
}

/* ---- targets: what a path means ---- */

void stk__target_free(stk__target *t)
{
    stk__free(t->url);
    stk__free(t->host);
    stk__free(t->cpath);
    stk__free(t->bucket);
    stk__free(t->key);
    memset(t, 0, sizeof(*t));
}

char *stk__http_fmt(const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    int n = vsnprintf(NULL, 0, f, ap);
    va_end(ap);
    char *s = n >= 0 ? stk__malloc((size_t)n + 1) : NULL;
    if (s) {
        va_start(ap, f);
        vsnprintf(s, (size_t)n + 1, f, ap);
        va_end(ap);
    }
    return s;
}

/* ---- a remote file's requests: its HEAD and ranged GETs, and its free ---- */

stk_status stk__remote_head(stk__rfile *f, const char *path, uint64_t *size, char *validator,
                            size_t vsize, char *err, size_t err_size)
{
    if (stk__head_memo_get(path, size, validator, vsize)) /* asked before during this open */
        return STK_OK;
    stk__http_resp r = {0};
    stk__http_req q = {.method = "HEAD",
                       .url = f->t.url,
                       .cfg = f->s3 ? &f->cfg : NULL,
                       .host = f->t.host,
                       .cpath = f->t.cpath};
    stk_status rc = stk__http_request(&q, &r, path, err, err_size);
    if (rc < 0)
        return rc;
    if (!r.has_length)
        return stk__set_error(err, err_size, STK_ENOTSUP,
                              "%s: the server sent no Content-Length (HTTP %ld): cannot read it "
                              "by ranges",
                              path, r.status);
    *size = r.length;
    const char *v = r.etag[0] ? r.etag : r.last_modified;
    if (validator)
        snprintf(validator, vsize, "%s", v);
    stk__head_memo_note(path, r.length, v);
    return STK_OK;
}

void stk__rfile_free(stk__rfile *f)
{
    if (!f)
        return;
    stk__target_free(&f->t);
    stk__s3cfg_free(&f->cfg);
    stk__free(f->cache_key);
    stk__free(f->validator);
    stk__free((void *)f->checked);
    stk__free(f->cached);
    stk__free(f->base.path);
    stk__free(f);
}

stk__http_req stk__rfile_get(const stk__rfile *f, uint64_t offset, uint64_t len)
{
    return (stk__http_req){.method = "GET",
                           .url = f->t.url,
                           .cfg = f->s3 ? &f->cfg : NULL,
                           .host = f->t.host,
                           .cpath = f->t.cpath,
                           .ranged = true,
                           .a = offset,
                           .b = offset + len - 1,
                           .pin = f->validator,
                           .pin_etag = f->validator_etag};
}

/*
 * stk_vfs_http.c: the remote byte sources. `http://` and `https://` URLs are read with ranged GETs
 * (`Range: bytes=a-b`); `s3://bucket/key` is the same over S3's REST API, signed with SigV4
 * (stk_sigv4.c) unless anonymous, and lists prefixes with ListObjectsV2. Open is a HEAD (the size,
 * and the ETag or Last-Modified that key the on-disk cache, stk_vfs_cache.c).
 *
 * Connections: one curl easy handle per thread (a pthread key; easy handles are not thread-safe),
 * reset before each request so its connection stays alive between requests (keep-alive). Every
 * request is retried with exponential backoff and jitter on connection errors, timeouts, 408,
 * 429, 5xx (503 SlowDown) and short bodies, resuming after the bytes already received; after
 * STOKER_HTTP_RETRIES attempts (default 8) the error names the URL, the offset and the last HTTP
 * status. Nothing here prints.
 *
 * Settings (environment, read at each open): AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
 * AWS_SESSION_TOKEN, AWS_PROFILE (~/.aws/credentials or AWS_SHARED_CREDENTIALS_FILE),
 * AWS_REGION / AWS_DEFAULT_REGION (default us-east-1), AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL
 * (path-style addressing; virtual-hosted AWS endpoints otherwise), STOKER_HTTP_RETRIES,
 * STOKER_HTTP_TIMEOUT (seconds: connect, and the longest stall of a transfer; default 30),
 * STOKER_HTTP_BACKOFF_MS (the first retry's wait; default 100),
 * STOKER_HTTP_INSECURE=1 (do not verify TLS certificates), STOKER_CACHE_DIR / STOKER_CACHE_LIMIT.
 */
#include "io/stk_vfs_http.h"
#include "io/stk_sigv4.h"

#include <curl/curl.h>
#include <fnmatch.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_XML (64u << 20) /* a ListObjectsV2 page is far smaller */
#define ERRBODY 300         /* bytes of an error answer kept for the message */

#define STK_TRY_RET(expr)                                                                          \
    do {                                                                                           \
        stk_status rc_ = (expr);                                                                   \
        if (rc_ < 0)                                                                               \
            return rc_;                                                                            \
    } while (0)

/* ---- settings ---- */

typedef struct s3cfg {
    char region[64];
    char endpoint[1024]; /* "scheme://authority[/base]" without a trailing slash; "" = AWS */
    char akid[256], secret[256];
    char *token; /* NULL without a session token */
} s3cfg;

static long env_long(const char *name, long def, long lo, long hi)
{
    const char *s = getenv(name);
    char *end;
    long v = s && *s ? strtol(s, &end, 10) : def;
    if (s && *s && *end)
        v = def;
    return v < lo ? lo : v > hi ? hi : v;
}

static void trim(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        s[--n] = 0;
    size_t k = strspn(s, " \t");
    memmove(s, s + k, n - k + 1);
}

/* Credentials of `profile` from the shared credentials file (none found: akid stays empty). */
static stk_status profile_credentials(s3cfg *c, const char *profile)
{
    char path[1024];
    const char *file = getenv("AWS_SHARED_CREDENTIALS_FILE");
    const char *home = getenv("HOME");
    if (file && *file)
        snprintf(path, sizeof(path), "%s", file);
    else if (home)
        snprintf(path, sizeof(path), "%s/.aws/credentials", home);
    else
        return STK_OK;
    FILE *fp = fopen(path, "r");
    if (!fp)
        return STK_OK;
    char line[4096];
    bool in = false;
    while (fgets(line, sizeof(line), fp)) {
        trim(line);
        if (line[0] == '[') {
            char *e = strchr(line, ']');
            if (e)
                *e = 0;
            trim(line + 1);
            in = strcmp(line + 1, profile) == 0;
            continue;
        }
        char *eq = strchr(line, '=');
        if (!in || !eq || line[0] == '#' || line[0] == ';')
            continue;
        *eq = 0;
        char *k = line, *v = eq + 1;
        trim(k);
        trim(v);
        if (strcmp(k, "aws_access_key_id") == 0)
            snprintf(c->akid, sizeof(c->akid), "%s", v);
        else if (strcmp(k, "aws_secret_access_key") == 0)
            snprintf(c->secret, sizeof(c->secret), "%s", v);
        else if (strcmp(k, "aws_session_token") == 0 && !c->token && !(c->token = stk__strdup(v))) {
            fclose(fp);
            return STK_ENOMEM;
        }
    }
    fclose(fp);
    return STK_OK;
}

static void cfg_free(s3cfg *c)
{
    stk__free(c->token);
    c->token = NULL;
}

static stk_status cfg_load(s3cfg *c, char *err, size_t err_size)
{
    memset(c, 0, sizeof(*c));
    const char *region = getenv("AWS_REGION");
    if (!region || !*region)
        region = getenv("AWS_DEFAULT_REGION");
    snprintf(c->region, sizeof(c->region), "%s", region && *region ? region : "us-east-1");
    const char *ep = getenv("AWS_ENDPOINT_URL_S3");
    if (!ep || !*ep)
        ep = getenv("AWS_ENDPOINT_URL");
    if (ep && *ep) {
        if (strncmp(ep, "http://", 7) != 0 && strncmp(ep, "https://", 8) != 0)
            return stk__set_error(err, err_size, STK_EINVAL,
                                  "AWS_ENDPOINT_URL(_S3)=%s: not an http:// or https:// URL", ep);
        snprintf(c->endpoint, sizeof(c->endpoint), "%s", ep);
        size_t n = strlen(c->endpoint);
        while (n && c->endpoint[n - 1] == '/')
            c->endpoint[--n] = 0;
    }
    const char *ak = getenv("AWS_ACCESS_KEY_ID"), *sk = getenv("AWS_SECRET_ACCESS_KEY");
    if (ak && *ak && sk && *sk) {
        snprintf(c->akid, sizeof(c->akid), "%s", ak);
        snprintf(c->secret, sizeof(c->secret), "%s", sk);
        const char *tok = getenv("AWS_SESSION_TOKEN");
        if (tok && *tok && !(c->token = stk__strdup(tok)))
            return stk__set_error(err, err_size, STK_ENOMEM, "out of memory");
        return STK_OK;
    }
    const char *profile = getenv("AWS_PROFILE");
    if (profile_credentials(c, profile && *profile ? profile : "default") < 0)
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory");
    if (!c->akid[0] || !c->secret[0]) { /* anonymous */
        c->akid[0] = c->secret[0] = 0;
        cfg_free(c);
    }
    return STK_OK;
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

/* Where the body goes: the caller's pieces (ranged reads) or a growing buffer (listings). */
typedef struct sink {
    const stk__iov *iov;
    int n, i;
    size_t pos;    /* in iov[i] */
    uint64_t skip; /* bytes to drop first (a 200 answer to a ranged GET sends the whole object) */
    uint64_t range_a;
    size_t got, want;
    bool started, done, overflow;
    char *mem; /* listings */
    size_t mem_len, mem_cap;
} sink;

typedef struct resp {
    long status;
    char etag[256], last_modified[128];
    uint64_t length;
    bool has_length;
    char errbody[ERRBODY + 1];
    size_t errlen;
    sink *s;
    CURL *c;
} resp;

/* A request: the URL to fetch, and for S3 what to sign. */
typedef struct req {
    const char *method; /* "HEAD" or "GET" */
    const char *url;    /* with the query string */
    const s3cfg *cfg;   /* NULL: plain HTTP */
    const char *host, *cpath, *query;
    bool ranged;
    uint64_t a, b; /* inclusive */
} req;

static size_t on_header(char *buf, size_t size, size_t n, void *ud)
{
    resp *r = ud;
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
    trim(line);
    char *colon = strchr(line, ':');
    if (!colon)
        return len;
    *colon = 0;
    char *v = colon + 1;
    trim(v);
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
    resp *r = ud;
    size_t len = size * n;
    long status = 0;
    curl_easy_getinfo(r->c, CURLINFO_RESPONSE_CODE, &status);
    if (status < 200 || status >= 300) { /* keep the start of an error answer */
        size_t k = STK_MIN(len, ERRBODY - r->errlen);
        memcpy(r->errbody + r->errlen, data, k);
        r->errlen += k;
        r->errbody[r->errlen] = 0;
        return len;
    }
    sink *s = r->s;
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

static stk_status perform(const req *q, resp *r, CURLcode *cc, char *curl_err)
{
    CURL *c = thread_handle();
    if (!c)
        return STK_ENOMEM;
    r->c = c;
    long timeout = env_long("STOKER_HTTP_TIMEOUT", 30, 1, 86400);
    struct curl_slist *h = NULL, *t;
    char line[4096], range[80] = "";
    bool ok = true;
    if (q->ranged) {
        snprintf(range, sizeof(range), "bytes=%llu-%llu", (unsigned long long)q->a,
                 (unsigned long long)q->b);
        snprintf(line, sizeof(line), "Range: %s", range);
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
    if (env_long("STOKER_HTTP_INSECURE", 0, 0, 1)) {
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
    }
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

/* Run q with retries. `name` is what messages call the object (the URL as the user wrote it);
 * for ranged GETs r->s is the sink and a retry resumes after the bytes already received. */
static stk_status request(req *q, resp *r, const char *name, char *err, size_t err_size)
{
    int max = (int)env_long("STOKER_HTTP_RETRIES", 8, 1, 100);
    uint64_t a0 = q->a;
    char curl_err[CURL_ERROR_SIZE] = "";
    CURLcode cc = CURLE_OK;
    bool short_body = false;
    for (int attempt = 1;; attempt++) {
        sink *s = r->s;
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
        if (cc == CURLE_OK && is2xx && !short_body)
            return STK_OK;
        if (!stk__http_retryable((int)cc, cc == CURLE_OK ? r->status : 0, short_body) ||
            attempt >= max)
            break;
        sleep_ms(stk__http_backoff_ms(
            attempt, (uint64_t)env_long("STOKER_HTTP_BACKOFF_MS", 100, 0, 60000), 5000, rnd64()));
    }
    char code[64];
    s3_code(r->errbody, code, sizeof(code));
    const char *what = cc != CURLE_OK     ? (curl_err[0] ? curl_err : curl_easy_strerror(cc))
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

typedef struct target {
    char *url;   /* without the query */
    char *host;  /* the Host header (S3) */
    char *cpath; /* the canonical URI (S3) */
    char *bucket, *key;
} target;

static void target_free(target *t)
{
    stk__free(t->url);
    stk__free(t->host);
    stk__free(t->cpath);
    stk__free(t->bucket);
    stk__free(t->key);
    memset(t, 0, sizeof(*t));
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...)
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

/* s3://bucket/key -> the URL, Host and canonical path for cfg. */
static stk_status s3_target(const char *path, const s3cfg *cfg, target *t, char *err,
                            size_t err_size)
{
    memset(t, 0, sizeof(*t));
    const char *b = path + 5, *slash = strchr(b, '/');
    size_t bl = slash ? (size_t)(slash - b) : strlen(b);
    if (bl == 0)
        return stk__set_error(err, err_size, STK_EINVAL, "%s: no bucket name (s3://bucket/key)",
                              path);
    const char *key = slash ? slash + 1 : "";
    size_t ek = strlen(key) * 3 + 1;
    char *enc = stk__malloc(ek);
    t->bucket = stk__malloc(bl + 1);
    t->key = stk__strdup(key);
    if (!enc || !t->bucket || !t->key)
        goto oom;
    memcpy(t->bucket, b, bl);
    t->bucket[bl] = 0;
    stk__uri_encode(enc, ek, key, true);
    if (cfg->endpoint[0]) { /* path style: ENDPOINT/bucket/key */
        const char *auth = strstr(cfg->endpoint, "://") + 3;
        const char *base = strchr(auth, '/');
        size_t al = base ? (size_t)(base - auth) : strlen(auth);
        t->host = fmt("%.*s", (int)al, auth);
        t->cpath = fmt("%s/%s/%s", base ? base : "", t->bucket, enc);
        t->url = fmt("%.*s%s", (int)(auth - cfg->endpoint) + (int)al, cfg->endpoint, t->cpath);
    } else {
        t->host = fmt("%s.s3.%s.amazonaws.com", t->bucket, cfg->region);
        t->cpath = fmt("/%s", enc);
        t->url = t->host ? fmt("https://%s%s", t->host, t->cpath) : NULL;
    }
    stk__free(enc);
    if (!t->host || !t->cpath || !t->url)
        goto oom;
    return STK_OK;
oom:
    stk__free(enc);
    target_free(t);
    return stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", path);
}

/* ---- open files ---- */

typedef struct rfile {
    stk__file base;
    bool s3;
    s3cfg cfg;
    target t;
    char *cache_key; /* URL + validator */
    stk__cache *cache;
} rfile;

static stk_status head(rfile *f, const char *path, uint64_t *size, char *validator, size_t vsize,
                       char *err, size_t err_size)
{
    resp r = {0};
    req q = {.method = "HEAD",
             .url = f->t.url,
             .cfg = f->s3 ? &f->cfg : NULL,
             .host = f->t.host,
             .cpath = f->t.cpath};
    stk_status rc = request(&q, &r, path, err, err_size);
    if (rc < 0)
        return rc;
    if (!r.has_length)
        return stk__set_error(err, err_size, STK_ENOTSUP,
                              "%s: the server sent no Content-Length (HTTP %ld): cannot read it "
                              "by ranges",
                              path, r.status);
    *size = r.length;
    if (validator)
        snprintf(validator, vsize, "%s", r.etag[0] ? r.etag : r.last_modified);
    return STK_OK;
}

static void rfile_free(rfile *f)
{
    if (!f)
        return;
    target_free(&f->t);
    cfg_free(&f->cfg);
    stk__free(f->cache_key);
    stk__free(f->base.path);
    stk__free(f);
}

static stk_status fetch_direct(void *ctx, uint64_t off, void *buf, size_t len, char *err,
                               size_t err_size);

static stk_status remote_open(const char *path, bool s3, stk__file **out, char *err,
                              size_t err_size)
{
    stk_status rc = STK_OK;
    *out = NULL;
    rfile *f = stk__calloc(1, sizeof(*f));
    if (!f || !(f->base.path = stk__strdup(path))) {
        stk__free(f);
        return stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", path);
    }
    f->base.vfs = s3 ? &stk__vfs_s3 : &stk__vfs_http;
    f->s3 = s3;
    if (s3) {
        if ((rc = cfg_load(&f->cfg, err, err_size)) < 0 ||
            (rc = s3_target(path, &f->cfg, &f->t, err, err_size)) < 0)
            goto fail;
        if (!f->t.key[0] || f->t.key[strlen(f->t.key) - 1] == '/') {
            rc = stk__set_error(err, err_size, STK_EINVAL, "%s: a prefix, not an object", path);
            goto fail;
        }
    } else if (!(f->t.url = stk__strdup(path))) {
        rc = stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    char validator[256];
    if ((rc = head(f, path, &f->base.size, validator, sizeof(validator), err, err_size)) < 0)
        goto fail;
    if ((rc = stk__cache_from_env(&f->cache, err, err_size)) < 0)
        goto fail;
    if (f->cache && !(f->cache_key = fmt("%s\n%s\n%llu", f->t.url, validator,
                                         (unsigned long long)f->base.size))) {
        rc = stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    *out = &f->base;
    return STK_OK;
fail:
    rfile_free(f);
    return rc;
}

static stk_status read_pieces(rfile *f, uint64_t offset, const stk__iov *iov, int n_iov, char *err,
                              size_t err_size)
{
    size_t want = 0;
    for (int i = 0; i < n_iov; i++)
        want += iov[i].len;
    if (want == 0)
        return STK_OK;
    if (offset > f->base.size || want > f->base.size - offset)
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "%s: read of %zu bytes at %llu is past the end (%llu bytes)",
                              f->base.path, want, (unsigned long long)offset,
                              (unsigned long long)f->base.size);
    sink s = {.iov = iov, .n = n_iov, .want = want};
    resp r = {.s = &s};
    req q = {.method = "GET",
             .url = f->t.url,
             .cfg = f->s3 ? &f->cfg : NULL,
             .host = f->t.host,
             .cpath = f->t.cpath,
             .ranged = true,
             .a = offset,
             .b = offset + want - 1};
    return request(&q, &r, f->base.path, err, err_size);
}

static stk_status fetch_direct(void *ctx, uint64_t off, void *buf, size_t len, char *err,
                               size_t err_size)
{
    stk__iov v = {buf, len};
    return read_pieces(ctx, off, &v, 1, err, err_size);
}

static stk_status remote_read(stk__file *file, uint64_t offset, const stk__iov *iov, int n_iov,
                              char *err, size_t err_size)
{
    rfile *f = (rfile *)file;
    if (f->cache)
        return stk__cache_read(f->cache, f->cache_key, f->base.size, offset, iov, n_iov,
                               fetch_direct, f, err, err_size);
    return read_pieces(f, offset, iov, n_iov, err, err_size);
}

static void remote_close(stk__file *file)
{
    rfile_free((rfile *)file);
}

/* ---- HTTP(S) ---- */

static bool http_claims(const char *path)
{
    return strncmp(path, "http://", 7) == 0 || strncmp(path, "https://", 8) == 0;
}

static stk_status http_open(const char *path, stk__file **out, char *err, size_t err_size)
{
    return remote_open(path, false, out, err, err_size);
}

static stk_status http_stat(const char *path, stk__stat *st, char *err, size_t err_size)
{
    rfile f = {.t.url = (char *)path};
    memset(st, 0, sizeof(*st));
    STK_TRY_RET(head(&f, path, &st->size, NULL, 0, err, err_size));
    st->is_regular = true;
    return STK_OK;
}

static stk_status http_list(const char *dir, stk__strlist *out, char *err, size_t err_size)
{
    (void)out;
    return stk__set_error(err, err_size, STK_ENOTSUP,
                          "%s: plain HTTP(S) cannot list a directory: give the shards' URLs, or a "
                          "brace range (https://host/train-{0000..0127}.stk)",
                          dir);
}

static stk_status http_glob(const char *pattern, stk__strlist *out, char *err, size_t err_size)
{
    return http_list(pattern, out, err, err_size);
}

const stk__vfs stk__vfs_http = {
    .name = "http",
    .claims = http_claims,
    .open = http_open,
    .read = remote_read,
    .close = remote_close,
    .stat = http_stat,
    .list = http_list,
    .glob = http_glob,
};

/* ---- S3 ---- */

static bool s3_claims(const char *path)
{
    return strncmp(path, "s3://", 5) == 0;
}

static stk_status s3_open(const char *path, stk__file **out, char *err, size_t err_size)
{
    return remote_open(path, true, out, err, err_size);
}

/* The text of the next <tag>...</tag> from *p (XML entities decoded), advancing *p; NULL when
 * there is none before `end` (or out of memory: *oom). */
static char *xml_next(const char **p, const char *end, const char *tag, bool *oom)
{
    char open[64], close[64];
    snprintf(open, sizeof(open), "<%s>", tag);
    snprintf(close, sizeof(close), "</%s>", tag);
    const char *a = strstr(*p, open);
    if (!a || (end && a >= end))
        return NULL;
    a += strlen(open);
    const char *b = strstr(a, close);
    if (!b)
        return NULL;
    *p = b + strlen(close);
    char *s = stk__malloc((size_t)(b - a) + 1);
    if (!s) {
        *oom = true;
        return NULL;
    }
    size_t o = 0;
    static const struct {
        const char *ent;
        char c;
    } ents[] = {{"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    for (const char *q = a; q < b;) {
        bool hit = false;
        for (size_t i = 0; i < sizeof(ents) / sizeof(ents[0]) && *q == '&'; i++) {
            size_t n = strlen(ents[i].ent);
            if ((size_t)(b - q) >= n && strncmp(q, ents[i].ent, n) == 0) {
                s[o++] = ents[i].c;
                q += n;
                hit = true;
                break;
            }
        }
        if (!hit)
            s[o++] = *q++;
    }
    s[o] = 0;
    return s;
}

/* Every key (and, with a delimiter, every common prefix) under `prefix` in `bucket`, in pages of
 * ListObjectsV2. `each` gets keys (is_prefix false) and prefixes; max_keys 0 = all. */
typedef stk_status (*list_fn)(void *ctx, const char *key, bool is_prefix, uint64_t size);

static stk_status s3_list_objects(const char *path, const char *prefix, bool delimiter,
                                  int max_keys, list_fn each, void *ctx, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    s3cfg cfg;
    target t = {0};
    sink s = {0};
    char *token = NULL;
    STK_TRY_RET(cfg_load(&cfg, err, err_size));
    char *bpath = NULL;
    {
        const char *b = path + 5, *slash = strchr(b, '/');
        bpath = fmt("s3://%.*s/", (int)(slash ? slash - b : (ptrdiff_t)strlen(b)), b);
    }
    if (!bpath) {
        cfg_free(&cfg);
        return stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", path);
    }
    if ((rc = s3_target(bpath, &cfg, &t, err, err_size)) < 0)
        goto done;
    /* the bucket's URL: path style "/bucket" (drop the empty key's "/"), virtual-hosted "/" */
    size_t ul = strlen(t.url), cl = strlen(t.cpath);
    if (cfg.endpoint[0] && ul && t.url[ul - 1] == '/') {
        t.url[ul - 1] = 0;
        t.cpath[cl - 1] = 0;
    }
    for (;;) {
        char *ep = stk__malloc(strlen(prefix) * 3 + 1);
        char *et = token ? stk__malloc(strlen(token) * 3 + 1) : NULL;
        char mk[32] = "";
        if (max_keys > 0)
            snprintf(mk, sizeof(mk), "&max-keys=%d", max_keys);
        char *query = NULL, *url = NULL;
        if (ep && (!token || et)) {
            stk__uri_encode(ep, strlen(prefix) * 3 + 1, prefix, false);
            if (token)
                stk__uri_encode(et, strlen(token) * 3 + 1, token, false);
            /* canonical order: continuation-token, delimiter, list-type, max-keys, prefix */
            query =
                fmt("%s%s%s%slist-type=2%s&prefix=%s", token ? "continuation-token=" : "",
                    token ? et : "", token ? "&" : "", delimiter ? "delimiter=%2F&" : "", mk, ep);
            url = query ? fmt("%s?%s", t.url, query) : NULL;
        }
        stk__free(ep);
        stk__free(et);
        if (!url) {
            stk__free(query);
            rc = stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", path);
            goto done;
        }
        resp r = {.s = &s};
        req q = {.method = "GET",
                 .url = url,
                 .cfg = &cfg,
                 .host = t.host,
                 .cpath = t.cpath,
                 .query = query};
        rc = request(&q, &r, path, err, err_size);
        stk__free(url);
        stk__free(query);
        if (rc < 0)
            goto done;
        const char *p = s.mem ? s.mem : "";
        bool oom = false;
        const char *contents;
        while (rc == STK_OK && (contents = strstr(p, "<Contents>"))) {
            const char *end = strstr(contents, "</Contents>");
            p = contents;
            char *key = xml_next(&p, end, "Key", &oom);
            char *size = key ? xml_next(&p, end, "Size", &oom) : NULL;
            if (key)
                rc = each(ctx, key, false, size ? strtoull(size, NULL, 10) : 0);
            stk__free(key);
            stk__free(size);
            if (end)
                p = end;
            if (!key)
                break;
        }
        p = s.mem ? s.mem : "";
        const char *cp;
        while (rc == STK_OK && (cp = strstr(p, "<CommonPrefixes>"))) {
            p = cp;
            char *pre = xml_next(&p, NULL, "Prefix", &oom);
            if (!pre)
                break;
            rc = each(ctx, pre, true, 0);
            stk__free(pre);
        }
        if (oom)
            rc = stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", path);
        if (rc < 0)
            goto done;
        p = s.mem ? s.mem : "";
        char *trunc = xml_next(&p, NULL, "IsTruncated", &oom);
        bool more = trunc && strcmp(trunc, "true") == 0 && max_keys == 0;
        stk__free(trunc);
        stk__free(token);
        token = NULL;
        if (!more)
            break;
        p = s.mem;
        token = xml_next(&p, NULL, "NextContinuationToken", &oom);
        if (!token) {
            rc = stk__set_error(err, err_size, oom ? STK_ENOMEM : STK_EFORMAT,
                                "%s: a truncated listing without a continuation token", path);
            goto done;
        }
    }
done:
    stk__free(token);
    stk__free(s.mem);
    stk__free(bpath);
    target_free(&t);
    cfg_free(&cfg);
    return rc;
}

/* The key of an s3:// path (after the bucket and its slash). */
static const char *s3_key(const char *path)
{
    const char *slash = strchr(path + 5, '/');
    return slash ? slash + 1 : "";
}

static stk_status count_one(void *ctx, const char *key, bool is_prefix, uint64_t size)
{
    (void)key, (void)is_prefix, (void)size;
    (*(size_t *)ctx)++;
    return STK_OK;
}

static stk_status s3_stat(const char *path, stk__stat *st, char *err, size_t err_size)
{
    memset(st, 0, sizeof(*st));
    const char *key = s3_key(path);
    size_t kl = strlen(key);
    stk_status rc = STK_EIO;
    if (kl && key[kl - 1] != '/') {
        rfile f = {.s3 = true};
        if ((rc = cfg_load(&f.cfg, err, err_size)) < 0)
            return rc;
        rc = s3_target(path, &f.cfg, &f.t, err, err_size);
        if (rc == STK_OK)
            rc = head(&f, path, &st->size, NULL, 0, err, err_size);
        target_free(&f.t);
        cfg_free(&f.cfg);
        if (rc == STK_OK) {
            st->is_regular = true;
            return STK_OK;
        }
        if (rc == STK_ENOMEM || rc == STK_EINVAL)
            return rc;
    }
    /* not an object: a prefix with objects under it is a directory */
    char *prefix = fmt("%s%s", key, kl && key[kl - 1] != '/' ? "/" : "");
    if (!prefix)
        return stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", path);
    size_t n = 0;
    char lerr[STK_ERRMSG_SIZE];
    stk_status lrc = s3_list_objects(path, prefix, true, 1, count_one, &n, lerr, sizeof(lerr));
    stk__free(prefix);
    if (lrc == STK_OK && n > 0) {
        st->is_dir = true;
        return STK_OK;
    }
    if (lrc < 0) /* the listing's reason (credentials, endpoint) says more */
        return stk__set_error(err, err_size, lrc, "%s", lerr);
    if (rc == STK_EIO && kl && key[kl - 1] != '/')
        return rc; /* HEAD's message */
    return stk__set_error(err, err_size, STK_EIO, "%s: no object or prefix of that name", path);
}

typedef struct names_ctx {
    stk__strlist *out;
    size_t skip; /* the prefix's length */
} names_ctx;

static stk_status add_name(void *ctx, const char *key, bool is_prefix, uint64_t size)
{
    (void)size;
    names_ctx *c = ctx;
    size_t n = strlen(key);
    if (n <= c->skip)
        return STK_OK;
    char *name = stk__strdup(key + c->skip);
    if (!name)
        return STK_ENOMEM;
    if (is_prefix && name[strlen(name) - 1] == '/')
        name[strlen(name) - 1] = 0;
    stk_status rc = name[0] ? stk__strlist_add(c->out, name) : STK_OK;
    stk__free(name);
    return rc;
}

static stk_status s3_list(const char *dir, stk__strlist *out, char *err, size_t err_size)
{
    const char *key = s3_key(dir);
    size_t kl = strlen(key);
    char *prefix = fmt("%s%s", key, kl && key[kl - 1] != '/' ? "/" : "");
    if (!prefix)
        return stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", dir);
    names_ctx c = {out, strlen(prefix)};
    stk_status rc = s3_list_objects(dir, prefix, true, 0, add_name, &c, err, err_size);
    stk__free(prefix);
    if (rc == STK_ENOMEM)
        stk__set_error(err, err_size, rc, "%s: out of memory", dir);
    return rc;
}

typedef struct glob_ctx {
    stk__strlist *out;
    const char *bucket_url; /* "s3://bucket/" */
    const char *pattern;    /* of keys */
    char *buf;
} glob_ctx;

static stk_status add_match(void *ctx, const char *key, bool is_prefix, uint64_t size)
{
    (void)size, (void)is_prefix;
    glob_ctx *g = ctx;
    if (fnmatch(g->pattern, key, FNM_PATHNAME) != 0)
        return STK_OK;
    char *p = fmt("%s%s", g->bucket_url, key);
    stk_status rc = p ? stk__strlist_add(g->out, p) : STK_ENOMEM;
    stk__free(p);
    return rc;
}

static stk_status s3_glob(const char *pattern, stk__strlist *out, char *err, size_t err_size)
{
    const char *key = s3_key(pattern);
    size_t lit = strcspn(key, "*?[");
    char *prefix = fmt("%.*s", (int)lit, key);
    char *bucket_url = fmt("%.*s", (int)(key - pattern), pattern);
    stk__strlist found = {0};
    stk_status rc = STK_OK;
    if (!prefix || !bucket_url) {
        rc = stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", pattern);
        goto done;
    }
    glob_ctx g = {&found, bucket_url, key, NULL};
    rc = s3_list_objects(pattern, prefix, false, 0, add_match, &g, err, err_size);
    if (rc == STK_ENOMEM)
        stk__set_error(err, err_size, rc, "%s: out of memory", pattern);
    if (rc == STK_OK && found.n == 0)
        rc = stk__set_error(err, err_size, STK_EIO, "%s: no object matches this pattern", pattern);
    stk__strlist_sort(&found);
    for (size_t i = 0; i < found.n && rc == STK_OK; i++)
        if (stk__strlist_add(out, found.v[i]) < 0)
            rc = stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", pattern);
done:
    stk__strlist_free(&found);
    stk__free(prefix);
    stk__free(bucket_url);
    return rc;
}

const stk__vfs stk__vfs_s3 = {
    .name = "s3",
    .claims = s3_claims,
    .open = s3_open,
    .read = remote_read,
    .close = remote_close,
    .stat = s3_stat,
    .list = s3_list,
    .glob = s3_glob,
};

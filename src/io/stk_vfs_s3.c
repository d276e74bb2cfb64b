/*
 * stk_vfs_s3.c: the s3:// byte source. `s3://bucket/key` is read like an http(s):// URL (ranged
 * GETs through the transport and remote files of stk_vfs_http.c), signed with SigV4
 * (stk_sigv4.c) unless anonymous; prefixes and globs are listed with ListObjectsV2.
 *
 * Settings (environment, read at each open): AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
 * AWS_SESSION_TOKEN, AWS_PROFILE (~/.aws/credentials or AWS_SHARED_CREDENTIALS_FILE),
 * AWS_REGION / AWS_DEFAULT_REGION (default us-east-1), AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL
 * (path-style addressing; virtual-hosted AWS endpoints otherwise).
 */
#include "io/stk_http_int.h"
#include "io/stk_sigv4.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

/* ---- settings ---- */

static stk_status profile_credentials(stk__s3cfg *c, const char *profile)
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
        stk__http_trim(line);
        if (line[0] == '[') {
            char *e = strchr(line, ']');
            if (e)
                *e = 0;
            stk__http_trim(line + 1);
            in = strcmp(line + 1, profile) == 0;
            continue;
        }
        char *eq = strchr(line, '=');
        if (!in || !eq || line[0] == '#' || line[0] == ';')
            continue;
        *eq = 0;
        char *k = line, *v = eq + 1;
        stk__http_trim(k);
        stk__http_trim(v);
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

static stk_status cfg_load(stk__s3cfg *c, char *err, size_t err_size)
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
        stk__s3cfg_free(c);
    }
    return STK_OK;
}

static stk_status s3_target(const char *path, const stk__s3cfg *cfg, stk__target *t, char *err,
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
        t->host = stk__http_fmt("%.*s", (int)al, auth);
        t->cpath = stk__http_fmt("%s/%s/%s", base ? base : "", t->bucket, enc);
        t->url =
            stk__http_fmt("%.*s%s", (int)(auth - cfg->endpoint) + (int)al, cfg->endpoint, t->cpath);
    } else {
        t->host = stk__http_fmt("%s.s3.%s.amazonaws.com", t->bucket, cfg->region);
        t->cpath = stk__http_fmt("/%s", enc);
        t->url = t->host ? stk__http_fmt("https://%s%s", t->host, t->cpath) : NULL;
    }
    stk__free(enc);
    if (!t->host || !t->cpath || !t->url)
        goto oom;
    return STK_OK;
oom:
    stk__free(enc);
    stk__target_free(t);
    return stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", path);
}

/* ---- S3 ---- */

static bool s3_claims(const char *path)
{
    return strncmp(path, "s3://", 5) == 0;
}

static stk_status s3_open(const char *path, stk__file **out, char *err, size_t err_size)
{
    stk__s3cfg cfg;
    stk__target t = {0};
    stk_status rc = cfg_load(&cfg, err, err_size);
    if (rc == STK_OK)
        rc = s3_target(path, &cfg, &t, err, err_size);
    if (rc == STK_OK && (!t.key[0] || t.key[strlen(t.key) - 1] == '/'))
        rc = stk__set_error(err, err_size, STK_EINVAL, "%s: a prefix, not an object", path);
    if (rc < 0) {
        stk__target_free(&t);
        stk__s3cfg_free(&cfg);
        return rc;
    }
    return stk__remote_open(path, &stk__vfs_s3, &cfg, &t, out, err, err_size);
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
    stk__s3cfg cfg;
    stk__target t = {0};
    stk__http_sink s = {0};
    char *token = NULL;
    STK_TRY_RET(cfg_load(&cfg, err, err_size));
    char *bpath = NULL;
    {
        const char *b = path + 5, *slash = strchr(b, '/');
        bpath = stk__http_fmt("s3://%.*s/", (int)(slash ? slash - b : (ptrdiff_t)strlen(b)), b);
    }
    if (!bpath) {
        stk__s3cfg_free(&cfg);
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
            query = stk__http_fmt("%s%s%s%slist-type=2%s&prefix=%s",
                                  token ? "continuation-token=" : "", token ? et : "",
                                  token ? "&" : "", delimiter ? "delimiter=%2F&" : "", mk, ep);
            url = query ? stk__http_fmt("%s?%s", t.url, query) : NULL;
        }
        stk__free(ep);
        stk__free(et);
        if (!url) {
            stk__free(query);
            rc = stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", path);
            goto done;
        }
        stk__http_resp r = {.s = &s};
        stk__http_req q = {.method = "GET",
                           .url = url,
                           .cfg = &cfg,
                           .host = t.host,
                           .cpath = t.cpath,
                           .query = query};
        rc = stk__http_request(&q, &r, path, err, err_size);
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
            const char *at = contents; /* the ETag comes before or after Size: its own cursor */
            char *key = xml_next(&p, end, "Key", &oom);
            char *size = key ? xml_next(&p, end, "Size", &oom) : NULL;
            char *etag = size ? xml_next(&at, end, "ETag", &oom) : NULL;
            if (key && size && etag && *etag) { /* a HEAD's answer, for the rest of the open */
                char *full = stk__http_fmt("%s%s", bpath, key);
                if (full)
                    stk__head_memo_note(full, strtoull(size, NULL, 10), etag);
                stk__free(full);
            }
            if (key)
                rc = each(ctx, key, false, size ? strtoull(size, NULL, 10) : 0);
            stk__free(key);
            stk__free(size);
            stk__free(etag);
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
    stk__target_free(&t);
    stk__s3cfg_free(&cfg);
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
        stk__rfile f = {.s3 = true};
        if ((rc = cfg_load(&f.cfg, err, err_size)) < 0)
            return rc;
        rc = s3_target(path, &f.cfg, &f.t, err, err_size);
        if (rc == STK_OK)
            rc = stk__remote_head(&f, path, &st->size, NULL, 0, err, err_size);
        stk__target_free(&f.t);
        stk__s3cfg_free(&f.cfg);
        if (rc == STK_OK) {
            st->is_regular = true;
            return STK_OK;
        }
        if (rc == STK_ENOMEM || rc == STK_EINVAL)
            return rc;
    }
    /* not an object: a prefix with objects under it is a directory */
    char *prefix = stk__http_fmt("%s%s", key, kl && key[kl - 1] != '/' ? "/" : "");
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
    char *prefix = stk__http_fmt("%s%s", key, kl && key[kl - 1] != '/' ? "/" : "");
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
    char *p = stk__http_fmt("%s%s", g->bucket_url, key);
    stk_status rc = p ? stk__strlist_add(g->out, p) : STK_ENOMEM;
    stk__free(p);
    return rc;
}

static stk_status s3_glob(const char *pattern, stk__strlist *out, char *err, size_t err_size)
{
    const char *key = s3_key(pattern);
    size_t lit = strcspn(key, "*?[");
    char *prefix = stk__http_fmt("%.*s", (int)lit, key);
    char *bucket_url = stk__http_fmt("%.*s", (int)(key - pattern), pattern);
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
    .read = stk__remote_read,
    .close = stk__remote_close,
    .stat = s3_stat,
    .list = s3_list,
    .glob = s3_glob,
    .readahead = stk__remote_readahead,
    .aux_get = stk__remote_aux_get,
    .aux_put = stk__remote_aux_put,
};

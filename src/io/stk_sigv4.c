/*
 * stk_sigv4.c: AWS Signature Version 4 (canonical request, string to sign, derived key, HMAC),
 * for the headers S3 reads send: host, range, x-amz-content-sha256, x-amz-date and
 * x-amz-security-token, signed in that (sorted) order.
 */
#include "io/stk_sigv4.h"

#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <string.h>

static void hex(const unsigned char *d, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[d[i] >> 4];
        out[2 * i + 1] = digits[d[i] & 15];
    }
    out[2 * n] = 0;
}

void stk__sha256_hex(const void *data, size_t len, char out[65])
{
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256(data, len, md);
    hex(md, sizeof(md), out);
}

static void hmac(const void *key, size_t klen, const char *msg, unsigned char out[32])
{
    unsigned int n = 32;
    HMAC(EVP_sha256(), key, (int)klen, (const unsigned char *)msg, strlen(msg), out, &n);
}

bool stk__uri_encode(char *dst, size_t size, const char *s, bool keep_slash)
{
    static const char digits[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        unsigned char c = *p;
        bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/');
        if (o + (keep ? 1 : 3) >= size)
            return false;
        if (keep) {
            dst[o++] = (char)c;
        } else {
            dst[o++] = '%';
            dst[o++] = digits[c >> 4];
            dst[o++] = digits[c & 15];
        }
    }
    if (o >= size)
        return false;
    dst[o] = 0;
    return true;
}

stk_status stk__sigv4_sign(const stk__sigv4_req *r, char sig[65], char *auth, size_t auth_size)
{
    size_t cap = strlen(r->path) + strlen(r->query) + strlen(r->host) +
                 (r->range ? strlen(r->range) : 0) + (r->token ? strlen(r->token) : 0) + 512;
    char *canon = stk__malloc(cap);
    if (!canon)
        return STK_ENOMEM;
    char date[9];
    memcpy(date, r->amz_date, 8);
    date[8] = 0;
    const char *signed_headers =
        r->range   ? (r->token ? "host;range;x-amz-content-sha256;x-amz-date;"
                                 "x-amz-security-token"
                               : "host;range;x-amz-content-sha256;x-amz-date")
        : r->token ? "host;x-amz-content-sha256;x-amz-date;x-amz-security-token"
                   : "host;x-amz-content-sha256;x-amz-date";
    int n =
        snprintf(canon, cap, "%s\n%s\n%s\nhost:%s\n%s%s%sx-amz-content-sha256:%s\nx-amz-date:%s\n",
                 r->method, r->path, r->query, r->host, r->range ? "range:" : "",
                 r->range ? r->range : "", r->range ? "\n" : "", r->payload_sha256, r->amz_date);
    if (n > 0 && (size_t)n < cap && r->token)
        n += snprintf(canon + n, cap - (size_t)n, "x-amz-security-token:%s\n", r->token);
    if (n > 0 && (size_t)n < cap)
        n += snprintf(canon + n, cap - (size_t)n, "\n%s\n%s", signed_headers, r->payload_sha256);
    if (n < 0 || (size_t)n >= cap) {
        stk__free(canon);
        return STK_ELIMIT;
    }
    char canon_hash[65];
    stk__sha256_hex(canon, (size_t)n, canon_hash);
    stk__free(canon);

    char scope[256], to_sign[512];
    n = snprintf(scope, sizeof(scope), "%s/%s/%s/aws4_request", date, r->region, r->service);
    if (n < 0 || (size_t)n >= sizeof(scope))
        return STK_ELIMIT;
    n = snprintf(to_sign, sizeof(to_sign), "AWS4-HMAC-SHA256\n%s\n%s\n%s", r->amz_date, scope,
                 canon_hash);
    if (n < 0 || (size_t)n >= sizeof(to_sign))
        return STK_ELIMIT;

    char kbuf[300];
    n = snprintf(kbuf, sizeof(kbuf), "AWS4%s", r->secret_key);
    if (n < 0 || (size_t)n >= sizeof(kbuf))
        return STK_ELIMIT;
    unsigned char k1[32], k2[32], k3[32], k4[32], s[32];
    hmac(kbuf, (size_t)n, date, k1);
    hmac(k1, 32, r->region, k2);
    hmac(k2, 32, r->service, k3);
    hmac(k3, 32, "aws4_request", k4);
    hmac(k4, 32, to_sign, s);
    hex(s, 32, sig);
    n = snprintf(auth, auth_size,
                 "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s", r->access_key,
                 scope, signed_headers, sig);
    return n < 0 || (size_t)n >= auth_size ? STK_ELIMIT : STK_OK;
}

/*
 * stk_sigv4.h: AWS Signature Version 4 for S3 requests (the signer of stk_vfs_http.c), kept apart
 * so that its known-answer tests (tests/unit/io/test_sigv4.c, the AWS documentation's examples) run
 * without a network. SHA-256 and HMAC come from OpenSSL's libcrypto.
 */
#ifndef STK_SIGV4_H
#define STK_SIGV4_H

#include "stk_internal.h"

/* The SHA-256 of the empty payload (every GET and HEAD sends it as x-amz-content-sha256). */
#define STK_SIGV4_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* One request to sign. Strings are as sent: `path` already URI-encoded ('/' kept), `query` the
 * canonical query string (sorted, encoded; "" when none), `range` NULL when the request has none,
 * `token` NULL without a session token. */
typedef struct stk__sigv4_req {
    const char *method, *host, *path, *query, *range;
    const char *payload_sha256; /* hex */
    const char *amz_date;       /* "20130524T000000Z" */
    const char *region, *service;
    const char *access_key, *secret_key, *token;
} stk__sigv4_req;

/* Sign `r`: the hex signature into sig (65 bytes) and the whole Authorization header value into
 * auth. STK_ELIMIT when a buffer is too small, STK_ENOMEM. */
stk_status stk__sigv4_sign(const stk__sigv4_req *r, char sig[65], char *auth, size_t auth_size);

/* Append the S3 URI encoding of s (unreserved bytes kept, '/' kept when keep_slash) to dst
 * (size bytes, NUL-terminated); false when it does not fit. */
bool stk__uri_encode(char *dst, size_t size, const char *s, bool keep_slash);

/* Hex SHA-256 of data into out (65 bytes). */
void stk__sha256_hex(const void *data, size_t len, char out[65]);

#endif /* STK_SIGV4_H */

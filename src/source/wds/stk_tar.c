/*
 * stk_tar.c: tar headers and the one scan of a shard's headers that lists its regular members
 * (stk_tar.h). ustar, GNU 'L' long names, PAX 'x' path=/size=; 'g' global headers,
 * directories, links and devices are skipped; and the read of one member's bytes, gunzipped
 * (zlib) when it is a `.gz`. Moved out of stk_src_wds.c; stk_wds_group.c groups the members
 * into samples.
 */
#include "common/stk_endian.h"
#include "source/wds/stk_tar.h"
#include "source/stk_source.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define SCAN_BUF (64u << 10)
#define SCAN_SMALL (4u << 10)
#define SCAN_REMOTE (1u << 20) /* a remote shard: every read is a request, bytes are cheap */
#define MAX_LONGNAME (64u << 10)
#define MAX_PAX (1u << 20)
#define GZ_MIN 18 /* the smallest gzip stream: 10-byte header, empty deflate, 8-byte trailer */
#define GZ_MAX_RATIO 1032u /* deflate's largest expansion (258 bytes from 2 bits) */

/* ---- tar headers ---- */

static bool all_zero(const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return false;
    return true;
}

/* An octal (or GNU base-256) number field; false when malformed. */
bool stk__tar_number(const uint8_t *p, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (p[0] & 0x80) { /* base-256, big-endian, positive only */
        if (p[0] != 0x80)
            return false;
        for (size_t i = 1; i < n; i++) {
            if (v >> 56)
                return false;
            v = v << 8 | p[i];
        }
        *out = v;
        return true;
    }
    size_t i = 0;
    while (i < n && p[i] == ' ')
        i++;
    size_t digits = 0;
    for (; i < n && p[i] >= '0' && p[i] <= '7'; i++, digits++) {
        if (v >> 60)
            return false;
        v = v << 3 | (uint64_t)(p[i] - '0');
    }
    for (; i < n; i++)
        if (p[i] != ' ' && p[i] != '\0')
            return false;
    *out = v;
    return digits > 0;
}

/* Whether the header's checksum (unsigned or signed sum, chksum field as spaces) matches. */
bool stk__tar_checksum_ok(const uint8_t *h)
{
    uint64_t want;
    if (!stk__tar_number(h + 148, 8, &want))
        return false;
    uint32_t u = 8 * ' '; /* a plain byte sum (vectorised), then the chksum field swapped out */
    for (int i = 0; i < STK__TAR_BLOCK; i++)
        u += h[i];
    for (int i = 148; i < 156; i++)
        u -= h[i];
    if (want == u)
        return true;
    int64_t s = 8 * ' '; /* old writers summed signed chars */
    for (int i = 0; i < STK__TAR_BLOCK; i++)
        s += i >= 148 && i < 156 ? 0 : (int8_t)h[i];
    return (int64_t)want == s;
}

bool stk__tar_is_ustar(const uint8_t *h)
{
    return memcmp(h + 257, "ustar", 5) == 0;
}

/* ---- scanning a shard ---- */

/* A buffered reader over a shard for the header scan. */
typedef struct scanbuf {
    stk__file *f;
    uint8_t *buf;
    uint64_t at; /* file offset of buf[0] */
    size_t len;
    size_t cap; /* bytes of buf: SCAN_BUF, or SCAN_REMOTE for a remote shard */
} scanbuf;

/* The n bytes at off (n <= SCAN_BUF) in *out, or the byte source's status and message. */
static stk_status scan_get(scanbuf *sb, uint64_t off, size_t n, const uint8_t **out, char *err,
                           size_t err_size)
{
    *out = NULL;
    if (off >= sb->at && off + n <= sb->at + sb->len) {
        *out = sb->buf + (off - sb->at);
        return STK_OK;
    }
    /* after skipping data (a member larger than the buffer), read little: big members mean the
     * next header is likely followed by another big member; after a contiguous run, read a lot */
    bool skipped = sb->len && off > sb->at + sb->len;
    size_t window = sb->cap > SCAN_BUF ? sb->cap : skipped ? SCAN_SMALL : SCAN_BUF;
    size_t want = (size_t)STK_MIN((uint64_t)window, sb->f->size - off);
    if (want < n)
        want = n; /* the caller checked that n bytes exist */
    stk_status rc = stk__vfs_read(sb->f, off, sb->buf, want, err, err_size);
    if (rc < 0)
        return rc; /* the message names the file and the offset */
    sb->at = off;
    sb->len = want;
    *out = sb->buf;
    return STK_OK;
}

void stk__tar_members_free(stk__tar_members *ml)
{
    stk__free(ml->v);
    stk__free(ml->names);
    memset(ml, 0, sizeof(*ml));
}

static bool members_add(stk__tar_members *ml, uint64_t data_off, uint64_t size, const char *name,
                        size_t name_len, uint32_t gz_size)
{
    if (ml->n == ml->cap) {
        size_t cap = ml->cap ? ml->cap * 2 : 256;
        stk__tar_member *v = stk__realloc(ml->v, cap * sizeof(*v));
        if (!v)
            return false;
        ml->v = v;
        ml->cap = cap;
    }
    if (!ml->names || ml->names_len + name_len > ml->names_cap) {
        size_t cap = STK_MAX(ml->names_cap * 2, ml->names_len + name_len + 4096);
        char *p = stk__realloc(ml->names, cap);
        if (!p)
            return false;
        ml->names = p;
        ml->names_cap = cap;
    }
    memcpy(ml->names + ml->names_len, name, name_len);
    ml->v[ml->n++] =
        (stk__tar_member){data_off, size, (uint32_t)ml->names_len, (uint32_t)name_len, gz_size};
    ml->names_len += name_len;
    return true;
}

/* The first PAX record of data (n bytes) whose key is `key` (or, with `prefix`, starts with
 * it): its value, or NULL; *vlen its length. *bad when a record is malformed. */
static const char *pax_find(const char *data, size_t n, const char *key, bool prefix, size_t *vlen,
                            bool *bad)
{
    size_t i = 0, klen = strlen(key);
    while (i < n) {
        size_t len = 0, j = i;
        while (j < n && data[j] >= '0' && data[j] <= '9' && len < n)
            len = len * 10 + (size_t)(data[j++] - '0');
        if (j == i || j >= n || data[j] != ' ' || len < j - i + 2 || len > n - i) {
            *bad = true;
            return NULL;
        }
        const char *rec = data + j + 1, *end = data + i + len - 1; /* end: the '\n' */
        if ((size_t)(end - rec) > klen && memcmp(rec, key, klen) == 0 &&
            (prefix || rec[klen] == '=')) {
            const char *eq = memchr(rec, '=', (size_t)(end - rec));
            if (eq) {
                *vlen = (size_t)(end - eq) - 1;
                return eq + 1;
            }
        }
        i += len;
    }
    return NULL;
}

/* The value of PAX record `key`, as pax_find. */
static const char *pax_value(const char *data, size_t n, const char *key, size_t *vlen, bool *bad)
{
    return pax_find(data, n, key, false, vlen, bad);
}

/* One scan of the shard's headers into ml. */
stk_status stk__tar_scan(stk__file *f, stk__tar_members *ml, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    const char *path = f->path;
    /* a remote shard is read in large windows whatever the members' sizes: one request per
     * member header would cost a round trip per sample (the block cache, when set, rounds the
     * windows up to its blocks anyway) */
    size_t cap = f->vfs == &stk__vfs_posix ? SCAN_BUF : SCAN_REMOTE;
    scanbuf sb = {f, stk__malloc(cap), 0, 0, cap};
    char *longname = NULL, *pax = NULL;
    size_t longname_len = 0, pax_path_len = 0;
    const char *pax_path = NULL;
    uint64_t pax_size = UINT64_MAX;
    bool pax_sparse = false; /* the member's PAX header has GNU.sparse.* records */
    char name[256 + 2];
    if (!sb.buf)
        STK_FAIL_E(STK_ENOMEM, "%s: out of memory indexing the tar", path);
    uint64_t off = 0;
    while (off < f->size) {
        if (f->size - off < STK__TAR_BLOCK)
            STK_FAIL_E(STK_EFORMAT,
                       "%s: truncated tar: %" PRIu64 " stray bytes at byte %" PRIu64
                       " (a header is 512 bytes)",
                       path, f->size - off, off);
        const uint8_t *h;
        STK_TRY(scan_get(&sb, off, STK__TAR_BLOCK, &h, err, err_size));
        if (all_zero(h, STK__TAR_BLOCK))
            break; /* end of archive */
        if (!stk__tar_checksum_ok(h))
            STK_FAIL_E(STK_EFORMAT, "%s: %s at byte %" PRIu64 " (bad tar header checksum)", path,
                       off == 0 ? "not a tar file" : "corrupt tar header", off);
        uint64_t size;
        if (!stk__tar_number(h + 124, 12, &size))
            STK_FAIL_E(STK_EFORMAT, "%s: corrupt tar header at byte %" PRIu64 " (size field)", path,
                       off);
        char type = (char)h[156];
        if (pax_size != UINT64_MAX && type != 'x' && type != 'g' && type != 'L')
            size = pax_size;
        uint64_t data_off = off + STK__TAR_BLOCK;
        /* name of this header as written (prefix/name for POSIX ustar) */
        size_t nl = strnlen((const char *)h, 100);
        if (memcmp(h + 257, "ustar\0", 6) == 0 && h[345]) {
            size_t pl = strnlen((const char *)h + 345, 155);
            memcpy(name, h + 345, pl);
            name[pl] = '/';
            memcpy(name + pl + 1, h, nl);
            nl += pl + 1;
        } else {
            memcpy(name, h, nl);
        }
        name[nl] = '\0';
        const char *mname = pax_path ? pax_path : longname ? longname : name;
        size_t mlen = pax_path ? pax_path_len : longname ? longname_len : nl;
        if (size > f->size - data_off)
            STK_FAIL_E(STK_EFORMAT,
                       "%s: truncated tar: member '%.*s' at byte %" PRIu64 " needs %" PRIu64
                       " bytes of data but the file ends %" PRIu64 " bytes after its header",
                       path, (int)STK_MIN(mlen, 200), mname, off, size, f->size - data_off);
        uint64_t next = data_off + STK_ALIGN_UP(size, STK__TAR_BLOCK);
        if (next > f->size)
            STK_FAIL_E(STK_EFORMAT,
                       "%s: truncated tar: the file ends inside the padding of member '%.*s' at "
                       "byte %" PRIu64 " (later members are lost)",
                       path, (int)STK_MIN(mlen, 200), mname, off);
        if (type == 'L' || type == 'x') {
            if (size > (type == 'L' ? MAX_LONGNAME : MAX_PAX))
                STK_FAIL_E(STK_ELIMIT, "%s: %s header at byte %" PRIu64 " of %" PRIu64 " bytes",
                           path, type == 'L' ? "GNU long-name" : "PAX", off, size);
            char *buf = stk__malloc((size_t)size + 1);
            if (!buf)
                STK_FAIL_E(STK_ENOMEM, "%s: out of memory indexing the tar", path);
            rc = stk__vfs_read(f, data_off, buf, (size_t)size, err, err_size);
            if (rc < 0) {
                stk__free(buf);
                goto fail;
            }
            buf[size] = '\0';
            if (type == 'L') {
                stk__free(longname);
                longname = buf;
                longname_len = strnlen(buf, (size_t)size);
            } else {
                /* A second PAX header before one member replaces the first: its path pointed
                 * into the buffer freed here (a use after free found by fuzzing). */
                stk__free(pax);
                pax = buf;
                pax_path = NULL;
                pax_size = UINT64_MAX;
                bool bad = false;
                size_t vl = 0;
                /* GNU tar's PAX sparse formats (0.0, 0.1, 1.0): the map is in these records or
                 * in the data, which is not the file's bytes (issue 30) */
                pax_sparse = pax_find(pax, (size_t)size, "GNU.sparse.", true, &vl, &bad) != NULL;
                const char *v = pax_value(pax, (size_t)size, "path", &vl, &bad);
                if (v) {
                    pax_path = v;
                    pax_path_len = vl;
                }
                v = pax_value(pax, (size_t)size, "size", &vl, &bad);
                if (v) {
                    char *end;
                    char num[32];
                    snprintf(num, sizeof(num), "%.*s", (int)STK_MIN(vl, 31), v);
                    errno = 0;
                    unsigned long long ps = strtoull(num, &end, 10);
                    if (end == num || *end || errno)
                        bad = true;
                    pax_size = ps;
                }
                if (bad)
                    STK_FAIL_E(STK_EFORMAT, "%s: corrupt PAX header at byte %" PRIu64, path, off);
            }
            off = next;
            continue;
        }
        if (type == 'S' || (pax_sparse && type != 'g'))
            STK_FAIL_E(STK_ENOTSUP,
                       "%s: member '%.*s' at byte %" PRIu64
                       ": sparse file (%s): not supported; make the tar without --sparse",
                       path, (int)STK_MIN(mlen, 200), mname, off,
                       type == 'S' ? "GNU" : "PAX GNU.sparse records");
        if (type == '0' || type == '\0' || type == '7') {
            if (size >= UINT32_MAX)
                STK_FAIL_E(STK_ENOTSUP,
                           "%s: member '%.*s' at byte %" PRIu64 " is %" PRIu64
                           " bytes (members of 4 GiB or more are not supported)",
                           path, (int)STK_MIN(mlen, 200), mname, off, size);
            uint32_t gz_size = STK__TAR_NOT_GZ;
            if (mlen > 3 && mname[mlen - 3] == '.' && (mname[mlen - 2] | 0x20) == 'g' &&
                (mname[mlen - 1] | 0x20) == 'z') {
                const uint8_t *t = NULL;
                if (size >= GZ_MIN)
                    STK_TRY(scan_get(&sb, data_off + size - 4, 4, &t, err, err_size));
                gz_size = t ? stk__ld32(t) : 0;
                if (gz_size == STK__TAR_NOT_GZ)
                    gz_size = 0; /* 4 GiB - 1 gunzipped: over any field's limit anyway */
                /* deflate expands at most 1032:1: a trailer claiming more lies, and believing
                 * it would size buffers (and the loader's slots) by the lie (the fuzz campaign
                 * found a 3.5 GB allocation from a 10 KB shard). Like the 4 GiB case, it becomes
                 * 0: reading the member then fails, naming it, as any corrupt member does. */
                if ((uint64_t)gz_size > size * GZ_MAX_RATIO)
                    gz_size = 0;
            }
            if (!members_add(ml, data_off, size, mname, mlen, gz_size))
                STK_FAIL_E(STK_ENOMEM, "%s: out of memory indexing the tar", path);
        }
        /* 'g' global headers, directories, links, devices: nothing to read */
        pax_path = NULL;
        pax_size = UINT64_MAX;
        pax_sparse = false;
        stk__free(longname);
        longname = NULL;
        off = next;
    }
fail:
    stk__free(sb.buf);
    stk__free(longname);
    stk__free(pax);
    return rc;
}

/* ---- reading a member ---- */

/* Gunzip one gzip stream (n bytes) into exactly out_size bytes (its trailer's ISIZE): anything
 * else (not gzip, corrupt, a different length, bytes after the stream) is STK_EFORMAT. */
static stk_status gunzip(const uint8_t *in, size_t n, uint8_t *out, size_t out_size,
                         const char *where, char *err, size_t err_size)
{
    z_stream z;
    memset(&z, 0, sizeof(z));
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
        return stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory for zlib", where);
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)n;
    z.next_out = out_size ? out : (Bytef *)&z; /* zlib wants a pointer even for 0 bytes */
    z.avail_out = (uInt)out_size;
    int zr = inflate(&z, Z_FINISH);
    bool done = zr == Z_STREAM_END && z.total_out == out_size && z.avail_in == 0;
    const char *zmsg = z.msg;
    inflateEnd(&z);
    if (zr == Z_MEM_ERROR)
        return stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory gunzipping", where);
    if (done)
        return STK_OK;
    if (zr == Z_STREAM_END && z.avail_in)
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "%s: %u bytes after the gzip stream (one stream per member)", where,
                              z.avail_in);
    if (zr == Z_BUF_ERROR && z.avail_out == 0)
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "%s: gunzips to more than the %zu bytes its gzip trailer says", where,
                              out_size);
    return stk__set_error(err, err_size, STK_EFORMAT, "%s: not valid gzip data (zlib: %s)", where,
                          zmsg                 ? zmsg
                          : zr == Z_STREAM_END ? "size differs from the trailer"
                                               : "truncated stream");
}

stk_status stk__tar_member_bytes(stk__file *f, uint64_t data_off, uint32_t size, uint32_t gz_size,
                                 const char *where, uint8_t **out, size_t *n, char *err,
                                 size_t err_size)
{
    uint8_t hdr[STK__TAR_BLOCK];
    uint8_t *raw = stk__malloc(size ? size : 1), *plain = NULL;
    stk_status rc = STK_OK;
    uint64_t hsize;
    *out = NULL;
    if (!raw)
        STK_FAIL_E(STK_ENOMEM, "%s: out of memory for a %" PRIu32 "-byte member", where, size);
    stk__iov iov[2] = {{hdr, STK__TAR_BLOCK}, {raw, size}};
    rc = f->vfs->read(f, data_off - STK__TAR_BLOCK, iov, 2, err, err_size);
    if (rc < 0) {
        rc = stk__source_read_error(rc, where, f->path, err, err_size);
        goto fail;
    }
    if (!stk__tar_checksum_ok(hdr) || !stk__tar_number(hdr + 124, 12, &hsize) || hsize != size)
        STK_FAIL_E(STK_EFORMAT,
                   "%s: the tar header at byte %" PRIu64 " does not match the index: the shard "
                   "changed after it was indexed (reopen the dataset)",
                   where, data_off - STK__TAR_BLOCK);
    if (gz_size == STK__TAR_NOT_GZ) {
        *out = raw;
        *n = size;
        return STK_OK;
    }
    plain = stk__malloc(gz_size ? gz_size : 1);
    if (!plain)
        STK_FAIL_E(STK_ENOMEM, "%s: out of memory gunzipping to %" PRIu32 " bytes", where, gz_size);
    STK_TRY(gunzip(raw, size, plain, gz_size, where, err, err_size));
    *out = plain;
    *n = gz_size;
    plain = NULL;
fail:
    stk__free(plain);
    if (*out != raw)
        stk__free(raw);
    return rc;
}

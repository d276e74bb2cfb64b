/*
 * stk_tar.h: tar archives for the WebDataset source (stk_src_wds.c): the header fields, one scan
 * of a shard's headers into its list of regular members (stk_tar.c), and the member-list cache
 * that saves the scan on the next open (stk_tar_index.c). Knows nothing of samples or fields.
 */
#ifndef STK_TAR_H
#define STK_TAR_H

#include "io/stk_vfs.h"

#define STK__TAR_BLOCK 512
#define STK__TAR_NOT_GZ UINT32_MAX /* stk__tar_member.gz_size of a member not named *.gz */

/* One regular member of a shard (the cache holds exactly these). */
typedef struct stk__tar_member {
    uint64_t data_off, size;     /* size < 4 GiB (larger members are refused) */
    uint32_t name_off, name_len; /* in the list's names */
    /* A member named *.gz (any case): the last 4 bytes of its data, the gzip trailer's ISIZE
     * (the gunzipped size mod 2^32; 0 when the member is too short to be gzip); else
     * STK__TAR_NOT_GZ. Read during the scan, where they are almost always in its buffer. */
    uint32_t gz_size;
} stk__tar_member;

/* Growable members + names of one shard. */
typedef struct stk__tar_members {
    stk__tar_member *v;
    size_t n, cap;
    char *names;
    size_t names_len, names_cap;
} stk__tar_members;

void stk__tar_members_free(stk__tar_members *ml);

/* An octal (or GNU base-256) number field of n bytes; false when malformed. */
bool stk__tar_number(const uint8_t *p, size_t n, uint64_t *out);

/* Whether the 512-byte header's checksum (unsigned or signed sum) matches. */
bool stk__tar_checksum_ok(const uint8_t *h);

/* Whether the header carries the ustar magic. */
bool stk__tar_is_ustar(const uint8_t *h);

/* One scan of the shard's headers into ml (ustar, GNU 'L' long names, PAX 'x' path=/size=; 'g'
 * global headers, directories, links skipped). Errors name the shard, the member and the byte
 * offset: a bad header checksum, a truncated member, sparse members, members of 4 GiB or more. */
stk_status stk__tar_scan(stk__file *f, stk__tar_members *ml, char *err, size_t err_size);

/* The members of an open shard: from its valid cache, else by a scan (then cached when it can
 * be); *from_cache says which. */
stk_status stk__tar_index(stk__file *f, stk__tar_members *ml, bool *from_cache, char *err,
                          size_t err_size);

/* A member's data (gunzipped when gz_size is not STK__TAR_NOT_GZ) in a fresh buffer (*out, *n;
 * stk__free it), its tar header (at data_off - 512) checked to still describe it; `where` begins
 * each message. STK_EFORMAT (the header changed, not gzip, corrupt, another size than the
 * trailer's, bytes after the stream), STK_EIO, STK_ENOMEM. */
stk_status stk__tar_member_bytes(stk__file *f, uint64_t data_off, uint32_t size, uint32_t gz_size,
                                 const char *where, uint8_t **out, size_t *n, char *err,
                                 size_t err_size);

#endif /* STK_TAR_H */

/*
 * stk_format.h: the on-disk layout of a `.stk` shard, version 1 (docs/format.md is the
 * spec; this header is its C mirror). Every integer is little-endian and is read and written
 * through the load/store helpers below, never through a cast struct, so the code is independent
 * of host byte order and of struct padding.
 *
 *   [header][pad to align][record 0][pad][record 1]...[pad to 8][index][footer]
 *
 * Used by the reader (stk_src_stk.c, beside it), the writer (src/format/stk_writer.c) and the fuzz
 * harness (which repairs checksums of mutated inputs to reach the index validation); nothing else
 * should need it.
 */
#ifndef STK_FORMAT_H
#define STK_FORMAT_H

#include "common/stk_endian.h"

#include <stdint.h>
#include <string.h>

#define STK_FMT_VERSION 1u

/* ---- header: fixed part, then n_fields schema entries, metadata, zero pad, checksum ---- */
#define STK_FMT_MAGIC "STOKER\0\1" /* 8 bytes, the NUL included */
#define STK_FMT_MAGIC_SIZE 8
#define STK_FMT_H_VERSION 8      /* u32 format version */
#define STK_FMT_H_HEADER_SIZE 12 /* u32 bytes of the header, checksum included, multiple of 8 */
#define STK_FMT_H_COUNT 16       /* u64 record count */
#define STK_FMT_H_DATA_OFFSET 24 /* u64 file offset of the data region (multiple of align) */
#define STK_FMT_H_N_FIELDS 32    /* u32 1..16 */
#define STK_FMT_H_ALIGN 36       /* u32 record alignment, a power of two */
#define STK_FMT_H_META_SIZE 40   /* u32 bytes of metadata JSON (no NUL) */
#define STK_FMT_H_FLAGS 44       /* u32 reserved, 0 */
#define STK_FMT_H_FIXED 48       /* first schema entry */

/* Schema entry, 80 bytes. */
#define STK_FMT_F_NAME 0   /* char[32], NUL-terminated, NUL-padded */
#define STK_FMT_F_KIND 32  /* u32 stk_field_kind */
#define STK_FMT_F_DTYPE 36 /* u32 stk_dtype */
#define STK_FMT_F_NDIM 40  /* u32 */
#define STK_FMT_F_RSVD 44  /* u32 reserved, 0 */
#define STK_FMT_F_SHAPE 48 /* i64[4], unused dims 0 */
#define STK_FMT_FIELD_SIZE 80

#define STK_FMT_MAX_META (64u << 20) /* readers refuse larger metadata */
#define STK_FMT_MAX_ALIGN (1u << 20)

/* ---- index: fixed part, per-field maxima, then one entry per record ---- */
#define STK_FMT_INDEX_MAGIC "STKINDX\0"
#define STK_FMT_I_COUNT 8       /* u64 records (= header count) */
#define STK_FMT_I_N_FIELDS 16   /* u32 (= header n_fields) */
#define STK_FMT_I_RSVD 20       /* u32 reserved, 0 */
#define STK_FMT_I_MAX_RECORD 24 /* u64 largest record size */
#define STK_FMT_I_FIXED 32      /* then u64 field_max[n_fields], then the entries */

/* Record entry: u64 offset, u64 XXH3-64 of the record bytes, u32 size of each field, zero pad
 * to a multiple of 8. */
#define STK_FMT_E_OFFSET 0
#define STK_FMT_E_CHECKSUM 8
#define STK_FMT_E_SIZES 16

/* ---- footer: the last 64 bytes of the file ---- */
#define STK_FMT_FOOTER_SIZE 64
#define STK_FMT_T_INDEX_OFFSET 0 /* u64 */
#define STK_FMT_T_INDEX_SIZE 8   /* u64 */
#define STK_FMT_T_INDEX_SUM 16   /* u64 XXH3-64 of the index bytes */
#define STK_FMT_T_COUNT 24       /* u64 records */
#define STK_FMT_T_HEADER_SUM 32  /* u64 copy of the header checksum (ties footer to header) */
#define STK_FMT_T_VERSION 40     /* u32 format version */
#define STK_FMT_T_RSVD 44        /* u32 reserved, 0 */
#define STK_FMT_T_SUM 48         /* u64 XXH3-64 of footer bytes 0..47 */
#define STK_FMT_T_MAGIC 56       /* "STKEND\0\1" */
#define STK_FMT_FOOTER_MAGIC "STKEND\0\1"

/* Bytes of one index entry for a schema of n_fields fields. */
static inline uint64_t stk__fmt_entry_size(uint32_t n_fields)
{
    return (16u + 4u * (uint64_t)n_fields + 7u) & ~(uint64_t)7;
}

/* Bytes of the header for n_fields fields and meta_size bytes of metadata. */
static inline uint64_t stk__fmt_header_size(uint32_t n_fields, uint64_t meta_size)
{
    uint64_t body = STK_FMT_H_FIXED + (uint64_t)n_fields * STK_FMT_FIELD_SIZE + meta_size;
    return ((body + 7u) & ~(uint64_t)7) + 8u;
}

/* Bytes of the index before the entries. */
static inline uint64_t stk__fmt_index_fixed(uint32_t n_fields)
{
    return STK_FMT_I_FIXED + 8u * (uint64_t)n_fields;
}

/* A packed directory's manifest (docs/format.md "Directories"): written last by stk_pack and
 * renamed into place, it is the commit point of the whole dataset. */
#define STK_MANIFEST_NAME "stoker-manifest.json"
#define STK_MANIFEST_VERSION 1
/* Suffix of a shard written by stk_pack that is not yet (or just) committed: readers of a
 * manifest-less directory never see it; a manifest naming "X.stk" accepts "X.stk.part". */
#define STK_PART_SUFFIX ".part"

/* fsync the directory holding `path`, so a rename in it survives a crash (best effort;
 * stk_writer.c). */
void stk__fsync_parent(const char *path);

#endif /* STK_FORMAT_H */

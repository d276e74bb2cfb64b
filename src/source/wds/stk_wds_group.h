/*
 * stk_wds_group.h: grouping a WebDataset shard's tar members into samples (stk_wds_group.c),
 * between the tar scan (stk_tar.c) and the source (stk_src_wds.c). Private to src/source.
 */
#ifndef STK_WDS_GROUP_H
#define STK_WDS_GROUP_H

#include "source/stk_source.h"
#include "source/wds/stk_tar.h"

/* Extension names seen so far (index = provisional field id). */
typedef struct stk__wds_extset {
    char name[STK_MAX_FIELDS][STK_MAX_NAME];
    size_t n;
} stk__wds_extset;

/* Temporary per-record member range while the shards are grouped. */
typedef struct stk__wds_tmprec {
    uint32_t shard;
    uint32_t first;            /* first member in b->mems */
    uint32_t key_off, key_len; /* in the shard's keys */
    uint32_t n;
} stk__wds_tmprec;

/* A tmp member: data offset, size, provisional field id. */
typedef struct stk__wds_tmpmem {
    uint64_t data_off;
    uint32_t size;
    uint8_t ext;
    uint32_t gz_size; /* STK__TAR_NOT_GZ: not gzipped */
} stk__wds_tmpmem;

typedef struct stk__wds_builder {
    stk__wds_tmprec *recs;
    size_t n_recs, cap_recs;
    stk__wds_tmpmem *mems;
    size_t n_mems, cap_mems;
    stk__wds_extset ext;
} stk__wds_builder;

/* Group one shard's members (ml, of shard s at `path`) into samples appended to b: each key's
 * members adjacent, one per extension; the keys go back to back into *keys_out (stk__malloc)
 * and their number to *count. STK_EFORMAT (a key split across the shard, two members of one
 * extension, a bad extension) naming the shard, key and byte offset; STK_ENOMEM. */
stk_status stk__wds_group_shard(stk__wds_builder *b, uint32_t s, const char *path,
                                const stk__tar_members *ml, char **keys_out, uint64_t *count,
                                char *err, size_t err_size);

#endif

/*
 * stk_lmdb_check.h: the structural check of an LMDB data file that runs before liblmdb maps it
 * (stk_lmdb_check.c).
 */
#ifndef STK_LMDB_CHECK_H
#define STK_LMDB_CHECK_H

#include "stk_internal.h"

/* Check `file` (an LMDB data.mdb) as liblmdb will read it: meta pages, page size, every
 * branch/leaf page of the main database inside the file and consistent, every value's overflow
 * pages inside the file, the entry count. `name` is what messages name (the dataset argument).
 * STK_OK; STK_EFORMAT naming the page and what is wrong; STK_ENOTSUP for duplicate-key
 * (MDB_DUPSORT) databases or another data version; STK_EIO, STK_ENOMEM. */
stk_status stk__lmdb_check(const char *file, const char *name, char *err, size_t err_size);

#endif

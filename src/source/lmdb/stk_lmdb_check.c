/*
 * stk_lmdb_check.c: check an LMDB data file's structure before liblmdb maps it.
 *
 * liblmdb trusts its file: a page size of 0 in the meta page divides by zero inside
 * mdb_env_open, and a page number past the end of the file is a read past the end of the map
 * (SIGBUS). Both were found by fuzzing `stoker inspect` on hostile files. So, before
 * mdb_env_open, this reads the two meta pages and walks the main database's B-tree through the
 * byte source, as liblmdb will later: every page it would touch lies inside the file and says
 * what it is, every node lies inside its page, every value's overflow pages lie inside the
 * file, every leaf is at the depth the meta page states, and the leaves hold exactly the number
 * of entries it states. The walk reads the branch and leaf pages once (the keys, which the
 * source's index reads anyway), never the values' overflow pages.
 *
 * The on-disk layout (little-endian, 64-bit builds of LMDB 0.9, as Debian's):
 *   page header (16 bytes): pgno u64, pad u16, flags u16, lower u16, upper u16
 *     (overflow pages: a u32 count of pages in place of lower/upper)
 *   meta (at offset 16 of pages 0 and 1): magic u32 0xBEEFC0DE, version u32 1, address u64,
 *     mapsize u64, dbs[2] (free, main) of 48 bytes: pad u32 (the page size in the free DB's),
 *     flags u16, depth u16, branch/leaf/overflow page counts u64, entries u64, root u64; then
 *     last_pg u64, txnid u64. The meta with the larger txnid is current.
 *   node (at the page offsets stored after the header): lo u16, hi u16, flags u16, ksize u16,
 *     key; in a leaf the data size is lo|hi<<16 and the data follows the key (or, with
 *     F_BIGDATA, the u64 number of its first overflow page); in a branch the child's page
 *     number is lo|hi<<16|flags<<32.
 * See ../shared/reference/formats.md (LMDB) and docs/formats.md.
 */
#include "source/lmdb/stk_lmdb_check.h"

#include "common/stk_endian.h"
#include "source/stk_source.h"

#include <inttypes.h>
#include <string.h>

#define PAGEHDR 16u
#define NODEHDR 8u
#define META_MAGIC 0xBEEFC0DEu
#define META_VERSION 1u
#define MAX_DEPTH 64u /* a B-tree of 2^64 keys is far shallower */

#define P_BRANCH 0x01u
#define P_LEAF 0x02u
#define P_OVERFLOW 0x04u
#define P_META 0x08u
#define P_LEAF2 0x20u
#define P_SUBP 0x40u

#define F_BIGDATA 0x01u
#define F_SUBDATA 0x02u
#define F_DUPDATA 0x04u

/* The main DB's flags that change only how keys compare (REVERSEKEY, INTEGERKEY). */
#define DB_KEY_FLAGS 0x0au

typedef struct lmcheck {
    stk__file *f;
    const char *name; /* for messages */
    uint32_t psize;
    uint64_t npages; /* whole pages in the file */
    uint64_t depth;  /* the main DB's, from the meta */
    uint64_t leaves; /* entries seen */
    uint64_t visited;
    uint8_t *page[MAX_DEPTH]; /* one buffer per level */
    char *err;
    size_t err_size;
} lmcheck;

static unsigned u16_at(const uint8_t *p)
{
    return (unsigned)p[0] | (unsigned)p[1] << 8;
}

static stk_status corrupt(lmcheck *c, uint64_t pgno, const char *what)
{
    return stk__set_error(c->err, c->err_size, STK_EFORMAT,
                          "%s: corrupt LMDB environment: page %" PRIu64 ": %s", c->name, pgno,
                          what);
}

static stk_status read_page(lmcheck *c, uint64_t pgno, uint8_t *buf)
{
    if (pgno >= c->npages)
        return stk__set_error(c->err, c->err_size, STK_EFORMAT,
                              "%s: corrupt LMDB environment: page %" PRIu64
                              " is past the end of the file (%" PRIu64 " pages)",
                              c->name, pgno, c->npages);
    STK_TRY_RET(stk__vfs_read(c->f, pgno * c->psize, buf, c->psize, c->err, c->err_size));
    if (stk__ld64(buf) != pgno)
        return corrupt(c, pgno, "its header names another page");
    return STK_OK;
}

/* Check a leaf node's data: inline within the page, or overflow pages within the file. */
static stk_status check_value(lmcheck *c, uint64_t pgno, const uint8_t *node, size_t room)
{
    unsigned flags = u16_at(node + 4);
    size_t ksize = u16_at(node + 6);
    uint64_t dsize = (uint64_t)u16_at(node) | (uint64_t)u16_at(node + 2) << 16;
    if (flags & F_DUPDATA)
        return corrupt(c, pgno, "a key with duplicate values (MDB_DUPSORT is not supported)");
    if (!(flags & F_BIGDATA))
        return NODEHDR + ksize + dsize <= room ? STK_OK : corrupt(c, pgno, "a value overruns it");
    if (NODEHDR + ksize + 8 > room)
        return corrupt(c, pgno, "a node overruns it");
    uint64_t ov = stk__ld64(node + NODEHDR + ksize);
    uint8_t hdr[PAGEHDR];
    if (ov >= c->npages)
        return corrupt(c, pgno, "a value's overflow page is past the end of the file");
    STK_TRY_RET(stk__vfs_read(c->f, ov * c->psize, hdr, sizeof(hdr), c->err, c->err_size));
    uint64_t n = stk__ld32(hdr + 12);
    if (stk__ld64(hdr) != ov || !(u16_at(hdr + 10) & P_OVERFLOW))
        return corrupt(c, ov, "not the overflow page a value points to");
    if (n == 0 || n > c->npages - ov || n * c->psize - PAGEHDR < dsize)
        return corrupt(c, ov, "a value's overflow pages are past the end of the file");
    return STK_OK;
}

static stk_status walk(lmcheck *c, uint64_t pgno, unsigned level)
{
    if (level >= c->depth || level >= MAX_DEPTH)
        return corrupt(c, pgno, "the tree is deeper than the meta page says");
    if (++c->visited > c->npages)
        return corrupt(c, pgno, "the tree visits more pages than the file has (a cycle)");
    uint8_t *p = c->page[level];
    STK_TRY_RET(read_page(c, pgno, p));
    unsigned flags = u16_at(p + 10), lower = u16_at(p + 12), upper = u16_at(p + 14);
    bool leaf = level + 1 == c->depth;
    if (flags & (P_LEAF2 | P_SUBP | P_META | P_OVERFLOW))
        return corrupt(c, pgno, "not a branch or leaf page");
    if (leaf ? !(flags & P_LEAF) : !(flags & P_BRANCH))
        return corrupt(c, pgno, leaf ? "a leaf expected at this depth" : "a branch expected");
    if (lower < PAGEHDR || lower > upper || upper > c->psize || (lower & 1))
        return corrupt(c, pgno, "its free-space bounds are inconsistent");
    unsigned n = (lower - PAGEHDR) / 2;
    if (!leaf && n == 0)
        return corrupt(c, pgno, "an empty branch page");
    for (unsigned i = 0; i < n; i++) {
        unsigned off = u16_at(p + PAGEHDR + 2 * i);
        if (off < upper || off > c->psize - NODEHDR || (off & 1))
            return corrupt(c, pgno, "a node offset outside the page");
        const uint8_t *node = p + off;
        size_t room = c->psize - off, ksize = u16_at(node + 6);
        if (NODEHDR + ksize > room)
            return corrupt(c, pgno, "a key overruns the page");
        if (leaf) {
            STK_TRY_RET(check_value(c, pgno, node, room));
            c->leaves++;
        } else {
            uint64_t child = (uint64_t)u16_at(node) | (uint64_t)u16_at(node + 2) << 16 |
                             (uint64_t)u16_at(node + 4) << 32;
            STK_TRY_RET(walk(c, child, level + 1));
            p = c->page[level]; /* unchanged: each level has its own buffer */
        }
    }
    return STK_OK;
}

/* The meta of page `which` (0 or 1) at `off`: its page size, txnid and main DB. */
typedef struct lmmeta {
    uint32_t psize;
    uint64_t txnid, last_pg;
    unsigned main_flags, main_depth;
    uint64_t main_entries, main_root;
} lmmeta;

static stk_status read_meta(lmcheck *c, uint64_t off, lmmeta *m)
{
    uint8_t b[PAGEHDR + 136];
    if (off + sizeof(b) > c->f->size)
        return stk__set_error(c->err, c->err_size, STK_EFORMAT,
                              "%s: not an LMDB environment (truncated: %" PRIu64 " bytes)", c->name,
                              c->f->size);
    STK_TRY_RET(stk__vfs_read(c->f, off, b, sizeof(b), c->err, c->err_size));
    const uint8_t *meta = b + PAGEHDR;
    if (!(u16_at(b + 10) & P_META) || stk__ld32(meta) != META_MAGIC)
        return stk__set_error(c->err, c->err_size, STK_EFORMAT,
                              "%s: not an LMDB environment (no meta page at byte %" PRIu64 ")",
                              c->name, off);
    if (stk__ld32(meta + 4) != META_VERSION)
        return stk__set_error(c->err, c->err_size, STK_ENOTSUP,
                              "%s: LMDB data version %" PRIu32 " (this build reads version %u)",
                              c->name, stk__ld32(meta + 4), META_VERSION);
    m->psize = stk__ld32(meta + 24);
    const uint8_t *db = meta + 24 + 48; /* the main DB */
    m->main_flags = u16_at(db + 4);
    m->main_depth = u16_at(db + 6);
    m->main_entries = stk__ld64(db + 32);
    m->main_root = stk__ld64(db + 40);
    m->last_pg = stk__ld64(meta + 120);
    m->txnid = stk__ld64(meta + 128);
    if (m->psize < 512 || m->psize > 65536 || (m->psize & (m->psize - 1)))
        return stk__set_error(c->err, c->err_size, STK_EFORMAT,
                              "%s: corrupt LMDB environment: page size %" PRIu32
                              " in the meta page at byte %" PRIu64,
                              c->name, m->psize, off);
    return STK_OK;
}

stk_status stk__lmdb_check(const char *file, const char *name, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    lmcheck c = {.name = name, .err = err, .err_size = err_size};
    STK_TRY(stk__vfs_open(file, &c.f, err, err_size));
    lmmeta m0, m1;
    STK_TRY(read_meta(&c, 0, &m0));
    STK_TRY(read_meta(&c, m0.psize, &m1));
    const lmmeta *m = m1.txnid > m0.txnid ? &m1 : &m0;
    c.psize = m->psize;
    c.npages = c.f->size / c.psize;
    if (m1.psize != m0.psize)
        STK_FAIL_E(STK_EFORMAT,
                   "%s: corrupt LMDB environment: the meta pages disagree on the "
                   "page size (%" PRIu32 ", %" PRIu32 ")",
                   name, m0.psize, m1.psize);
    if (m->last_pg >= c.npages) /* liblmdb would map past the end: SIGBUS at the first read */
        STK_FAIL_E(STK_EFORMAT,
                   "%s: truncated LMDB environment (%" PRIu64 " bytes; its last page, %" PRIu64
                   ", ends at byte %" PRIu64 ")",
                   name, c.f->size, m->last_pg, (m->last_pg + 1) * c.psize);
    if (m->main_flags & ~DB_KEY_FLAGS)
        STK_FAIL_E(STK_ENOTSUP,
                   "%s: the main database has flags 0x%x (duplicate keys, "
                   "MDB_DUPSORT, are not supported: one value per key)",
                   name, m->main_flags);
    if (m->main_depth == 0) {
        if (m->main_entries != 0)
            STK_FAIL_E(STK_EFORMAT,
                       "%s: corrupt LMDB environment: %" PRIu64 " entries in an "
                       "empty tree",
                       name, m->main_entries);
        goto fail; /* empty: nothing to walk */
    }
    c.depth = m->main_depth;
    if (c.depth > MAX_DEPTH)
        STK_FAIL_E(STK_EFORMAT, "%s: corrupt LMDB environment: a tree %" PRIu64 " levels deep",
                   name, c.depth);
    for (unsigned i = 0; i < c.depth; i++)
        if (!(c.page[i] = stk__malloc(c.psize)))
            STK_FAIL_E(STK_ENOMEM, "%s: out of memory", name);
    STK_TRY(walk(&c, m->main_root, 0));
    if (c.leaves != m->main_entries)
        STK_FAIL_E(STK_EFORMAT,
                   "%s: corrupt LMDB environment: the meta page says %" PRIu64
                   " entries, the tree holds %" PRIu64,
                   name, m->main_entries, c.leaves);
fail:
    for (unsigned i = 0; i < MAX_DEPTH; i++)
        stk__free(c.page[i]);
    stk__vfs_close(c.f);
    return rc;
}

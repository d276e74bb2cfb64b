/*
 * stk_tokahead.c: a worker's next rows read together. A loader's worker that takes several
 * tickets of a batch at once hands their rows here first (stk__tokds_prepare, the seam's
 * `prepare`); the reads of windows, random and packed rows of local files (a window's T + 1
 * ids; a packed row's runs of pieces, as read_packed makes them) are then made together into the
 * cursor's reads ahead, and each row's read (stk_tokrows.c) widens from there
 * instead of reading again. Mapped files (stk_mapped.h) are copied out of the page cache with no
 * system call, and each file's version is checked once after the copies; files not mapped
 * (the default without STOKER_MMAP=1, or the kernel would not) are read with one io_uring
 * submission. One pread a read costs a kernel entry a read, as much as copying a row's bytes out of
 * the page cache, and on this VM a system call a row also makes the next row's touches of a mapping
 * slower: copied or read together, one entry (the version check, or the submission) pays for
 * STK__TOK_AHEAD reads (bench/RESULTS.md, issue 26).
 *
 * Nothing here decides what a row holds: a read ahead is the same bytes the usual read would
 * read (matched by its first token and length), checked as the usual read checks its bytes (the
 * file still the version opened, once per file after the submission instead of once per read),
 * and any read that cannot be made ahead (no io_uring, a span across two files, a short or failed
 * read, a changed file, a column's corpus, more reads than fit) is made the usual way, which
 * reports its errors as before.
 */
#include "source/tokens/stk_tokens.h"

#include <string.h>

unsigned stk__tokds_prepare_max(const stk_dataset *ds)
{
    const stk__tokds *t = ds->impl;
    if (!t || t->c.col || t->o.mode == STK_TOKENS_DOCUMENTS)
        return 0;
    for (size_t i = 0; i < t->c.n_parts; i++)
        if (stk__vfs_fd(t->c.parts[i].f) < 0)
            return 0; /* remote files read ahead their own way */
    return STK__TOK_AHEAD_ROWS;
}

/* Whether every file with tokens is mapped (then the reads ahead are copies out of the maps). */
static bool all_mapped(const stk__tokcorpus *c)
{
    for (size_t i = 0; i < c->n_parts; i++)
        if (!c->parts[i].map && c->parts[i].count)
            return false;
    return true;
}

void stk__tokcur_ahead_free(stk__tokcur *cur)
{
    stk__uring_close(cur->ring); /* first: no read may still be landing in `ahead` */
    cur->ring = NULL;
    stk__free(cur->ahead);
    cur->ahead = NULL;
    cur->n_ahead = 0;
}

const uint8_t *stk__tokcur_ahead(stk__tokcur *cur, uint64_t first, uint64_t n)
{
    for (uint32_t k = 0; k < cur->n_ahead; k++)
        if (cur->ahead_first[k] == first && cur->ahead_n[k] == n) {
            cur->ahead_first[k] = UINT64_MAX; /* spent: a row is read once */
            return cur->ahead + (size_t)k * cur->ahead_row;
        }
    return NULL;
}

void stk__tokds_prepare(const stk_dataset *ds, stk__cursor *cursor, const stk__readkey *key,
                        const uint64_t *idx, unsigned n)
{
    const stk__tokds *t = ds->impl;
    const stk__tokcorpus *c = &t->c;
    stk__tokcur *cur = (stk__tokcur *)cursor;
    bool mapped = all_mapped(c);
    cur->n_ahead = 0;
    if (!cur->ahead) {
        if (cur->ring_tried || stk__tokds_prepare_max(ds) == 0)
            return;
        cur->ring_tried = true;
        cur->ahead_row = cur->buf_size; /* a row, or a packed row's run: what buf holds */
        cur->ahead = stk__malloc(STK__TOK_AHEAD * cur->ahead_row);
        cur->ring = cur->ahead && !mapped ? stk__uring_open(STK__TOK_AHEAD) : NULL;
        if (!cur->ahead || (!mapped && !cur->ring)) { /* none to be had: read as before */
            stk__tokcur_ahead_free(cur);
            return;
        }
    }
    if (!mapped && !cur->ring)
        return; /* the ring failed once: read as before from now on */
    static const stk__readkey zero = {0, 0, false};
    stk__uread r[STK__TOK_AHEAD];
    const stk__mapped *map[STK__TOK_AHEAD];
    uint64_t first[STK__TOK_AHEAD], count[STK__TOK_AHEAD];
    uint32_t m = 0;
    uint64_t cap = cur->buf_size / c->width; /* tokens a read may take (read_packed's) */
    for (unsigned k = 0; k < n && m < STK__TOK_AHEAD; k++) {
        if (idx[k] >= t->n_rows)
            continue;
        /* the reads row idx[k] makes: one for a window, the runs of a packed row */
        uint64_t piece = 0, end = 1;
        if (t->o.mode == STK_TOKENS_PACKED) {
            piece = t->pack.row[idx[k]];
            end = t->pack.row[idx[k] + 1];
        }
        while (piece < end && m < STK__TOK_AHEAD) {
            uint64_t at, len, off;
            if (t->o.mode == STK_TOKENS_PACKED) {
                piece = stk__tokds_packed_run(t, cap, piece, end, &at, &len);
            } else {
                at = stk__tokds_row_start(t, key ? key : &zero, idx[k]);
                len = (uint64_t)t->T + 1;
                piece = end;
            }
            const stk__tokpart *p;
            if (!stk__tokcorpus_locate(c, at, len, &p, &off))
                continue; /* across two files: the usual read joins them */
            r[m] = (stk__uread){stk__vfs_fd(p->f), (uint32_t)(len * c->width),
                                cur->ahead + m * cur->ahead_row, off, 0};
            map[m] = p->map;
            first[m] = at;
            count[m++] = len;
        }
    }
    if (m == 0)
        return;
    if (mapped) { /* copies out of the page cache: no system call (a cut file: the usual read) */
        char err[STK_ERRMSG_SIZE];
        for (uint32_t k = 0; k < m; k++)
            r[k].res =
                stk__mapped_read(map[k], r[k].off, r[k].buf, r[k].len, err, sizeof(err)) == STK_OK
                    ? (int32_t)r[k].len
                    : -1;
    } else if (stk__uring_reads(cur->ring, r, m) != STK_OK) {
        stk__tokcur_ahead_free(cur); /* the ring failed: read as before from now on */
        return;
    }
    /* After the reads, as every read checks (stk_vfs_posix.c): a file that changed since open
     * (rewritten in place, cut short) gives none of its rows here; their usual reads name it. */
    int checked_fd = -1;
    bool failed = false, unchanged = true;
    for (uint32_t k = 0; k < m; k++) {
        if (r[k].fd != checked_fd) { /* rows come file by file: mostly one check a prepare */
            const stk__tokpart *p;
            uint64_t off;
            stk__tokcorpus_locate(c, first[k], count[k], &p, &off);
            checked_fd = r[k].fd;
            unchanged = stk__vfs_fd_unchanged(p->f);
        }
        bool whole = unchanged && r[k].res == (int32_t)r[k].len;
        cur->ahead_first[k] = whole ? first[k] : UINT64_MAX; /* the usual read names the error */
        cur->ahead_n[k] = count[k];
        failed |= r[k].res < 0;
    }
    cur->n_ahead = m;
    if (failed && cur->ring) { /* an error (or a kernel without these reads): not again */
        stk__uring_close(cur->ring);
        cur->ring = NULL;
    }
}

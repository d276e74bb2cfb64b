/*
 * stk_tokpack.c: packing documents into rows of T positions, a pure function of the document
 * lengths, T and the rule (STK_TOKENS_PACKED; docs/tokens.md "Packing").
 *
 * Documents are taken in corpus order and cut into pieces: a document of L tokens gives
 * floor(L / T) pieces of T, each a row of its own, and a rest of L mod T, which is placed:
 *
 *   best fit   into the open row with the least room that still holds it (among equals, the one
 *              that reached that room last), else a new row. Rows are kept in buckets by their
 *              room (1..T-1) with a bitmap of non-empty buckets: O(T / 64) per piece.
 *   first fit  into the earliest opened row that holds it, else a new row: a max segment tree
 *              over the rows' room, O(log rows) per piece.
 *
 * Rows are numbered in the order they were opened; a row's pieces in the order they were put
 * there. Then a counting sort lays the pieces out row by row (seg, row[]). Memory: 16 bytes per
 * piece (+ 4 while packing) and 8 per row, plus the tree (first fit) or 12 bytes per row (best
 * fit) while packing: O(documents).
 */
#include "source/tokens/stk_tokens.h"

#include <inttypes.h>
#include <string.h>

#define NONE UINT32_MAX

void stk__tokpack_free(stk__tokpack *p)
{
    stk__free(p->seg);
    stk__free(p->row);
    memset(p, 0, sizeof(*p));
}

/* The rows being filled under best fit: buckets of rows by room. */
typedef struct bestfit {
    uint32_t T;
    uint32_t *room, *prev, *next; /* per row */
    uint32_t *head;               /* [T]: the bucket's last-arrived row, NONE when empty */
    uint64_t *bits;               /* non-empty buckets */
} bestfit;

static void bf_push(bestfit *b, uint32_t r)
{
    uint32_t c = b->room[r];
    b->prev[r] = NONE;
    b->next[r] = b->head[c];
    if (b->head[c] != NONE)
        b->prev[b->head[c]] = r;
    b->head[c] = r;
    b->bits[c / 64] |= 1ULL << (c % 64);
}

static void bf_pop(bestfit *b, uint32_t r)
{
    uint32_t c = b->room[r];
    if (b->prev[r] != NONE)
        b->next[b->prev[r]] = b->next[r];
    else
        b->head[c] = b->next[r];
    if (b->next[r] != NONE)
        b->prev[b->next[r]] = b->prev[r];
    if (b->head[c] == NONE)
        b->bits[c / 64] &= ~(1ULL << (c % 64));
}

/* The row with the least room >= len, or NONE. */
static uint32_t bf_find(const bestfit *b, uint32_t len)
{
    uint32_t words = b->T / 64 + 1;
    uint32_t w = len / 64;
    uint64_t m = b->bits[w] & (~0ULL << (len % 64));
    while (!m && ++w < words)
        m = b->bits[w];
    if (!m)
        return NONE;
    return b->head[w * 64 + (uint32_t)__builtin_ctzll(m)];
}

/* First fit: a max tree over `leaves` rows (a power of two), t[1] the root. */
static uint32_t ff_find(const uint32_t *t, uint64_t leaves, uint32_t len)
{
    if (t[1] < len)
        return NONE;
    uint64_t i = 1;
    while (i < leaves)
        i = t[2 * i] >= len ? 2 * i : 2 * i + 1;
    return (uint32_t)(i - leaves);
}

static void ff_set(uint32_t *t, uint64_t leaves, uint32_t r, uint32_t room)
{
    uint64_t i = leaves + r;
    t[i] = room;
    for (i /= 2; i >= 1; i /= 2)
        t[i] = STK_MAX(t[2 * i], t[2 * i + 1]);
}

stk_status stk__tokpack_build(const uint64_t *doc, uint64_t n_docs, uint32_t T, uint32_t packing,
                              stk__tokpack *out, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    memset(out, 0, sizeof(*out));
    uint32_t *where = NULL, *tree = NULL;
    bestfit b = {.T = T};
    uint64_t n_pieces = 0, tokens = 0;
    for (uint64_t d = 0; d < n_docs; d++) {
        uint64_t L = doc[d + 1] - doc[d];
        n_pieces += L / T + (L % T != 0);
        tokens += L;
    }
    if (n_pieces >= NONE)
        STK_FAIL_E(STK_ELIMIT, "%" PRIu64 " pieces of documents: over 2^32 rows", n_pieces);
    uint64_t leaves = 1;
    while (leaves < n_pieces)
        leaves *= 2;
    size_t np = (size_t)(n_pieces ? n_pieces : 1);
    if (!(where = stk__malloc(np * sizeof(*where))) ||
        !(out->seg = stk__malloc(np * sizeof(*out->seg))))
        goto oom;
    if (packing == STK_PACKING_FIRST_FIT) {
        if (!(tree = stk__calloc((size_t)(2 * leaves), sizeof(*tree))))
            goto oom;
    } else if (!(b.room = stk__malloc(np * sizeof(uint32_t))) ||
               !(b.prev = stk__malloc(np * sizeof(uint32_t))) ||
               !(b.next = stk__malloc(np * sizeof(uint32_t))) ||
               !(b.head = stk__malloc(((size_t)T + 1) * sizeof(uint32_t))) ||
               !(b.bits = stk__calloc((size_t)T / 64 + 1, sizeof(uint64_t)))) {
        goto oom;
    } else {
        memset(b.head, 0xff, ((size_t)T + 1) * sizeof(uint32_t));
    }
    /* Place every piece (in out->seg, in corpus order for now); where[k] = its row. */
    uint64_t k = 0;
    uint32_t rows = 0;
    for (uint64_t d = 0; d < n_docs; d++) {
        uint64_t L = doc[d + 1] - doc[d], full = L / T;
        uint32_t rest = (uint32_t)(L % T);
        for (uint64_t j = 0; j < full; j++, k++) { /* a whole row each (room 0: never chosen) */
            out->seg[k] = (stk__tokseg){doc[d] + j * T, T, j + 1 < full || rest};
            where[k] = rows++;
            if (tree)
                ff_set(tree, leaves, where[k], 0);
        }
        if (!rest)
            continue;
        out->seg[k] = (stk__tokseg){doc[d] + full * T, rest, 0};
        uint32_t r = tree ? ff_find(tree, leaves, rest) : bf_find(&b, rest);
        if (r == NONE) {
            r = rows++;
            if (tree) {
                ff_set(tree, leaves, r, T - rest);
            } else {
                b.room[r] = T - rest;
                bf_push(&b, r);
            }
        } else if (tree) {
            ff_set(tree, leaves, r, tree[leaves + r] - rest);
        } else {
            bf_pop(&b, r);
            b.room[r] -= rest;
            if (b.room[r])
                bf_push(&b, r);
        }
        where[k++] = r;
    }
    /* Lay the pieces out row by row, keeping their order within a row. */
    stk__tokseg *seg = stk__malloc(np * sizeof(*seg));
    if (!seg || !(out->row = stk__calloc((size_t)rows + 1, sizeof(uint64_t)))) {
        stk__free(seg);
        goto oom;
    }
    for (uint64_t i = 0; i < n_pieces; i++)
        out->row[where[i] + 1]++;
    for (uint32_t r = 0; r < rows; r++)
        out->row[r + 1] += out->row[r];
    for (uint64_t i = 0; i < n_pieces; i++) /* row[r] runs from row r's start to its end */
        seg[out->row[where[i]]++] = out->seg[i];
    for (uint32_t r = rows; r > 0; r--) /* so row[r] now holds row r + 1's start: shift back */
        out->row[r] = out->row[r - 1];
    out->row[0] = 0;
    stk__free(out->seg);
    out->seg = seg;
    out->n_seg = n_pieces;
    out->n_rows = rows;
    out->padding = (uint64_t)rows * T - tokens;
    goto done;
oom:
    rc = stk__set_error(err, err_size, STK_ENOMEM,
                        "out of memory packing %" PRIu64 " documents into rows of %u", n_docs, T);
fail:
    stk__tokpack_free(out);
done:
    stk__free(where);
    stk__free(tree);
    stk__free(b.room);
    stk__free(b.prev);
    stk__free(b.next);
    stk__free(b.head);
    stk__free(b.bits);
    return rc;
}

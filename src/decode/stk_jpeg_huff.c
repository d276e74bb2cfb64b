/*
 * stk_jpeg_huff.c: stoker's Huffman decoder for single-scan sequential JPEGs, in place of
 * libjpeg-turbo's (issue 29). Entropy decoding is two thirds of a sample's time on photographs
 * (perf: libjpeg-turbo 2.1's decode_mcu), the same in every epoch, and all of the strict check's
 * time in the first (the rows below the window are entropy-decoded only).
 *
 * How it plugs in: after jpeg_start_decompress, stk__jhuff_install replaces the method
 * c->entropy->decode_mcu (struct jpeg_entropy_decoder, jpegint.h) for that one image. libjpeg
 * calls it for every MCU it decodes (the coefficient controller, with blocks to fill) and skips
 * (jpeg_skip_scanlines, with NULL); everything else (IDCT, upsampling, the crop, markers after
 * the scan, jpeg_finish_decompress) stays libjpeg's. The entropy module is created again with
 * each image, so nothing stays installed.
 *
 * Exactness, by construction: the decoder accepts only a clean stream, and gives up (longjmp to
 * the caller, which decodes the image again from the start with libjpeg's own decoder) on
 * anything else: a bit sequence that is no code of the table, an MCU that needs bits beyond the
 * marker that ends its data (libjpeg: "premature end of data segment"), a restart marker missing
 * or out of sequence ("found marker 0x.. instead of RST.."), FF FF 00 in the data (libjpeg takes
 * it as one FF byte, the standard does not), data running into the end of the buffer. On a
 * clean stream the codes decode to one sequence of coefficients, which libjpeg computes the
 * same way (DC predictions reset at each restart, coefficients past the 63rd written where
 * libjpeg's jpeg_natural_order puts them: into the 63rd), and libjpeg emits no warning (its
 * entropy decoder warns only on those conditions; its "N extraneous bytes before marker" is
 * ignored in both modes). The source is left where libjpeg's would stop reading (at the marker
 * after the data, or before data it never needed), so jpeg_finish_decompress reads the same
 * markers. So a decode with this decoder gives libjpeg's pixels and libjpeg's verdict, in strict
 * and lenient mode alike. tests/unit/decode/test_jpeg_huff.c compares the two decoders'
 * statuses, messages and pixels on clean streams of every sampling (restart intervals, optimised
 * tables) and on 900 damaged ones; tests/fuzz/fuzz_jpeg.c does the same on every fuzzed input.
 * Files it does not take (progressive, arithmetic-coded, multi-scan, or data not followed by a
 * marker) are libjpeg's from the start.
 *
 * Speed: a 64-bit bit buffer refilled 4-7 bytes at a time when the next 8 bytes hold no 0xFF
 * (else byte by byte, with stuffing and markers). One lookup on the next FAST_BITS bits gives,
 * for AC, up to two symbols with their value bits (run, value, position, k's advance: on
 * photographs the average symbol with its value bits is under 5 bits), for DC a code and its
 * value; longer ones go a symbol at a time. The chain of dependent operations per lookup
 * (shift, load, shift) is what bounds a Huffman decoder; two symbols a lookup halve it per
 * symbol. libjpeg-turbo 2.1 decodes one symbol a lookup and its value bits in a second step.
 * Measured (bench/RESULTS.md, issue 29): 1.8-2.0x libjpeg's entropy decoding on photographs with
 * grain, 1.7-1.9x on the generated set. Tables are built from the file's DHT contents and kept
 * in a small cache keyed by those contents (most files use the same few tables; a file with
 * its own tables pays ~3% of its decode to build them).
 */
#include "stk_jpeg_huff.h"

#include <string.h>

#include <jerror.h>
#include <jpegint.h>

#define FAST_BITS 11
#define N_CACHED 8
#define MAX_BLOCKS 10 /* D_MAX_BLOCKS_IN_MCU */
#define RST0 0xD0     /* the restart markers RST0 .. RST7 */
#define RST7 0xD7

/* A Huffman table of the file (bits, huffval: the key) and its decoding tables, indexed by the
 * next FAST_BITS bits of the stream. */
typedef struct htable {
    bool used;
    bool ac;
    uint32_t stamp; /* last use, for replacement */
    uint8_t bits[17];
    uint8_t huffval[256];
    union {
        /* DC: where the prefix holds a whole code of length l and its s value bits (l + s <=
         * FAST_BITS), diff << 16 | (l + s); else 0 */
        int32_t dc[1 << FAST_BITS];
        /* AC: the prefix's first symbol (a code and its value bits), and the second where it
         * fits too, as ACE_* fields (coefficient offsets from the block position k, k's
         * advance, END when one of them ends the block); 0 where the first does not fit */
        uint64_t acs[1 << FAST_BITS];
    };
    /* the code of length l <= FAST_BITS that starts the prefix: l << 8 | symbol; 0 if longer */
    uint16_t fast[1 << FAST_BITS];
    int32_t maxcode[18]; /* as libjpeg's: the largest code of length l, -1 if none */
    int32_t valoffset[18];
} htable;

/* An ac[] entry: the bits both symbols take (or the first alone), the first coefficient's offset
 * from k (its run), the second's (run + 1 + run; or run + 1, a harmless zero, when there is
 * none), k's advance, whether the block ends, and the two values. */
#define ACE_LEN(e) ((int)((e)&31))
#define ACE_OFF1(e) ((int)(((e) >> 5) & 31))
#define ACE_OFF2(e) ((int)(((e) >> 10) & 31))
#define ACE_END (1u << 15)
#define ACE_ADV(e) ((int)(((e) >> 16) & 63))
#define ACE_V1(e) ((JCOEF)((e) >> 32))
#define ACE_V2(e) ((JCOEF)((e) >> 48))

struct stk__jhuff {
    htable cache[N_CACHED];
    uint32_t clock;
    uint64_t installed, gave_up; /* counts, for tests and benchmarks */
    /* this image's stream */
    const uint8_t *p, *end; /* next byte to read; end of the file */
    const uint8_t *marker;  /* the first 0xFF of the marker the data ran into, or NULL */
    const uint8_t *after;   /* the byte after that marker's code */
    int marker_code;
    uint64_t buf; /* next bits from the top; below them zeros, or the true bits that follow */
    int bits;     /* valid bits at the top of buf, fake ones included */
    int fake;     /* zero bits fed past the marker (the bottom `fake` of the valid ones) */
    int last_dc[MAX_COMPS_IN_SCAN];
    unsigned restart_interval, restarts_to_go;
    int next_restart;
    int blocks;
    const htable *dc[MAX_BLOCKS], *ac[MAX_BLOCKS];
    int comp[MAX_BLOCKS];
    bool dc_needed[MAX_BLOCKS], ac_needed[MAX_BLOCKS];
    jmp_buf *bail;
};

/* Zigzag to natural order, with libjpeg's 16 extra entries (63) for runs past the end. */
static const uint8_t natural[64 + 16] = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33,
    40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36,
    29, 22, 15, 23, 30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54,
    47, 55, 62, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63};

stk_status stk__jhuff_create(stk__jhuff **out)
{
    stk__jhuff *h = stk__calloc(1, sizeof(*h));
    if (!h)
        return STK_ENOMEM;
    *out = h;
    return STK_OK;
}

void stk__jhuff_destroy(stk__jhuff *h)
{
    stk__free(h);
}

/* Hand the image back to libjpeg (stk_jpeg.c decodes it again without this decoder). */
static void give_up(stk__jhuff *h) __attribute__((noreturn));
static void give_up(stk__jhuff *h)
{
    h->gave_up++;
    longjmp(*h->bail, STK__JHUFF_GAVE_UP);
}

/* v, the s value bits read as unsigned, as the signed coefficient they code (F.2.2.1). */
static inline int extend(int v, int s)
{
    return v < (1 << (s - 1)) ? v - (1 << s) + 1 : v;
}

/* Build t's decoding tables from its bits and huffval (libjpeg validated the table at
 * jpeg_start_decompress: codes that fit their lengths, DC symbols <= 15). An AC symbol is read
 * as libjpeg reads it: s = 0 with a run other than 15 ends the block (EOB; libjpeg stops on the
 * others too), ZRL is a run of 15 with value 0 (whose write of a zero is harmless). */
static void build(htable *t)
{
    int code = 0, p = 0;
    uint16_t huffcode[256];
    uint8_t huffsize[256];
    for (int l = 1; l <= 16; l++) {
        if (t->bits[l]) {
            t->valoffset[l] = p - code;
            for (int i = 0; i < t->bits[l]; i++) {
                huffcode[p] = (uint16_t)code++;
                huffsize[p++] = (uint8_t)l;
            }
            t->maxcode[l] = code - 1;
        } else {
            t->maxcode[l] = -1;
        }
        code <<= 1;
    }
    t->maxcode[17] = INT32_MAX;
    memset(t->fast, 0, sizeof(t->fast));
    for (int i = 0; i < p && huffsize[i] <= FAST_BITS; i++) {
        int l = huffsize[i], first = huffcode[i] << (FAST_BITS - l);
        for (int j = 0; j < 1 << (FAST_BITS - l); j++)
            t->fast[first + j] = (uint16_t)(l << 8 | t->huffval[i]);
    }
    /* one[q]: the first symbol of prefix q with its value bits, where they fit: value << 16 |
     * end << 12 | run << 8 | length (AC), value << 16 | length (DC); 0 where they do not */
    uint32_t one[1 << FAST_BITS];
    for (unsigned q = 0; q < 1u << FAST_BITS; q++) {
        unsigned e = t->fast[q];
        int l = (int)(e >> 8), sym = (int)(e & 0xFF), r = t->ac ? sym >> 4 : 0;
        int s = t->ac ? sym & 15 : sym, v = 0;
        bool end = t->ac && s == 0 && r != 15;
        if (!e || l + s > FAST_BITS) {
            one[q] = 0;
            continue;
        }
        if (s)
            v = extend((int)((q >> (FAST_BITS - l - s)) & ((1u << s) - 1)), s);
        one[q] = (uint32_t)(uint16_t)v << 16 | (end ? 1u << 12 : 0) | (uint32_t)(end ? 0 : r) << 8 |
                 (uint32_t)(l + s);
    }
    for (unsigned q = 0; q < 1u << FAST_BITS; q++) {
        uint32_t a = one[q];
        if (!t->ac) {
            t->dc[q] = (int32_t)a;
            continue;
        }
        if (!a) {
            t->acs[q] = 0;
            continue;
        }
        int l1 = (int)(a & 31), r1 = (int)(a >> 8 & 15);
        bool end = a & 1u << 12;
        /* the second symbol: the first of the rest of the prefix, if it lies within it */
        uint32_t b = end || l1 == FAST_BITS ? 0 : one[(q << l1) & ((1u << FAST_BITS) - 1)];
        int l2 = (int)(b & 31);
        if (l2 > FAST_BITS - l1)
            b = 0, l2 = 0;
        int r2 = (int)(b >> 8 & 15), off2 = l2 ? r1 + 1 + r2 : r1 + 1, adv = l2 ? off2 + 1 : r1 + 1;
        end = end || (b & 1u << 12);
        t->acs[q] = (uint64_t)(l1 + l2) | (uint64_t)r1 << 5 | (uint64_t)off2 << 10 |
                    (end ? ACE_END : 0) | (uint64_t)adv << 16 | (uint64_t)(a >> 16) << 32 |
                    (uint64_t)(b >> 16) << 48;
    }
}

/* The decoding tables of the file's table `src`: from the cache, else built into the slot
 * used longest ago. */
static const htable *table_for(stk__jhuff *h, const JHUFF_TBL *src, bool ac)
{
    int n = 0;
    for (int l = 1; l <= 16; l++)
        n += src->bits[l];
    htable *old = &h->cache[0];
    h->clock++;
    for (int i = 0; i < N_CACHED; i++) {
        htable *t = &h->cache[i];
        if (t->used && t->ac == ac && memcmp(t->bits + 1, src->bits + 1, 16) == 0 &&
            memcmp(t->huffval, src->huffval, (size_t)n) == 0) {
            t->stamp = h->clock;
            return t;
        }
        if (!t->used || t->stamp < old->stamp)
            old = t;
    }
    old->used = true;
    old->ac = ac;
    old->stamp = h->clock;
    memset(old->bits, 0, sizeof(old->bits));
    memcpy(old->bits + 1, src->bits + 1, 16);
    memset(old->huffval, 0, sizeof(old->huffval));
    memcpy(old->huffval, src->huffval, (size_t)n);
    build(old);
    return old;
}

/* Whether byte 0xFF occurs in x. */
static inline bool has_ff(uint64_t x)
{
    uint64_t y = ~x;
    return ((y - 0x0101010101010101ull) & ~y & 0x8080808080808080ull) != 0;
}

static inline uint64_t load_be64(const uint8_t *p)
{
    uint64_t x;
    memcpy(&x, p, 8);
    return __builtin_bswap64(x);
}

/* The first marker at or after p as libjpeg's reader sees it (FF 00 is a data byte, FF FF..
 * fill before a marker code), into h->marker, h->marker_code and h->after; gives up at FF FF 00
 * and at the end of the buffer. With `skip`, data bytes before it are passed over (a restart);
 * without, it must start at p. Returns whether it does. */
static bool find_marker(stk__jhuff *h, const uint8_t *p, bool skip)
{
    while (p < h->end) {
        if (*p != 0xFF) {
            if (!skip)
                return false;
            p++;
            continue;
        }
        const uint8_t *q = p + 1;
        while (q < h->end && *q == 0xFF)
            q++;
        if (q >= h->end)
            give_up(h);
        if (*q == 0) {
            if (q != p + 1)
                give_up(h); /* FF FF 00: libjpeg reads one FF data byte; not standard */
            if (!skip)
                return false;
            p = q + 1;
            continue;
        }
        h->marker = p;
        h->marker_code = *q;
        h->after = q + 1;
        return true;
    }
    give_up(h); /* install checked that a marker ends the data: not reached */
}

/* The bit reader's registers: the block decoders are inlined into decode_mcu, and the slow
 * paths take and return them by value, so that they stay in registers. */
typedef struct breg {
    uint64_t buf; /* next bits from the top; below them zeros, or the true bits that follow */
    int bits;     /* valid bits at the top of buf, fake ones included */
    const uint8_t *p, *end; /* next byte to read; end of the file */
} breg;

/* Refill byte by byte (0xFF bytes near, or fewer than 8 left): stuffed FF 00 is one FF; at a
 * marker, zero bits (counted in fake) stand for the data that is not there. Gives up when
 * earlier fake bits were already consumed. */
static __attribute__((noinline)) breg refill_slow(stk__jhuff *h, breg r)
{
    uint64_t buf = r.bits ? r.buf & (~0ull << (64 - r.bits)) : 0;
    int bits = r.bits;
    const uint8_t *p = r.p;
    while (bits <= 56) {
        if (h->marker) {
            if (bits < h->fake)
                give_up(h);
            h->fake += 64 - bits;
            bits = 64;
            break;
        }
        if (p >= h->end)
            give_up(h);
        unsigned c = *p;
        if (c == 0xFF) {
            if (find_marker(h, p, false))
                continue;
            p += 2; /* FF 00: one FF byte */
        } else {
            p++;
        }
        buf |= (uint64_t)c << (56 - bits);
        bits += 8;
    }
    return (breg){buf, bits, p, r.end};
}

/* At least 32 valid bits (a code and its value bits) in buf. */
#define REFILL()                                                                                   \
    do {                                                                                           \
        if (bits < 32) {                                                                           \
            uint64_t x_;                                                                           \
            if (p + 8 <= end && !has_ff(x_ = load_be64(p))) {                                      \
                buf |= x_ >> bits;                                                                 \
                p += (63 - bits) >> 3;                                                             \
                bits |= 56;                                                                        \
            } else {                                                                               \
                *r = refill_slow(h, *r);                                                           \
            }                                                                                      \
        }                                                                                          \
    } while (0)

#define DROP(n)                                                                                    \
    do {                                                                                           \
        buf <<= (n);                                                                               \
        bits -= (n);                                                                               \
    } while (0)

/* A code longer than FAST_BITS at the top of buf: its length << 8 | its symbol; gives up on a
 * bit sequence that is no code. */
static __attribute__((noinline)) int decode_long(stk__jhuff *h, uint64_t buf, const htable *t)
{
    int32_t code = (int32_t)(buf >> 48);
    for (int l = FAST_BITS + 1; l <= 16; l++) {
        int32_t c = code >> (16 - l);
        if (c <= t->maxcode[l])
            return l << 8 | t->huffval[(c + t->valoffset[l]) & 0xFF];
    }
    give_up(h);
}

/* The next symbol of table t, without its value bits (buf holds at least 16 valid bits). */
#define DECODE(sym, t)                                                                             \
    do {                                                                                           \
        int e_ = (t)->fast[buf >> (64 - FAST_BITS)];                                               \
        if (!e_)                                                                                   \
            e_ = decode_long(h, buf, (t));                                                         \
        (sym) = e_ & 0xFF;                                                                         \
        DROP(e_ >> 8);                                                                             \
    } while (0)

/* The s value bits at the top of buf as a coefficient, dropped. */
#define VALUE(v, s)                                                                                \
    do {                                                                                           \
        (v) = extend((int)(buf >> (64 - (s))), (s));                                               \
        DROP(s);                                                                                   \
    } while (0)

/* At a restart interval's end: the RSTn marker that must come next (after any data bytes left,
 * which libjpeg skips as extraneous), then a fresh segment. */
static void restart(stk__jhuff *h, const uint8_t *p)
{
    if (!h->marker)
        find_marker(h, p, true);
    if (h->marker_code != RST0 + h->next_restart)
        give_up(h);
    h->p = h->after;
    h->marker = NULL;
    h->buf = 0;
    h->bits = 0;
    h->fake = 0;
    h->next_restart = (h->next_restart + 1) & 7;
    memset(h->last_dc, 0, sizeof(h->last_dc));
    h->restarts_to_go = h->restart_interval;
}

#define buf (r->buf)
#define bits (r->bits)
#define p (r->p)
#define end (r->end)

/* One block's DC difference (AC tables are not looked at). */
static inline __attribute__((always_inline)) int decode_dc(stk__jhuff *h, breg *r, const htable *t)
{
    REFILL();
    int32_t e = t->dc[buf >> (64 - FAST_BITS)];
    if (__builtin_expect(e != 0, 1)) {
        DROP(e & 31);
        return e >> 16;
    }
    int s, v = 0;
    DECODE(s, t);
    if (s)
        VALUE(v, s);
    return v;
}

/* One block's AC coefficients into blk (zeroed), in natural order; or without `store`, only
 * read (libjpeg's two loops, with the same treatment of runs past the 63rd coefficient). Two
 * symbols a lookup where they fit; near the block's end (where the first symbol may end the
 * block by position) and for long symbols, one at a time. */
static inline __attribute__((always_inline)) void decode_ac(stk__jhuff *h, breg *r, const htable *t,
                                                            JCOEF *blk, const bool store)
{
    for (int k = 1; k < 64;) {
        REFILL();
        uint64_t e = t->acs[buf >> (64 - FAST_BITS)];
        if (__builtin_expect(e != 0 && k + ACE_OFF1(e) < 63, 1)) {
            DROP(ACE_LEN(e));
            if (store) { /* the second write is a zero at an unwritten position if no symbol */
                blk[natural[k + ACE_OFF1(e)]] = ACE_V1(e);
                blk[natural[k + ACE_OFF2(e)]] = ACE_V2(e);
            }
            k += ACE_ADV(e);
            if (e & ACE_END)
                break;
            continue;
        }
        int sym, s, v;
        DECODE(sym, t);
        s = sym & 15;
        if (s) {
            k += sym >> 4;
            VALUE(v, s);
            if (store)
                blk[natural[k]] = (JCOEF)v;
            k++;
        } else {
            if (sym >> 4 != 15)
                break;
            k += 16;
        }
    }
}

#undef buf
#undef bits
#undef p
#undef end

/* One MCU: decode_mcu's body, for blocks to fill (`store`) or to skip (MCU_data NULL). */
static inline __attribute__((always_inline)) void mcu_body(stk__jhuff *h, breg *r,
                                                           JBLOCKROW *MCU_data, bool store)
{
    for (int b = 0; b < h->blocks; b++) {
        int diff = decode_dc(h, r, h->dc[b]);
        JCOEF *blk = store ? MCU_data[b][0] : NULL;
        if (h->dc_needed[b]) {
            int ci = h->comp[b];
            /* int wraparound as in libjpeg (its UBSan note); JCOEF truncation the same */
            int dc = (int)((unsigned)diff + (unsigned)h->last_dc[ci]);
            h->last_dc[ci] = dc;
            if (store)
                blk[0] = (JCOEF)dc;
        }
        if (store && h->ac_needed[b])
            decode_ac(h, r, h->ac[b], blk, true);
        else
            decode_ac(h, r, h->ac[b], NULL, false);
    }
}

/* libjpeg's decode_mcu: one MCU's blocks into MCU_data (zeroed by the caller), or with NULL
 * only decoded (jpeg_skip_scanlines). */
static boolean decode_mcu(j_decompress_ptr c, JBLOCKROW *MCU_data)
{
    stk__jhuff *h = c->client_data;
    if (h->restart_interval) {
        if (h->restarts_to_go == 0)
            restart(h, h->p);
        h->restarts_to_go--;
    }
    breg r = {h->buf, h->bits, h->p, h->end};
    if (MCU_data)
        mcu_body(h, &r, MCU_data, true);
    else
        mcu_body(h, &r, NULL, false);
    if (r.bits < h->fake) /* this MCU used bits past the end of its data */
        give_up(h);
    h->buf = r.buf;
    h->bits = r.bits;
    h->p = r.p;
    /* where libjpeg's marker reader goes on (the marker, or data bytes it would skip) */
    const uint8_t *at = h->marker ? h->marker : r.p;
    c->src->next_input_byte = at;
    c->src->bytes_in_buffer = (size_t)(r.end - at);
    return TRUE;
}

/* Whether a marker other than RSTn (FF, then a byte not 00, FF or D0-D7) starts at or after
 * `from` and before `end`: then both libjpeg's reader and this one stop at a marker before the
 * end of the buffer, where libjpeg would warn "premature end of JPEG file" (always fatal) as
 * soon as its read-ahead touched it. Looks back from the end over at most 4 KiB (trailing
 * bytes after EOI are rare); a file without one is left to libjpeg. */
static bool ends_in_marker(const uint8_t *from, const uint8_t *end)
{
    const uint8_t *stop = end - from > 4096 ? end - 4096 : from;
    for (const uint8_t *q = end - 1; q > stop; q--)
        if (q[-1] == 0xFF && q[0] != 0 && q[0] != 0xFF && (q[0] < RST0 || q[0] > RST7))
            return true;
    return false;
}

bool stk__jhuff_install(stk__jhuff *h, j_decompress_ptr c, const uint8_t *src, size_t size,
                        jmp_buf *bail)
{
    if (c->progressive_mode || c->arith_code || c->buffered_image ||
        c->inputctl->has_multiple_scans || c->blocks_in_MCU > MAX_BLOCKS ||
        c->comps_in_scan > MAX_COMPS_IN_SCAN || c->unread_marker != 0)
        return false;
    const uint8_t *at = c->src->next_input_byte, *end = src + size;
    if (at < src || at > end || (size_t)(end - at) != c->src->bytes_in_buffer ||
        !ends_in_marker(at, end))
        return false;
    const htable *dct[MAX_COMPS_IN_SCAN], *act[MAX_COMPS_IN_SCAN];
    for (int ci = 0; ci < c->comps_in_scan; ci++) {
        const jpeg_component_info *comp = c->cur_comp_info[ci];
        const JHUFF_TBL *d = c->dc_huff_tbl_ptrs[comp->dc_tbl_no];
        const JHUFF_TBL *a = c->ac_huff_tbl_ptrs[comp->ac_tbl_no];
        if (!d || !a)
            return false;
        dct[ci] = table_for(h, d, false);
        act[ci] = table_for(h, a, true);
        h->last_dc[ci] = 0;
    }
    h->blocks = c->blocks_in_MCU;
    for (int b = 0; b < c->blocks_in_MCU; b++) {
        int ci = c->MCU_membership[b];
        const jpeg_component_info *comp = c->cur_comp_info[ci];
        h->comp[b] = ci;
        h->dc[b] = dct[ci];
        h->ac[b] = act[ci];
        /* as libjpeg: no ACs for a 1/8-scale component, nothing for one not needed */
        h->dc_needed[b] = comp->component_needed;
        h->ac_needed[b] = comp->component_needed && comp->DCT_scaled_size > 1;
    }
    h->p = at;
    h->end = end;
    h->marker = NULL;
    h->buf = 0;
    h->bits = 0;
    h->fake = 0;
    h->restart_interval = c->restart_interval;
    h->restarts_to_go = c->restart_interval;
    h->next_restart = c->marker->next_restart_num;
    h->bail = bail;
    c->client_data = h;
    c->entropy->decode_mcu = decode_mcu;
    h->installed++;
    return true;
}

void stk__jhuff_counts(const stk__jhuff *h, uint64_t *installed, uint64_t *gave_up)
{
    *installed = h->installed;
    *gave_up = h->gave_up;
}

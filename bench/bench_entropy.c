/*
 * bench_entropy.c: JPEG entropy decoding alone, libjpeg-turbo's decode_mcu against stoker's
 * (src/decode/stk_jpeg_huff.c, issue 29), on the same files in one process, alternating. For
 * each file: jpeg_read_header, jpeg_start_decompress, then decode_mcu over every MCU of the scan,
 * into zeroed blocks as libjpeg's coefficient controller calls it ("store") or with NULL as
 * jpeg_skip_scanlines calls it ("skip"). Prints microseconds of this thread's CPU time per file
 * for both and their ratio, then checks that both decoders give the same coefficients for every
 * file (a checksum of every block) and counts the files either failed on. Not part of the
 * library; the figures are in bench/RESULTS.md.
 *
 *   cc -O2 -Iinclude -Isrc -o build/bench_entropy bench/bench_entropy.c build/libstoker.a $(LIBS)
 *   build/bench_entropy ROUNDS store|skip FILE.jpg...
 *
 * (LIBS: the libraries the Makefile links the CLI with.)
 */
#define _GNU_SOURCE
#include "decode/stk_jpeg_huff.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jpegint.h>

static jmp_buf jump;

static void on_error(j_common_ptr c)
{
    (void)c;
    longjmp(jump, 1);
}

static void on_message(j_common_ptr c, int level)
{
    (void)c;
    (void)level;
}

static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint8_t *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    uint8_t *p = NULL;
    long len;
    if (!f || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) <= 0 || fseek(f, 0, SEEK_SET) != 0 ||
        !(p = malloc((size_t)len)) || fread(p, 1, (size_t)len, f) != (size_t)len) {
        fprintf(stderr, "bench_entropy: cannot read %s\n", path);
        exit(2);
    }
    fclose(f);
    *n = (size_t)len;
    return p;
}

/* Entropy-decode one file with libjpeg's decoder (own = false) or stoker's; a checksum of the
 * coefficients when `sum`, into *out. Returns 0, or -1 when the file failed (or stoker's
 * decoder did not take it). */
static int run(struct jpeg_decompress_struct *c, stk__jhuff *h, const uint8_t *p, size_t n,
               bool own, bool store, bool sum, uint64_t *out)
{
    static JBLOCK blocks[D_MAX_BLOCKS_IN_MCU];
    JBLOCKROW mcu[D_MAX_BLOCKS_IN_MCU];
    volatile uint64_t s = 0; /* (set between setjmp and a longjmp) */
    if (setjmp(jump)) {
        jpeg_abort_decompress(c);
        return -1;
    }
    jpeg_mem_src(c, p, (unsigned long)n);
    jpeg_read_header(c, TRUE);
    jpeg_start_decompress(c);
    if (own && !stk__jhuff_install(h, c, p, n, &jump)) {
        jpeg_abort_decompress(c);
        return -1;
    }
    for (int b = 0; b < D_MAX_BLOCKS_IN_MCU; b++)
        mcu[b] = &blocks[b];
    long total = (long)c->MCUs_per_row * (long)c->MCU_rows_in_scan;
    for (long m = 0; m < total; m++) {
        if (store)
            memset(blocks, 0, sizeof(JBLOCK) * (size_t)c->blocks_in_MCU);
        c->entropy->decode_mcu(c, store ? mcu : NULL);
        for (int b = 0; sum && b < c->blocks_in_MCU; b++)
            for (int k = 0; k < DCTSIZE2; k++)
                s = s * 31 + (uint16_t)blocks[b][k];
    }
    jpeg_abort_decompress(c);
    *out = s;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4 || (strcmp(argv[2], "store") && strcmp(argv[2], "skip"))) {
        fprintf(stderr, "usage: bench_entropy ROUNDS store|skip FILE.jpg...\n");
        return 2;
    }
    int rounds = atoi(argv[1]), n = argc - 3;
    bool store = strcmp(argv[2], "store") == 0;
    uint8_t **img = malloc(sizeof(*img) * (size_t)n);
    size_t *size = malloc(sizeof(*size) * (size_t)n);
    for (int i = 0; i < n; i++)
        img[i] = read_file(argv[i + 3], &size[i]);
    struct jpeg_decompress_struct c;
    struct jpeg_error_mgr jerr;
    c.err = jpeg_std_error(&jerr);
    jerr.error_exit = on_error;
    jerr.emit_message = on_message;
    jpeg_create_decompress(&c);
    stk__jhuff *h;
    if (stk__jhuff_create(&h) < 0)
        return 1;
    double t[2] = {0, 0};
    int failed[2] = {0, 0}, differ = 0;
    for (int r = 0; r < rounds; r++)
        for (int own = 0; own < 2; own++) {
            double t0 = cpu_s();
            for (int i = 0; i < n; i++) {
                uint64_t s;
                failed[own] += run(&c, h, img[i], size[i], own, store, false, &s) < 0;
            }
            t[own] += cpu_s() - t0;
        }
    for (int i = 0; i < n; i++) {
        uint64_t a = 0, b = 0;
        int ra = run(&c, h, img[i], size[i], false, true, true, &a);
        int rb = run(&c, h, img[i], size[i], true, true, true, &b);
        differ += ra != rb || a != b;
    }
    printf("%s, %d files x %d rounds: libjpeg %.1f us/file, stoker %.1f us/file, %.3fx; "
           "failed %d / %d; coefficients differ in %d files\n",
           argv[2], n, rounds, t[0] / rounds / n * 1e6, t[1] / rounds / n * 1e6, t[0] / t[1],
           failed[0] / rounds, failed[1] / rounds, differ);
    stk__jhuff_destroy(h);
    jpeg_destroy_decompress(&c);
    return differ != 0;
}

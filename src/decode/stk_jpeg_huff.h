/*
 * stk_jpeg_huff.h: private to src/decode (stk_jpeg.c and stk_jpeg_huff.c). stoker's own Huffman
 * decoder for single-scan sequential JPEGs, installed in place of libjpeg-turbo's for one image,
 * that gives up (longjmp) on anything but a clean stream, so that libjpeg decodes that image
 * again from the start (stk_jpeg_huff.c says why the result is then always libjpeg's).
 */
#ifndef STK_JPEG_HUFF_H
#define STK_JPEG_HUFF_H

#include "stk_internal.h"

#include <setjmp.h>
#include <stdio.h>

#include <jpeglib.h>

typedef struct stk__jhuff stk__jhuff;

/* Create the decoder state of one stk__jpeg (its table cache lives as long as it). */
stk_status stk__jhuff_create(stk__jhuff **out);
void stk__jhuff_destroy(stk__jhuff *h);

/* The value the decoder longjmps with when it gives up on a stream (libjpeg's errors: 1). */
#define STK__JHUFF_GAVE_UP 2

/* After jpeg_start_decompress on `c`, whose source is jpeg_mem_src(src, size): take over the
 * entropy decoding of this image (c->entropy->decode_mcu; c->client_data points to h) when it
 * is a single-scan Huffman JPEG whose data ends in a marker; returns whether it did. From then
 * on, a stream that is not clean makes decode_mcu longjmp(*bail, STK__JHUFF_GAVE_UP): the caller
 * then aborts the decompression and decodes the image again without installing. Lifetime: until
 * the next jpeg_start_decompress or abort of c; src and *bail must stay valid until then.
 * Threads: h and c belong to one thread. */
bool stk__jhuff_install(stk__jhuff *h, j_decompress_ptr c, const uint8_t *src, size_t size,
                        jmp_buf *bail);

/* Images taken over by stk__jhuff_install so far, and how many of them it gave up on. */
void stk__jhuff_counts(const stk__jhuff *h, uint64_t *installed, uint64_t *gave_up);

#endif /* STK_JPEG_HUFF_H */

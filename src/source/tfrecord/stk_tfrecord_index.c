/*
 * stk_tfrecord_index.c: the text index next to a TFRecord file, `<file>.idx` (DALI's and the
 * `tfrecord` package's format: "offset length" per line, the length including the 16 framing
 * bytes), read when it exists and agrees with the file (contiguous frames covering it exactly)
 * and written after a scan (through a temporary file and a rename, when the file is on local disk
 * and its directory writable). Moved out of stk_src_tfrecord.c, which scans the frame headers
 * when there is no usable index and checks every frame it reads against the index, so a stale
 * index cannot mislead a read.
 */
#include "source/stk_source.h"
#include "source/tfrecord/stk_tfrecord.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TF_MAX_INDEX_LINE 48 /* an .idx longer than this per possible frame is not read */

/* Read a DALI / `tfrecord` text index into *out when it exists and describes the file
 * exactly; returns STK_OK with *out untouched when there is none or it does not fit (the caller
 * scans), STK_ENOMEM on allocation failure. */
stk_status stk__tf_index_load(stk__file *tf_file, uint64_t **out, uint64_t *count, char *err,
                              size_t err_size)
{
    stk_status rc = STK_OK;
    char *ip = NULL, *text = NULL;
    stk__file *f = NULL;
    uint64_t *off = NULL;
    size_t cap = 0, n = 0;
    stk__stat st;
    if (!(ip = stk__malloc(strlen(tf_file->path) + 5)))
        STK_FAIL_E(STK_ENOMEM, "%s: out of memory", tf_file->path);
    sprintf(ip, "%s.idx", tf_file->path);
    if (stk__vfs_stat(ip, &st, NULL, 0) != STK_OK || !st.is_regular ||
        st.size > (tf_file->size / STK__TF_FRAMING + 1) * TF_MAX_INDEX_LINE ||
        stk__vfs_open(ip, &f, NULL, 0) != STK_OK)
        goto fail;
    if (!(text = stk__malloc((size_t)f->size + 1)))
        STK_FAIL_E(STK_ENOMEM, "%s: out of memory", ip);
    if (stk__vfs_read(f, 0, text, (size_t)f->size, NULL, 0) != STK_OK)
        goto fail;
    text[f->size] = '\0';
    uint64_t expect = 0;
    bool ok = true;
    for (char *s = text; ok;) {
        while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')
            s++;
        if (!*s)
            break;
        char *e;
        errno = 0;
        unsigned long long o = strtoull(s, &e, 10), l = 0;
        ok = e != s && errno == 0;
        if (ok) {
            s = e;
            l = strtoull(s, &e, 10);
            ok = e != s && errno == 0 && o == expect && l >= STK__TF_FRAMING &&
                 l <= tf_file->size - expect;
            s = e;
        }
        if (ok && n + 1 >= cap) {
            size_t nc = cap ? cap * 2 : 1024;
            uint64_t *no = stk__realloc(off, nc * sizeof(*off));
            if (!no)
                STK_FAIL_E(STK_ENOMEM, "%s: out of memory for its index", tf_file->path);
            off = no;
            cap = nc;
        }
        if (ok) {
            off[n++] = o;
            expect = o + l;
        }
    }
    if (ok && expect == tf_file->size && n > 0) {
        off[n] = expect;
        *out = off;
        *count = n;
        off = NULL;
    }
fail:
    stk__vfs_close(f);
    stk__free(off);
    stk__free(text);
    stk__free(ip);
    return rc;
}

/* Write the index as `<file>.idx` (DALI's text format) when the file is local and its directory
 * writable; any failure leaves the index in memory only. */
void stk__tf_index_save(const stk__file *tf_file, const uint64_t *tf_off, uint64_t count)
{
    if (stk__vfs_for(tf_file->path) != &stk__vfs_posix)
        return;
    size_t pl = strlen(tf_file->path);
    char *ip = stk__malloc(pl + 5), *tmp = stk__malloc(pl + 64);
    FILE *out = NULL;
    if (!ip || !tmp)
        goto done;
    sprintf(ip, "%s.idx", tf_file->path);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(tmp, pl + 64, "%s.idx.tmp.%ld.%ld", tf_file->path, (long)getpid(), (long)ts.tv_nsec);
    if (access(ip, F_OK) == 0 || !(out = fopen(tmp, "w")))
        goto done;
    bool ok = true;
    for (uint64_t k = 0; k < count && ok; k++)
        ok = fprintf(out, "%" PRIu64 " %" PRIu64 "\n", tf_off[k], tf_off[k + 1] - tf_off[k]) > 0;
    ok = fclose(out) == 0 && ok;
    out = NULL;
    if (!ok || rename(tmp, ip) != 0)
        unlink(tmp);
done:
    stk__free(ip);
    stk__free(tmp);
}

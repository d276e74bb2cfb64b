/*
 * bench_ceiling.c: the ceiling of `stoker bench --ceiling` (moved out of cmd_bench.c): on the
 * same records and the same number of threads as the loader run, the work with nothing else
 * around it. The records are first read into memory; then each thread takes every threads-th
 * position of each epoch's order (the loader's: stk_sampler_index, shuffled with --shuffle; over
 * the first N records with --max-samples N, where the loader draws N of all of them), and
 * either decodes it at full size (an image recipe whose field holds encoded images) or copies its
 * bytes into a slot-sized buffer, as the loader copies rows into a ring slot (raw records, or an
 * image array field).
 *
 * The decode is libjpeg-turbo's own for JPEGs (TurboJPEG's tjDecompress2 to RGB, accurate IDCT
 * and smooth upsampling: what a loader built on libjpeg-turbo gets, PIL's decode bit for bit), and
 * stk_decoder_decode for the other formats. Not stk_decoder_decode for JPEGs: that one runs
 * stoker's own Huffman decoder (issue 29), which would move the ceiling with stoker's speed.
 * Each epoch's end is timed per thread, so the first epoch can be reported apart (the same work
 * as the others here: the records are in memory before it starts).
 *
 * An audio recipe's ceiling (kws-train, kws-val) decodes every whole file of the audio field to
 * interleaved float samples with libsndfile, from memory through its virtual I/O (MP3 through
 * libsndfile's libmpg123), as bench/audio_ceiling.c and torchaudio.load do: decode alone, the
 * issue's ceiling for an audio pipeline (docs/audio.md "From the command line").
 */
#include "bench.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <turbojpeg.h>

#ifdef STK_HAVE_SNDFILE
#include <sndfile.h>
#endif

typedef struct ceiling_job {
    const uint8_t *const *rec; /* record (or image) bytes in memory */
    const size_t *size;
    bool shuffle; /* visit each epoch's records in the loader's order (stk_sampler_index) */
    uint64_t seed;
    size_t n, first, step; /* this thread takes positions first, first+step, ... */
    int epochs;
    bool decode, audio; /* audio: decode with libsndfile (else an image decoder) */
    uint8_t *dst;       /* memcpy destination, one ring slot's worth */
    size_t dst_size;
    uint64_t samples, bytes;
    double first_epoch_s, first_epoch_cpu_s; /* this thread's first epoch, wall and CPU */
    int failed;
    char err[256];
} ceiling_job;

/* This thread's CPU seconds so far. */
static double thread_cpu_s(void)
{
    struct timespec t;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0)
        return 0;
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Whether p starts like a JPEG (SOI, then a marker). */
static bool is_jpeg(const uint8_t *p, size_t n)
{
    return n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF;
}

/* Decode a JPEG at full size to RGB with TurboJPEG into *buf (grown as needed); 0 or -1 with the
 * reason in err. */
static int tj_decode(tjhandle tj, const uint8_t *p, size_t n, uint8_t **buf, size_t *cap, char *err,
                     size_t err_size)
{
    int w, h, sub, cs;
    if (tjDecompressHeader3(tj, p, (unsigned long)n, &w, &h, &sub, &cs) != 0)
        goto fail;
    size_t need = (size_t)w * (size_t)h * 3;
    if (need > *cap) {
        uint8_t *q = realloc(*buf, need);
        if (!q) {
            snprintf(err, err_size, "out of memory for a %dx%d image", w, h);
            return -1;
        }
        *buf = q;
        *cap = need;
    }
    if (tjDecompress2(tj, p, (unsigned long)n, *buf, w, 0, h, TJPF_RGB, 0) != 0)
        goto fail;
    return 0;
fail:
    snprintf(err, err_size, "JPEG: %s", tjGetErrorStr2(tj));
    return -1;
}

#ifdef STK_HAVE_SNDFILE
/* A record in memory as libsndfile's virtual I/O reads it. */
typedef struct memfile {
    const uint8_t *p;
    sf_count_t size, pos;
} memfile;

static sf_count_t mf_len(void *u)
{
    return ((memfile *)u)->size;
}

static sf_count_t mf_seek(sf_count_t off, int whence, void *u)
{
    memfile *m = u;
    sf_count_t at = (whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m->pos : m->size) + off;
    if (at < 0 || at > m->size)
        return -1;
    return m->pos = at;
}

static sf_count_t mf_read(void *dst, sf_count_t n, void *u)
{
    memfile *m = u;
    n = n < m->size - m->pos ? n : m->size - m->pos;
    memcpy(dst, m->p + m->pos, (size_t)n);
    m->pos += n;
    return n;
}

static sf_count_t mf_write(const void *src, sf_count_t n, void *u)
{
    (void)src, (void)n, (void)u;
    return 0;
}

static sf_count_t mf_tell(void *u)
{
    return ((memfile *)u)->pos;
}
#endif

/* Decode a whole audio file to interleaved float with libsndfile into *buf (grown as needed); 0
 * or -1 with the reason in err. */
static int sf_decode(const uint8_t *p, size_t n, float **buf, size_t *cap, char *err,
                     size_t err_size)
{
#ifndef STK_HAVE_SNDFILE
    (void)p, (void)n, (void)buf, (void)cap;
    snprintf(err, err_size, "stoker was built without libsndfile: no audio ceiling");
    return -1;
#else
    SF_VIRTUAL_IO vio = {mf_len, mf_seek, mf_read, mf_write, mf_tell};
    memfile m = {p, (sf_count_t)n, 0};
    SF_INFO info;
    memset(&info, 0, sizeof(info));
    SNDFILE *f = sf_open_virtual(&vio, SFM_READ, &info, &m);
    if (!f) {
        snprintf(err, err_size, "libsndfile: %s", sf_strerror(NULL));
        return -1;
    }
    size_t need = (size_t)(info.frames > 0 ? info.frames : 0) * (size_t)info.channels;
    if (need > *cap) {
        float *q = realloc(*buf, need * sizeof(float));
        if (!q) {
            sf_close(f);
            snprintf(err, err_size, "out of memory for %zu samples", need);
            return -1;
        }
        *buf = q;
        *cap = need;
    }
    sf_count_t got = need ? sf_readf_float(f, *buf, info.frames) : 0;
    sf_close(f);
    if (got != info.frames) {
        snprintf(err, err_size, "libsndfile: %lld of %lld frames", (long long)got,
                 (long long)info.frames);
        return -1;
    }
    return 0;
#endif
}

/* One ceiling thread: its share of the records, every epoch. */
static void *ceiling_thread(void *arg)
{
    ceiling_job *j = arg;
    stk_decoder *dec = NULL;
    tjhandle tj = NULL;
    uint8_t *rgb = NULL;
    size_t rgb_cap = 0;
    float *pcm = NULL;
    size_t pcm_cap = 0;
    if (j->decode && !j->audio && (stk_decoder_create(0, &dec) < 0 || !(tj = tjInitDecompress()))) {
        snprintf(j->err, sizeof(j->err), "cannot create a decoder");
        j->failed = 1;
        stk_decoder_destroy(dec);
        return NULL;
    }
    size_t at = 0;
    double t0 = stk_cli_now(), c0 = thread_cpu_s();
    for (int e = 0; e < j->epochs && !j->failed; e++) {
        for (size_t p = j->first; p < j->n; p += j->step) {
            size_t i = (size_t)stk_sampler_index(j->n, j->shuffle, j->seed, (uint64_t)e, p);
            if (j->audio) {
                char why[200];
                if (sf_decode(j->rec[i], j->size[i], &pcm, &pcm_cap, why, sizeof(why)) < 0) {
                    snprintf(j->err, sizeof(j->err), "record %zu: %s", i, why);
                    j->failed = 1;
                    break;
                }
            } else if (j->decode && is_jpeg(j->rec[i], j->size[i])) {
                char why[200];
                if (tj_decode(tj, j->rec[i], j->size[i], &rgb, &rgb_cap, why, sizeof(why)) < 0) {
                    snprintf(j->err, sizeof(j->err), "record %zu: %s", i, why);
                    j->failed = 1;
                    break;
                }
            } else if (j->decode) {
                stk_image img;
                stk_image_init(&img);
                if (stk_decoder_decode(dec, j->rec[i], j->size[i], &img) < 0) {
                    snprintf(j->err, sizeof(j->err), "record %zu: %s", i, stk_decoder_errmsg(dec));
                    j->failed = 1;
                    break;
                }
            } else {
                /* Rotate through a slot-sized buffer as the loader rotates through rows. */
                if (at + j->size[i] > j->dst_size)
                    at = 0;
                memcpy(j->dst + at, j->rec[i], j->size[i]);
                at += (j->size[i] + 63) & ~(size_t)63;
            }
            j->samples++;
            j->bytes += j->size[i];
        }
        if (e == 0) {
            j->first_epoch_s = stk_cli_now() - t0;
            j->first_epoch_cpu_s = thread_cpu_s() - c0;
        }
    }
    free(rgb);
    free(pcm);
    if (tj)
        tjDestroy(tj);
    stk_decoder_destroy(dec);
    return NULL;
}

int stk_bench_run_ceiling(const bench_args *a, unsigned threads, size_t slot_size, bench_result *r)
{
    stk_dataset *ds;
    if (stk_cli_open_data_as("bench", (char *const *)a->paths, (int)a->n_paths, 0, a->format, &ds))
        return 1;
    /* An image recipe's ceiling decodes the field the loader read; an image array field has
     * nothing to decode: its ceiling is the memcpy of its bytes. An audio recipe's decodes the
     * audio field (--field, else `audio`, else the first named by an audio extension). */
    int field = -1;
    if (a->audio) {
        field = a->field ? stk_dataset_find_field(ds, a->field) : -1;
        for (size_t f = 0; !a->field && field < 0 && f < stk_dataset_n_fields(ds); f++) {
            const stk_field *fd = stk_dataset_field(ds, f);
            if (fd->kind == STK_FIELD_BYTES && stk_cli_audio_field_name(fd->name) &&
                (strcmp(fd->name, "audio") == 0 || stk_dataset_find_field(ds, "audio") < 0))
                field = (int)f;
        }
        if (field < 0 || stk_dataset_field(ds, (size_t)field)->kind != STK_FIELD_BYTES) {
            stk_cli_error("bench",
                          "the audio ceiling decodes encoded audio: no such field (give --field)");
            stk_dataset_close(ds);
            return 1;
        }
    } else if (strcmp(a->recipe, "raw") != 0) {
        size_t f;
        field = a->field                                    ? stk_dataset_find_field(ds, a->field)
                : stk_dataset_image_field(ds, &f) == STK_OK ? (int)f
                                                            : -1;
        if (field < 0) { /* the loader run accepted it: not reached in practice */
            stk_cli_error("bench", "no image field for the ceiling");
            stk_dataset_close(ds);
            return 1;
        }
    }
    bool decode = field >= 0 && stk_dataset_field(ds, (size_t)field)->kind == STK_FIELD_BYTES;
    uint64_t n = stk_dataset_n_records(ds);
    if (a->max_samples && a->max_samples < n)
        n = a->max_samples;
    size_t max = stk_dataset_max_record_size(ds);
    uint8_t **rec = calloc(n, sizeof(*rec));
    size_t *size = calloc(n, sizeof(*size));
    uint8_t *buf = malloc(max ? max : 1);
    int rc = 0;
    if (!rec || !size || !buf) {
        stk_cli_error("bench", "out of memory preloading %" PRIu64 " records", n);
        rc = 1;
        goto out;
    }
    /* Preload: the ceiling measures the work itself, not the reading. */
    for (uint64_t i = 0; i < n && rc == 0; i++) {
        stk_record recd;
        stk_record_init(&recd);
        if (stk_dataset_read(ds, i, buf, max, &recd) < 0) {
            stk_cli_error("bench", "%s", stk_last_errmsg());
            rc = 1;
            break;
        }
        const uint8_t *src = field >= 0 ? recd.field[field] : buf;
        size[i] = field >= 0 ? recd.field_size[field] : recd.size;
        rec[i] = malloc(size[i] ? size[i] : 1);
        if (!rec[i]) {
            rc = 1;
            break;
        }
        memcpy(rec[i], src, size[i]);
    }
    if (rc)
        goto out;
    ceiling_job *jobs = calloc(threads, sizeof(*jobs));
    pthread_t *tids = calloc(threads, sizeof(*tids));
    if (!jobs || !tids) {
        free(jobs);
        free(tids);
        rc = 1;
        goto out;
    }
    double t0 = stk_cli_now(), cpu0 = stk_cli_process_cpu_s();
    for (unsigned k = 0; k < threads; k++) {
        jobs[k] = (ceiling_job){.rec = (const uint8_t *const *)rec,
                                .size = size,
                                .n = n,
                                .first = k,
                                .step = threads,
                                .epochs = a->epochs,
                                .shuffle = a->shuffle,
                                .seed = a->seed,
                                .decode = decode,
                                .audio = a->audio,
                                .dst_size = slot_size};
        if (!decode)
            jobs[k].dst = malloc(slot_size);
        pthread_create(&tids[k], NULL, ceiling_thread, &jobs[k]);
    }
    memset(r, 0, sizeof(*r));
    for (unsigned k = 0; k < threads; k++) {
        pthread_join(tids[k], NULL);
        r->samples += jobs[k].samples;
        r->bytes += jobs[k].bytes;
        /* the first epoch ends when its slowest thread ends it */
        r->first_epoch_s =
            jobs[k].first_epoch_s > r->first_epoch_s ? jobs[k].first_epoch_s : r->first_epoch_s;
        r->first_epoch_cpu_s += jobs[k].first_epoch_cpu_s;
        if (jobs[k].failed && !rc) {
            stk_cli_error("bench", "ceiling: %s", jobs[k].err);
            rc = 1;
        }
        free(jobs[k].dst);
    }
    r->seconds = stk_cli_now() - t0;
    r->cpu_s = stk_cli_process_cpu_s() - cpu0;
    r->first_epoch_samples = n;
    r->threads = threads;
    r->decoded = decode;
    free(jobs);
    free(tids);
out:
    if (rec)
        for (uint64_t i = 0; i < n; i++)
            free(rec[i]);
    free(rec);
    free(size);
    free(buf);
    stk_dataset_close(ds);
    return rc;
}

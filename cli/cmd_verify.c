/*
 * cmd_verify.c: `stoker verify DATA`: read every record and check its checksum on several
 * threads, report each bad record by shard file and number; with --decode also decode every
 * image field through the public stk_decoder, strict, and every audio field (named `audio` or by
 * an audio extension: a tar's `wav`, `flac`, ... members) through stk_audio_check, as the
 * loader's strict first read, and report those that fail with their `path` field. A format whose
 * records carry no checksum (ImageFolder and audio folders, WebDataset, LMDB, HDF5, .npy) gets
 * its image field, or else its audio fields, decoded instead, each broken file named; without
 * one the summary says that nothing was checked beyond reading (issues 27, 30).
 *
 * Opening already validates each shard's header, footer and index (stk_dataset_open), so a
 * truncated or torn shard fails up front with a message naming the file.
 */
#include "cli.h"

#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

typedef struct bad_record {
    uint64_t index;
    char *msg;
} bad_record;

#define VERIFY_MAX_DECODE 8 /* image fields --decode may name */

typedef struct verify_state {
    const stk_dataset *ds;
    bool stk_names; /* name .stk records by shard, number and `path` field, not describe() */
    uint64_t count;
    int decode[VERIFY_MAX_DECODE]; /* --decode: field numbers to decode */
    bool audio[VERIFY_MAX_DECODE]; /* decode[k] holds encoded audio (else an image) */
    size_t n_decode;
    int path_field;             /* the `path` bytes field, or -1 */
    atomic_uint_fast64_t next;  /* next chunk start */
    atomic_uint_fast64_t done;  /* records checked */
    atomic_uint_fast64_t bytes; /* bytes checked */
    atomic_int running;         /* worker threads still going */
    pthread_mutex_t lock;       /* guards bad[] */
    bad_record *bad;
    size_t n_bad, cap_bad;
    bool oom;
} verify_state;

#define VERIFY_CHUNK 64 /* records per grab: consecutive, so the kernel's readahead helps */

/* Add record i's failure to the list (sorted by record at the end). */
static void verify_add_bad(verify_state *s, uint64_t i, const char *err)
{
    pthread_mutex_lock(&s->lock);
    if (s->n_bad == s->cap_bad) {
        size_t cap = s->cap_bad ? s->cap_bad * 2 : 64;
        bad_record *b = realloc(s->bad, cap * sizeof(*b));
        if (b) {
            s->bad = b;
            s->cap_bad = cap;
        }
    }
    char *msg = strdup(err);
    if (s->n_bad < s->cap_bad && msg)
        s->bad[s->n_bad++] = (bad_record){i, msg};
    else {
        free(msg);
        s->oom = true;
    }
    pthread_mutex_unlock(&s->lock);
}

/* --decode: decode each image or audio field of a good record r; the first failure is reported
 * as "<shard> record <n> (global <i>, path "<path>"): <field>: <decoder's reason>". */
static void verify_decode(verify_state *s, stk_decoder *dec, const stk_record *r)
{
    for (size_t k = 0; k < s->n_decode; k++) {
        int f = s->decode[k];
        stk_image img;
        stk_image_init(&img);
        const char *why;
        if (s->audio[k]) {
            if (stk_audio_check(r->field[f], r->field_size[f], NULL, NULL, NULL) == STK_OK)
                continue;
            why = stk_last_errmsg();
        } else {
            if (stk_decoder_decode(dec, r->field[f], r->field_size[f], &img) == STK_OK)
                continue;
            why = stk_decoder_errmsg(dec);
        }
        stk_shard_info sh = {.struct_size = sizeof(sh)};
        char where[1024] = "", path[320] = "", err[2048];
        if (s->stk_names) { /* the file it was packed from is its `path` field */
            if (s->path_field >= 0) {
                size_t n = r->field_size[s->path_field];
                snprintf(path, sizeof(path), ", path \"%.*s\"", n > 256 ? 256 : (int)n,
                         (const char *)r->field[s->path_field]);
            }
            snprintf(where, sizeof(where), "%s record %llu (global %llu%s)",
                     stk_dataset_shard(s->ds, r->shard, &sh) == STK_OK ? sh.path : "?",
                     (unsigned long long)r->local, (unsigned long long)r->index, path);
        } else if (stk_dataset_describe(s->ds, r->index, where, sizeof(where)) != STK_OK) {
            snprintf(where, sizeof(where), "record %llu", (unsigned long long)r->index);
        }
        snprintf(err, sizeof(err), "%s: %s: %s", where, stk_dataset_field(s->ds, (size_t)f)->name,
                 why);
        verify_add_bad(s, r->index, err);
        return;
    }
}

static void *verify_thread(void *arg)
{
    verify_state *s = arg;
    uint64_t max = stk_dataset_max_record_size(s->ds);
    uint8_t *buf = malloc(max ? max : 1);
    stk_decoder *dec = NULL;
    bool images = false; /* an image field to decode (audio needs no decoder handle) */
    for (size_t k = 0; k < s->n_decode; k++)
        images |= !s->audio[k];
    if (images && stk_decoder_create(0, &dec) != STK_OK) {
        free(buf);
        buf = NULL;
    }
    for (;;) {
        uint64_t first = atomic_fetch_add(&s->next, VERIFY_CHUNK);
        if (first >= s->count || !buf)
            break;
        uint64_t end = first + VERIFY_CHUNK < s->count ? first + VERIFY_CHUNK : s->count;
        for (uint64_t i = first; i < end; i++) {
            stk_record r;
            stk_record_init(&r);
            if (stk_dataset_read(s->ds, i, buf, max, &r) == STK_OK) {
                atomic_fetch_add(&s->bytes, r.size);
                if (s->n_decode)
                    verify_decode(s, dec, &r);
            } else {
                verify_add_bad(s, i, stk_last_errmsg());
            }
            atomic_fetch_add(&s->done, 1);
        }
    }
    stk_decoder_destroy(dec);
    if (!buf) {
        pthread_mutex_lock(&s->lock);
        s->oom = true;
        pthread_mutex_unlock(&s->lock);
    }
    free(buf);
    atomic_fetch_sub(&s->running, 1);
    return NULL;
}

static int cmp_bad(const void *a, const void *b)
{
    uint64_t x = ((const bad_record *)a)->index, y = ((const bad_record *)b)->index;
    return x < y ? -1 : x > y;
}

static void verify_usage(FILE *f)
{
    fprintf(f,
            "usage: stoker verify DATA... [--decode[=FIELD,...]] [--threads N] [--quiet]\n"
            "\n"
            "Read every record of DATA and check what its format can check: the XXH3 checksum\n"
            "of each .stk record, the CRC32C of each TFRecord record. Each bad record is printed\n"
            "as \"<shard> record <n> (global <i>): <reason>\", then a summary line. Exit status\n"
            "0 when every record is good, 1 when one is bad or the dataset cannot be opened (bad\n"
            "header, index or footer, truncated shard or file).\n"
            "\n"
            "Formats without record checksums (imagefolder, audio folders, wds, lmdb, hdf5,\n"
            "npy) have their image field decoded instead, as with --decode (the field the\n"
            "loader's transforms would read), or else their audio fields; without one, the\n"
            "summary says that nothing was checked beyond reading every record.\n"
            "\n"
            "--decode also decodes every image of every record, strictly, as the loader's\n"
            "transforms do (JPEG, PNG, WebP, TIFF, BMP, PPM/PGM; a JPEG that libjpeg reports as\n"
            "corrupt fails), and lists each image that fails as\n"
            "\"<shard> record <n> (global <i>, path \"<path>\"): <field>: <reason>\" (the path\n"
            "when the records have a `path` field, as `stoker pack` writes), or, in other\n"
            "formats, by the file itself: \"train/dog/1.jpg (record 40): image: <reason>\".\n"
            "The image fields are FIELD,... (bytes fields), by default `image`.\n"
            "\n"
            "Audio fields (named `audio`, as in an audio folder tree, or by an audio file's\n"
            "extension, as a WebDataset tar's `wav`, `flac`, `mp3`, `ogg`, `opus` members) are\n"
            "decoded as the loader's strict first read does (WAV, FLAC, Ogg Vorbis, Opus, MP3,\n"
            "AIFF: a compressed stream from start to end, every frame its header says, every\n"
            "Ogg page's CRC; a WAV's data within the file): \"speech/no/7.flac (record 41):\n"
            "audio: FLAC: Error : flac decoder lost sync. (...)\". Without an `image` field,\n"
            "--decode decodes the audio fields.\n"
            "\n"
            "options:\n"
            "  --format NAME   the format of DATA instead of detecting it\n"
            "  --concat        read shards of different packs as one dataset\n"
            "  --decode[=F,..] decode the image (default: image) or audio fields and report\n"
            "                  failures\n"
            "  --threads N     reader threads (default: the CPU count, at most 8)\n"
            "  --quiet         no progress bar\n" STK_CLI_CACHE_HELP
            "  -h, --help      show this help\n");
    stk_cli_print_formats(f);
}

/* What a format's reads check in each record (docs/formats.md), NULL for none: its bytes then
 * go unchecked unless verify decodes them. */
static const char *record_checksum(const stk_dataset *ds)
{
    static const struct {
        const char *format, *checksum;
    } with[] = {{"stk", "XXH3"}, {"tfrecord", "CRC32C"}};
    const char *name = stk_dataset_format(ds);
    for (size_t i = 0; name && i < sizeof(with) / sizeof(with[0]); i++)
        if (strcmp(name, with[i].format) == 0)
            return with[i].checksum;
    return NULL;
}

/* The bytes fields of ds holding audio, into s (at most VERIFY_MAX_DECODE in all). */
static void audio_fields(const stk_dataset *ds, verify_state *s)
{
    for (size_t f = 0; f < stk_dataset_n_fields(ds) && s->n_decode < VERIFY_MAX_DECODE; f++) {
        const stk_field *fd = stk_dataset_field(ds, f);
        if (fd->kind == STK_FIELD_BYTES && stk_cli_audio_field_name(fd->name)) {
            s->audio[s->n_decode] = true;
            s->decode[s->n_decode++] = (int)f;
        }
    }
}

/* A format without record checksums: decode the encoded image field the loader would read,
 * if there is one (an array field or none: nothing to decode), else its audio fields. */
static void auto_decode_field(const stk_dataset *ds, verify_state *s)
{
    size_t f;
    if (stk_dataset_image_field(ds, &f) == STK_OK &&
        stk_dataset_field(ds, f)->kind == STK_FIELD_BYTES)
        s->decode[s->n_decode++] = (int)f;
    else
        audio_fields(ds, s);
}

/* --decode=LIST: resolve each comma-separated name to a bytes field of ds. */
static int parse_decode_fields(const stk_dataset *ds, const char *list, verify_state *s)
{
    if (!list && stk_dataset_find_field(ds, "image") < 0) { /* no image: the audio fields */
        audio_fields(ds, s);
        if (s->n_decode)
            return 0;
    }
    const char *p = list ? list : "image";
    while (*p) {
        size_t n = strcspn(p, ",");
        char name[STK_MAX_NAME];
        if (n == 0 || n >= sizeof(name))
            return stk_cli_usage_error("verify", "--decode: bad field list '%s'", list);
        memcpy(name, p, n);
        name[n] = '\0';
        int f = stk_dataset_find_field(ds, name);
        if (f < 0)
            return stk_cli_error("verify", "--decode: no field '%s' in the data%s", name,
                                 list ? ""
                                      : " (name the image or audio fields: --decode=FIELD,...)");
        if (stk_dataset_field(ds, (size_t)f)->kind != STK_FIELD_BYTES)
            return stk_cli_error("verify", "--decode: field '%s' is not a bytes field", name);
        if (s->n_decode == VERIFY_MAX_DECODE)
            return stk_cli_usage_error("verify", "--decode: at most %d fields", VERIFY_MAX_DECODE);
        s->audio[s->n_decode] = stk_cli_audio_field_name(name);
        s->decode[s->n_decode++] = f;
        p += n + (p[n] == ',');
    }
    return 0;
}

int stk_cmd_verify(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"threads", required_argument, NULL, 't'},
        {"quiet", no_argument, NULL, 'q'},
        {"format", required_argument, NULL, 'F'},
        {"decode", optional_argument, NULL, 'd'},
        {"concat", no_argument, NULL, 'C'},
        {"help", no_argument, NULL, 'h'},
        STK_CLI_CACHE_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    long long threads = 0, v;
    bool quiet = false, decode = false, concat = false;
    const char *format = NULL, *decode_list = NULL;
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":hq", longopts, NULL)) != -1) {
        switch (c) {
        case 't':
            if (stk_cli_parse_int(optarg, "--threads", 0, 1024, &v))
                return 2;
            threads = v;
            break;
        case 'q':
            quiet = true;
            break;
        case 'F':
            format = optarg;
            break;
        case 'd':
            decode = true;
            decode_list = optarg;
            break;
        case 'C':
            concat = true;
            break;
        case 'h':
            verify_usage(stdout);
            return 0;
        case STK_CLI_OPT_CACHE_DIR:
        case STK_CLI_OPT_CACHE_LIMIT:
            stk_cli_cache_option(c, optarg);
            break;
        default:
            return stk_cli_getopt_error("verify", c, argv);
        }
    }
    stk_dataset *ds;
    int rc = stk_cli_open_data_as("verify", argv + optind, argc - optind,
                                  concat ? STK_DATASET_CONCAT : 0, format, &ds);
    if (rc)
        return rc;
    if (threads == 0) /* the library's CPU count, at most 8 (verify's default as it was) */
        threads = stk_n_cpus() > 8 ? 8 : (int)stk_n_cpus();
    verify_state s;
    memset(&s, 0, sizeof(s));
    s.ds = ds;
    s.count = stk_dataset_n_records(ds);
    s.path_field = -1;
    s.stk_names = strcmp(stk_dataset_format(ds), "stk") == 0;
    int pf = stk_dataset_find_field(ds, "path");
    if (pf >= 0 && stk_dataset_field(ds, (size_t)pf)->kind == STK_FIELD_BYTES)
        s.path_field = pf;
    const char *checksum = record_checksum(ds);
    if (decode) {
        rc = parse_decode_fields(ds, decode_list, &s);
        if (rc) {
            stk_dataset_close(ds);
            return rc;
        }
    } else if (!checksum) {
        auto_decode_field(ds, &s);
    }
    pthread_mutex_init(&s.lock, NULL);
    if ((uint64_t)threads > s.count)
        threads = (long long)s.count;
    pthread_t *th = calloc((size_t)threads, sizeof(*th));
    double t0 = stk_cli_now();
    stk_cli_progress prog;
    stk_cli_progress_start(&prog, "verify", s.count, "records", quiet);
    long long started = 0;
    atomic_store(&s.running, (int)threads);
    for (; th && started < threads; started++)
        if (pthread_create(&th[started], NULL, verify_thread, &s) != 0)
            break;
    atomic_fetch_sub(&s.running, (int)(threads - started)); /* those that never started */
    if (started == 0) {
        free(th);
        stk_dataset_close(ds);
        return stk_cli_error("verify", "cannot start threads");
    }
    while (prog.enabled && atomic_load(&s.running) > 0) { /* without a bar, just join */
        stk_cli_progress_update(&prog, atomic_load(&s.done), atomic_load(&s.bytes));
        nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    }
    for (long long i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    stk_cli_progress_update(&prog, atomic_load(&s.done), atomic_load(&s.bytes));
    stk_cli_progress_end(&prog);
    double secs = stk_cli_now() - t0;

    if (s.n_bad) /* qsort(NULL, 0) is undefined */
        qsort(s.bad, s.n_bad, sizeof(*s.bad), cmp_bad);
    for (size_t i = 0; i < s.n_bad; i++) {
        printf("%s\n", s.bad[i].msg);
        free(s.bad[i].msg);
    }
    char b[32];
    uint64_t checked = atomic_load(&s.done);
    size_t ns = stk_dataset_n_shards(ds);
    if (s.oom)
        rc = stk_cli_error("verify", "out of memory while verifying");
    else if (checked != s.count)
        rc = stk_cli_error("verify", "only %llu of %llu records were checked",
                           (unsigned long long)checked, (unsigned long long)s.count);
    else
        rc = s.n_bad ? 1 : 0;
    /* What was checked, said plainly: records of a format without checksums that were only
     * read are "readable", not "good". */
    char what[512];
    size_t at = 0;
    if (checksum)
        at += (size_t)snprintf(what, sizeof(what), "%s checksums checked", checksum);
    else
        at += (size_t)snprintf(what, sizeof(what), "%s keeps no checksums", stk_dataset_format(ds));
    for (int kind = 0; kind < 2; kind++) /* images, then audio */
        for (size_t k = 0, n = 0; k < s.n_decode && at < sizeof(what); k++)
            if (s.audio[k] == (kind == 1))
                at += (size_t)snprintf(what + at, sizeof(what) - at, "%s'%s'",
                                       n++    ? ", "
                                       : kind ? "; audio of "
                                              : "; images of ",
                                       stk_dataset_field(ds, (size_t)s.decode[k])->name);
    if (s.n_decode && at < sizeof(what))
        snprintf(what + at, sizeof(what) - at, " decoded");
    else if (!checksum && at < sizeof(what))
        snprintf(what + at, sizeof(what) - at,
                 " and has no image or audio field to decode: nothing was checked beyond "
                 "reading");
    const char *verdict = s.n_bad ? "" : checksum || s.n_decode ? "all good, " : "all readable, ";
    printf("verify: %llu records in %zu shard%s: %s%zu bad (%s; %s read in %.2f s, %.1f MB/s)\n",
           (unsigned long long)s.count, ns, ns == 1 ? "" : "s", verdict, s.n_bad, what,
           stk_cli_format_size(atomic_load(&s.bytes), b, sizeof(b)), secs,
           secs > 0 ? (double)atomic_load(&s.bytes) / secs / 1e6 : 0.0);
    free(s.bad);
    free(th);
    pthread_mutex_destroy(&s.lock);
    stk_dataset_close(ds);
    return rc;
}

/*
 * cmd_inspect.c: `stoker inspect DATA` (shards, fields, metadata and, on request, records; text
 * or JSON) and `stoker verify DATA` (read every record and check its checksum on several
 * threads, report each bad record by shard file and number; with --decode also decode every
 * image field through the public stk_decoder, strict, and report the images that fail with
 * their `path` field).
 *
 * Opening already validates each shard's header, footer and index (stk_dataset_open), so a
 * truncated or torn shard fails both commands up front with a message naming the file.
 */
#include "cli.h"

#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- shared formatting ---- */

/* "bytes", "int64", "array float32[2,3]" */
static const char *type_text(const stk_field *f, char *buf, size_t size)
{
    if (f->kind != STK_FIELD_ARRAY)
        return stk_field_kind_name(f->kind);
    int n = snprintf(buf, size, "array %s[", stk_dtype_name(f->dtype));
    for (uint32_t d = 0; d < f->ndim && n > 0 && (size_t)n < size; d++)
        n += snprintf(buf + n, size - (size_t)n, "%s%lld", d ? "," : "", (long long)f->shape[d]);
    if (n > 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, "]");
    return buf;
}

/* Whether bytes are printable UTF-8 text (no control characters). */
static bool is_text(const uint8_t *s, size_t n)
{
    for (size_t i = 0, len; i < n; i += len) {
        len = stk_cli_utf8_seq(s + i, n - i);
        if (len == 0 || s[i] < 0x20 || s[i] == 0x7f)
            return false;
    }
    return true;
}

/* ---- inspect ---- */

typedef struct inspect_args {
    bool json, records, concat;
    uint64_t limit;     /* records to list; 0 = all */
    const char *format; /* --format: NULL = detect */
} inspect_args;

/* Number of items of the validated array at v; *shown_end marks the end of the first `show`. */
static size_t json_array_items(const char *v, size_t show, const char **shown_end)
{
    size_t n = 0;
    const char *q = stk_cli_json_ws(v + 1), *item, *item_end;
    *shown_end = q;
    while (stk_cli_json_item(&q, &item, &item_end))
        if (++n <= show)
            *shown_end = item_end;
    return n;
}

/* Print the members of a metadata JSON object, one per line ("  key: value"); arrays show
 * their length and first items. Anything that is not a JSON object prints as raw text. */
static void print_metadata(const char *meta)
{
    const char *p = stk_cli_json_members(meta), *key, *v, *v_end;
    int key_len;
    if (!p) {
        printf("  %.200s%s\n", meta, strlen(meta) > 200 ? "..." : "");
        return;
    }
    while (stk_cli_json_member(&p, &key, &key_len, &v, &v_end)) {
        printf("  %.*s: ", key_len, key);
        if (*v == '[') {
            const char *shown_end;
            size_t n = json_array_items(v, 5, &shown_end);
            const char *first = stk_cli_json_ws(v + 1);
            printf("%zu item%s", n, n == 1 ? "" : "s");
            if (n)
                printf(" [%.*s%s]", (int)(shown_end - first), first, n > 5 ? ", ..." : "");
            printf("\n");
        } else if (*v == '"') {
            printf("%.*s\n", (int)(v_end - v - 2), v + 1);
        } else {
            int len = (int)(v_end - v);
            printf("%.*s%s\n", len > 200 ? 200 : len, v, len > 200 ? "..." : "");
        }
    }
}

long stk_cli_count_classes(const char *meta)
{
    const char *p = stk_cli_json_members(meta), *key, *v, *v_end, *shown_end;
    int key_len;
    while (p && stk_cli_json_member(&p, &key, &key_len, &v, &v_end))
        if (key_len == 7 && strncmp(key, "classes", 7) == 0 && *v == '[')
            return (long)json_array_items(v, 0, &shown_end);
    return -1;
}

/* One field value of a record, as text or as a JSON value. */
static void print_value(const stk_field *f, const stk_record *r, size_t i, bool json)
{
    const uint8_t *b = r->field[i];
    size_t n = r->field_size[i];
    switch (f->kind) {
    case STK_FIELD_INT64:
        printf("%lld", (long long)stk_record_i64(r, i));
        return;
    case STK_FIELD_FLOAT32: {
        float v = stk_record_f32(r, i);
        if (json && !isfinite(v))
            printf("null");
        else
            printf("%.9g", (double)v);
        return;
    }
    case STK_FIELD_ARRAY:
    case STK_FIELD_BYTES:
        if (json) {
            printf("{\"size\": %zu", n);
            if (f->kind == STK_FIELD_BYTES && n <= 4096 && is_text(b, n)) {
                printf(", \"text\": ");
                stk_cli_json_string(stdout, (const char *)b, n);
            }
            printf("}");
        } else if (f->kind == STK_FIELD_BYTES && is_text(b, n)) {
            printf("\"%.*s%s\"", (int)(n > 80 ? 80 : n), (const char *)b, n > 80 ? "..." : "");
        } else {
            printf("<%zu bytes>", n);
        }
        return;
    }
}

/* List the records (up to a->limit); returns 1 if one could not be read. */
static int list_records(const stk_dataset *ds, const inspect_args *a)
{
    uint64_t n = stk_dataset_n_records(ds), max = stk_dataset_max_record_size(ds);
    if (a->limit && a->limit < n)
        n = a->limit;
    uint8_t *buf = malloc(max ? max : 1);
    if (!buf)
        return stk_cli_error("inspect", "out of memory");
    size_t nf = stk_dataset_n_fields(ds);
    int rc = 0;
    printf(a->json ? ", \"record_list\": [" : "\nrecords:\n");
    for (uint64_t i = 0; i < n; i++) {
        stk_record r;
        char err[512];
        if (stk_dataset_read(ds, i, buf, max, &r, err, sizeof(err)) != STK_OK) {
            fflush(stdout);
            stk_cli_error("inspect", "%s", err);
            rc = 1;
            if (a->json)
                printf("%s{\"index\": %llu, \"error\": ", i ? ", " : "", (unsigned long long)i);
            if (a->json) {
                stk_cli_json_string(stdout, err, strlen(err));
                printf("}");
            }
            continue;
        }
        if (a->json)
            printf("%s{\"index\": %llu, \"shard\": %u, \"local\": %llu, \"size\": %zu",
                   i ? ", " : "", (unsigned long long)i, r.shard, (unsigned long long)r.local,
                   r.size);
        else
            printf("  %llu (shard %u #%llu, %zu bytes)", (unsigned long long)i, r.shard,
                   (unsigned long long)r.local, r.size);
        for (size_t f = 0; f < nf; f++) {
            const stk_field *fd = stk_dataset_field(ds, f);
            if (a->json) {
                printf(", ");
                stk_cli_json_string(stdout, fd->name, strlen(fd->name));
                printf(": ");
            } else {
                printf("  %s=", fd->name);
            }
            print_value(fd, &r, f, a->json);
        }
        printf(a->json ? "}" : "\n");
    }
    if (a->json)
        printf("]");
    free(buf);
    return rc;
}

static void inspect_json(const stk_dataset *ds)
{
    size_t ns = stk_dataset_n_shards(ds), nf = stk_dataset_n_fields(ds);
    stk_shard_info si = {.struct_size = sizeof(si)};
    printf("{\"format\": \"%s\", \"records\": %llu, \"fingerprint\": \"%016llx\", "
           "\"max_record_size\": %llu, "
           "\"shards\": [",
           stk_dataset_format(ds), (unsigned long long)stk_dataset_n_records(ds),
           (unsigned long long)stk_dataset_fingerprint(ds),
           (unsigned long long)stk_dataset_max_record_size(ds));
    for (size_t i = 0; i < ns; i++) {
        stk_dataset_shard(ds, i, &si);
        printf("%s{\"path\": ", i ? ", " : "");
        stk_cli_json_string(stdout, si.path, strlen(si.path));
        printf(", \"first_record\": %llu, \"records\": %llu, \"file_size\": %llu, "
               "\"data_size\": %llu, \"version\": %u}",
               (unsigned long long)si.first_record, (unsigned long long)si.n_records,
               (unsigned long long)si.file_size, (unsigned long long)si.data_size, si.version);
    }
    printf("], \"fields\": [");
    for (size_t i = 0; i < nf; i++) {
        const stk_field *f = stk_dataset_field(ds, i);
        printf("%s{\"name\": ", i ? ", " : "");
        stk_cli_json_string(stdout, f->name, strlen(f->name));
        printf(", \"kind\": \"%s\", \"dtype\": \"%s\", \"shape\": [", stk_field_kind_name(f->kind),
               stk_dtype_name(f->dtype));
        for (uint32_t d = 0; f->kind == STK_FIELD_ARRAY && d < f->ndim; d++)
            printf("%s%lld", d ? ", " : "", (long long)f->shape[d]);
        printf("], \"max_size\": %llu}", (unsigned long long)stk_dataset_field_max_size(ds, i));
    }
    stk_dataset_shard(ds, 0, &si);
    long classes = stk_cli_count_classes(si.metadata);
    printf("], \"classes\": %ld, \"metadata\": ", classes);
    if (stk_cli_json_valid(si.metadata))
        printf("%s", si.metadata);
    else
        stk_cli_json_string(stdout, si.metadata, strlen(si.metadata));
}

static void inspect_text(const stk_dataset *ds)
{
    size_t ns = stk_dataset_n_shards(ds), nf = stk_dataset_n_fields(ds);
    stk_shard_info si = {.struct_size = sizeof(si)};
    char b1[32], b2[32], tb[64];
    printf("format:      %s\n", stk_dataset_format(ds));
    printf("records:     %llu\n", (unsigned long long)stk_dataset_n_records(ds));
    printf("shards:      %zu\n", ns);
    printf("fingerprint: %016llx\n", (unsigned long long)stk_dataset_fingerprint(ds));
    printf("max record:  %llu bytes\n", (unsigned long long)stk_dataset_max_record_size(ds));
    printf("\nshards:\n  %-40s %10s %10s %11s %11s %7s\n", "path", "records", "first", "file size",
           "data size", "version");
    for (size_t i = 0; i < ns; i++) {
        stk_dataset_shard(ds, i, &si);
        printf("  %-40s %10llu %10llu %11s %11s %7u\n", si.path, (unsigned long long)si.n_records,
               (unsigned long long)si.first_record,
               stk_cli_format_size(si.file_size, b1, sizeof(b1)),
               stk_cli_format_size(si.data_size, b2, sizeof(b2)), si.version);
    }
    printf("\nfields:\n  %-20s %-24s %s\n", "name", "type", "max size (bytes)");
    for (size_t i = 0; i < nf; i++) {
        const stk_field *f = stk_dataset_field(ds, i);
        printf("  %-20s %-24s %llu\n", f->name, type_text(f, tb, sizeof(tb)),
               (unsigned long long)stk_dataset_field_max_size(ds, i));
    }
    stk_dataset_shard(ds, 0, &si);
    long classes = stk_cli_count_classes(si.metadata);
    printf("\nmetadata (shard 0):\n");
    print_metadata(si.metadata);
    if (classes >= 0)
        printf("classes:     %ld\n", classes);
}

static void inspect_usage(FILE *f)
{
    fprintf(f, "usage: stoker inspect DATA... [--json] [--records [--limit N]]\n"
               "\n"
               "Show a dataset: record count, fingerprint, each shard (path, records, file size,\n"
               "data size, format version), each field (name, kind/dtype/shape, max size) and the\n"
               "writer's metadata (with the number of classes of a packed ImageFolder).\n"
               "DATA: files, directories, globs or brace ranges of a format below, in order.\n"
               "\n"
               "options:\n"
               "  --format NAME  the format of DATA instead of detecting it\n"
               "  --concat     read shards of different packs as one dataset\n"
               "  --json       one JSON object on stdout\n"
               "  --records    also list every record's fields (bytes as text when printable)\n"
               "  --limit N    list only the first N records\n" STK_CLI_CACHE_HELP
               "  -h, --help   show this help\n");
    stk_cli_print_formats(f);
}

int stk_cmd_inspect(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, 'j'},
        {"records", no_argument, NULL, 'r'},
        {"limit", required_argument, NULL, 'l'},
        {"format", required_argument, NULL, 'F'},
        {"concat", no_argument, NULL, 'C'},
        {"help", no_argument, NULL, 'h'},
        STK_CLI_CACHE_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    inspect_args a;
    memset(&a, 0, sizeof(a));
    int c;
    long long v;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'j':
            a.json = true;
            break;
        case 'r':
            a.records = true;
            break;
        case 'l':
            if (stk_cli_parse_int(optarg, "--limit", 1, INT64_MAX, &v))
                return 2;
            a.limit = (uint64_t)v;
            break;
        case 'F':
            a.format = optarg;
            break;
        case 'C':
            a.concat = true;
            break;
        case 'h':
            inspect_usage(stdout);
            return 0;
        case STK_CLI_OPT_CACHE_DIR:
        case STK_CLI_OPT_CACHE_LIMIT:
            stk_cli_cache_option(c, optarg);
            break;
        default:
            return stk_cli_getopt_error("inspect", c, argv);
        }
    }
    stk_dataset *ds;
    int rc = stk_cli_open_data_as("inspect", argv + optind, argc - optind,
                                  a.concat ? STK_DATASET_CONCAT : 0, a.format, &ds);
    if (rc)
        return rc;
    if (a.json)
        inspect_json(ds);
    else
        inspect_text(ds);
    if (a.records)
        rc = list_records(ds, &a);
    if (a.json)
        printf("}\n");
    stk_dataset_close(ds);
    return rc;
}

/* ---- verify ---- */

typedef struct bad_record {
    uint64_t index;
    char *msg;
} bad_record;

#define VERIFY_MAX_DECODE 8 /* image fields --decode may name */

typedef struct verify_state {
    const stk_dataset *ds;
    uint64_t count;
    int decode[VERIFY_MAX_DECODE]; /* --decode: field numbers to decode */
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

/* --decode: decode each image field of a good record r; the first failure is reported as
 * "<shard> record <n> (global <i>, path "<path>"): <field>: <decoder's reason>". */
static void verify_decode(verify_state *s, stk_decoder *dec, const stk_record *r)
{
    for (size_t k = 0; k < s->n_decode; k++) {
        int f = s->decode[k];
        stk_image img;
        if (stk_decoder_decode(dec, r->field[f], r->field_size[f], &img) == STK_OK)
            continue;
        stk_shard_info sh = {.struct_size = sizeof(sh)};
        char where[320] = "", err[1024];
        if (s->path_field >= 0) {
            size_t n = r->field_size[s->path_field];
            snprintf(where, sizeof(where), ", path \"%.*s\"", n > 256 ? 256 : (int)n,
                     (const char *)r->field[s->path_field]);
        }
        snprintf(err, sizeof(err), "%s record %llu (global %llu%s): %s: %s",
                 stk_dataset_shard(s->ds, r->shard, &sh) == STK_OK ? sh.path : "?",
                 (unsigned long long)r->local, (unsigned long long)r->index, where,
                 stk_dataset_field(s->ds, (size_t)f)->name, stk_decoder_errmsg(dec));
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
    if (s->n_decode && stk_decoder_create(0, &dec) != STK_OK) {
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
            char err[512];
            if (stk_dataset_read(s->ds, i, buf, max, &r, err, sizeof(err)) == STK_OK) {
                atomic_fetch_add(&s->bytes, r.size);
                if (dec)
                    verify_decode(s, dec, &r);
            } else {
                verify_add_bad(s, i, err);
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
            "Read every record of DATA and check it against the XXH3 checksum in its shard's\n"
            "index. Each bad record is printed as \"<shard> record <n> (global <i>): <reason>\",\n"
            "then a summary line. Exit status 0 when every record is good, 1 when one is bad\n"
            "or the dataset cannot be opened (bad header, index or footer, truncated shard).\n"
            "\n"
            "--decode also decodes every image of every record, strictly, as the loader's\n"
            "transforms do (JPEG, PNG, WebP, TIFF, BMP, PPM/PGM; a JPEG that libjpeg reports as\n"
            "corrupt fails), and lists each image that fails as\n"
            "\"<shard> record <n> (global <i>, path \"<path>\"): <field>: <reason>\" (the path\n"
            "when the records have a `path` field, as `stoker pack` writes). The image fields\n"
            "are FIELD,... (bytes fields), by default `image`.\n"
            "\n"
            "options:\n"
            "  --format NAME   the format of DATA instead of detecting it\n"
            "  --concat        read shards of different packs as one dataset\n"
            "  --decode[=F,..] decode the image fields (default: image) and report failures\n"
            "  --threads N     reader threads (default: online CPUs, at most 8)\n"
            "  --quiet         no progress bar\n" STK_CLI_CACHE_HELP
            "  -h, --help      show this help\n");
    stk_cli_print_formats(f);
}

/* --decode=LIST: resolve each comma-separated name to a bytes field of ds. */
static int parse_decode_fields(const stk_dataset *ds, const char *list, verify_state *s)
{
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
                                 list ? "" : " (name the image fields: --decode=FIELD,...)");
        if (stk_dataset_field(ds, (size_t)f)->kind != STK_FIELD_BYTES)
            return stk_cli_error("verify", "--decode: field '%s' is not a bytes field", name);
        if (s->n_decode == VERIFY_MAX_DECODE)
            return stk_cli_usage_error("verify", "--decode: at most %d fields", VERIFY_MAX_DECODE);
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
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n < 1 ? 1 : n > 8 ? 8 : n;
    }
    verify_state s;
    memset(&s, 0, sizeof(s));
    s.ds = ds;
    s.count = stk_dataset_n_records(ds);
    s.path_field = -1;
    if (decode) {
        int pf = stk_dataset_find_field(ds, "path");
        if (pf >= 0 && stk_dataset_field(ds, (size_t)pf)->kind == STK_FIELD_BYTES)
            s.path_field = pf;
        rc = parse_decode_fields(ds, decode_list, &s);
        if (rc) {
            stk_dataset_close(ds);
            return rc;
        }
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
    printf("verify: %llu records in %zu shard%s: %s%zu bad (%s checked%s in %.2f s, %.1f MB/s)\n",
           (unsigned long long)s.count, ns, ns == 1 ? "" : "s", s.n_bad ? "" : "all good, ",
           s.n_bad, stk_cli_format_size(atomic_load(&s.bytes), b, sizeof(b)),
           s.n_decode ? ", images decoded" : "", secs,
           secs > 0 ? (double)atomic_load(&s.bytes) / secs / 1e6 : 0.0);
    free(s.bad);
    free(th);
    pthread_mutex_destroy(&s.lock);
    stk_dataset_close(ds);
    return rc;
}

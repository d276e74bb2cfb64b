/*
 * cmd_inspect.c: `stoker inspect DATA`: shards, fields, metadata and, on request, records; text
 * or JSON. (`stoker verify` is cmd_verify.c.)
 *
 * Opening already validates each shard's header, footer and index (stk_dataset_open), so a
 * truncated or torn shard fails up front with a message naming the file.
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

/* ---- formatting ---- */

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
        stk_record_init(&r);
        if (stk_dataset_read(ds, i, buf, max, &r) != STK_OK) {
            const char *err = stk_last_errmsg();
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
    if (stk_json_valid(si.metadata))
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
    /* a token corpus' files hold tokens, not records: its rows span them */
    stk_tokens_info ti = {.struct_size = sizeof(ti)};
    bool tokens = stk_tokens_info_get(ds, &ti) == STK_OK;
    printf("\nshards:\n  %-40s %10s %10s %11s %11s %7s\n", "path", tokens ? "tokens" : "records",
           "first", "file size", "data size", "version");
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
               "writer's metadata (with the number of classes of a packed ImageFolder); for a\n"
               "token corpus also its tokens, documents and document lengths.\n"
               "DATA: files, directories, globs or brace ranges of a format below, in order.\n"
               "\n"
               "options:\n"
               "  --format NAME  the format of DATA instead of detecting it\n"
               "  --concat     read shards of different packs as one dataset\n"
               "  --json       one JSON object on stdout\n"
               "  --records    also list every record's fields (bytes as text when printable)\n"
               "  --limit N    list only the first N records\n" STK_CLI_CACHE_HELP
               "  -h, --help   show this help\n" STK_CLI_TOKEN_HELP);
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
        STK_CLI_TOKEN_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    inspect_args a;
    memset(&a, 0, sizeof(a));
    stk_cli_tokens tok;
    stk_cli_tokens_init(&tok);
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
        case STK_CLI_OPT_EOS:
        case STK_CLI_OPT_BOS:
        case STK_CLI_OPT_TOKEN_BYTES:
        case STK_CLI_OPT_SEQ_LEN:
        case STK_CLI_OPT_TOKENS:
        case STK_CLI_OPT_PACKING:
            if (stk_cli_tokens_option("inspect", c, optarg, &tok))
                return 2;
            break;
        default:
            return stk_cli_getopt_error("inspect", c, argv);
        }
    }
    stk_dataset *ds;
    unsigned flags = a.concat ? STK_DATASET_CONCAT : 0;
    int rc = tok.any ? stk_cli_open_tokens("inspect", argv + optind, argc - optind, flags, a.format,
                                           &tok, &ds)
                     : stk_cli_open_data_as("inspect", argv + optind, argc - optind, flags,
                                            a.format, &ds);
    if (rc)
        return rc;
    if (a.json) {
        inspect_json(ds);
        stk_cli_tokens_json(ds);
    } else {
        inspect_text(ds);
        stk_cli_tokens_text(ds);
    }
    if (a.records)
        rc = list_records(ds, &a);
    if (a.json)
        printf("}\n");
    stk_dataset_close(ds);
    return rc;
}

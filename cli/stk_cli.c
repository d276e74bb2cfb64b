/*
 * stk_cli.c: the `stoker` command line: dispatch to the commands (stk_cli_main, called by the
 * executable's main in main.c and by `python -m stoker` through the extension), plus the
 * helpers they share (cli.h).
 *
 * Every command lives in its own file as `int stk_cmd_<name>(int argc, char **argv)` with argv[0]
 * the command name, and owns its --help. Usage errors exit 2, runtime errors 1, both with a
 * message on stderr; stdout carries only results, so `stoker inspect --json` pipes cleanly.
 */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* ---- dispatch ---- */

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"pack", stk_cmd_pack, "pack a dataset of any format below into .stk shards"},
    {"inspect", stk_cmd_inspect, "show a dataset's shards, fields, metadata (and records)"},
    {"verify", stk_cmd_verify, "read every record and check it (checksums, or decode images)"},
    {"bench", stk_cmd_bench, "measure loader throughput on a dataset"},
    {"doctor", stk_cmd_doctor, "is training data-bound? measure, explain and advise"},
};
#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
    fprintf(f, "usage: stoker <command> [options] [arguments]\n"
               "       stoker --help | --version\n"
               "\n"
               "stoker keeps the GPU fed: a training-data loader and its tools.\n"
               "\n"
               "commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nRun 'stoker <command> --help' for the options of a command.\n"
               "DATA arguments are files, directories, globs, brace ranges (train-{000..127}.tar)\n"
               "or s3:// and http(s):// URLs of one of these formats, detected from the data:\n");
    for (size_t i = 0; i < stk_n_formats(); i++)
        fprintf(f, "  %-12s %s\n", stk_format_name(i), stk_format_summary(i));
}

int stk_cli_main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0) {
        printf("stoker %s (libstoker %s, .stk format 1)\n", STK_VERSION_STRING,
               stk_version_string());
        return 0;
    }
    if (strcmp(name, "help") == 0) { /* "stoker help pack" = "stoker pack --help" */
        if (argc < 3) {
            usage(stdout);
            return 0;
        }
        name = argv[2];
        for (size_t i = 0; i < N_COMMANDS; i++)
            if (strcmp(name, commands[i].name) == 0) {
                char *args[3] = {argv[2], "--help", NULL};
                return commands[i].run(2, args);
            }
    } else {
        for (size_t i = 0; i < N_COMMANDS; i++)
            if (strcmp(name, commands[i].name) == 0)
                return commands[i].run(argc - 1, argv + 1);
    }
    fprintf(stderr, "stoker: unknown %s '%s'\nRun 'stoker --help' for the list of commands.\n",
            name[0] == '-' ? "option" : "command", name);
    return 2;
}

/* ---- errors ---- */

int stk_cli_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "stoker %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

int stk_cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "stoker %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry 'stoker %s --help'.\n", cmd);
    va_end(ap);
    return 2;
}

int stk_cli_getopt_error(const char *cmd, int c, char **argv)
{
    const char *opt = optind > 0 ? argv[optind - 1] : "?";
    if (c == ':')
        return stk_cli_usage_error(cmd, "option '%s' needs a value", opt);
    if (optopt && strncmp(opt, "--", 2) != 0)
        return stk_cli_usage_error(cmd, "unknown option '-%c'", optopt);
    return stk_cli_usage_error(cmd, "unknown option '%s'", opt);
}

/* ---- parsing ---- */

int stk_cli_parse_int(const char *s, const char *what, long long min, long long max, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) {
        fprintf(stderr, "stoker: %s: invalid value '%s' (expected an integer in %lld..%lld)\n",
                what, s, min, max);
        return 1;
    }
    *out = v;
    return 0;
}

int stk_cli_parse_size(const char *s, uint64_t *out)
{
    char *end;
    if (!s || !*s || *s == '-' || *s == '+')
        return -1;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v <= 0)
        return -1;
    double mul = 1;
    switch (*end) {
    case 'k':
    case 'K':
        mul = 1024.0;
        end++;
        break;
    case 'm':
    case 'M':
        mul = 1024.0 * 1024;
        end++;
        break;
    case 'g':
    case 'G':
        mul = 1024.0 * 1024 * 1024;
        end++;
        break;
    case 't':
    case 'T':
        mul = 1024.0 * 1024 * 1024 * 1024;
        end++;
        break;
    default:
        break;
    }
    if (mul > 1 && *end == 'i')
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end)
        return -1;
    v *= mul;
    if (v < 1 || v > 4611686018427387904.0) /* 2^62 */
        return -1;
    *out = (uint64_t)v;
    return 0;
}

void stk_cli_print_formats(FILE *f)
{
    fprintf(f, "\nformats (--format NAME; detected from magic bytes and names when left out):\n");
    for (size_t i = 0; i < stk_n_formats(); i++)
        fprintf(f, "  %-12s %s\n", stk_format_name(i), stk_format_summary(i));
}

const char *stk_cli_format_size(uint64_t bytes, char *buf, size_t size)
{
    static const char *units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1000 && u < 5) {
        v /= 1000;
        u++;
    }
    if (u == 0)
        snprintf(buf, size, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, size, "%.*f %s", v < 10 ? 2 : v < 100 ? 1 : 0, v, units[u]);
    return buf;
}

/* ---- recipes ---- */

int stk_cli_recipe(const char *cmd, const char *name, bool exact, bool fast, stk_transform **out,
                   bool *exact_out)
{
    *out = NULL;
    if (exact && fast)
        return stk_cli_usage_error(cmd, "--exact and --fast exclude each other");
    if (stk_transform_recipe(name, exact, out) < 0)
        return stk_cli_usage_error(cmd, "%s", stk_last_errmsg());
    if (!exact && !fast && !stk_transform_draws(*out)) { /* an evaluation recipe: exact */
        stk_transform_destroy(*out);
        *out = NULL;
        exact = true;
        if (stk_transform_recipe(name, true, out) < 0)
            return stk_cli_usage_error(cmd, "%s", stk_last_errmsg());
    }
    *exact_out = exact;
    return 0;
}

/* ---- data ---- */

bool stk_cli_audio_field_name(const char *name)
{
    if (strcasecmp(name, "audio") == 0)
        return true;
    for (size_t i = 0; i < stk_n_audio_extensions(); i++) /* the library's list, without its dot */
        if (strcasecmp(name, stk_audio_extension(i) + 1) == 0)
            return true;
    return false;
}

int stk_cli_open_data(const char *cmd, char *const *paths, int n_paths, unsigned flags,
                      stk_dataset **out)
{
    return stk_cli_open_data_as(cmd, paths, n_paths, flags, NULL, out);
}

static const char *g_cache_dir, *g_cache_limit; /* --cache-dir, --cache-limit */

void stk_cli_cache_option(int c, const char *arg)
{
    if (c == STK_CLI_OPT_CACHE_DIR)
        g_cache_dir = arg;
    else if (c == STK_CLI_OPT_CACHE_LIMIT)
        g_cache_limit = arg;
}

void stk_cli_cache_settings(const char **dir, const char **limit)
{
    *dir = g_cache_dir;
    *limit = g_cache_limit;
}

/* Whether arg is NAME=PATH naming a field (the NumPy dict form, `image=x.npy`): NAME is a field
 * name ([A-Za-z0-9_./-], 1 to 31 bytes) and arg itself names no file. */
static bool named_field_arg(const char *arg)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg || eq - arg >= STK_MAX_NAME || !eq[1] || access(arg, F_OK) == 0)
        return false;
    for (const char *c = arg; c < eq; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_' || *c == '.' || *c == '/' || *c == '-'))
            return false;
    return true;
}

int stk_cli_open_data_as(const char *cmd, char *const *paths, int n_paths, unsigned flags,
                         const char *format, stk_dataset **out)
{
    if (n_paths <= 0)
        return stk_cli_usage_error(cmd, "no DATA given");
    stk_dataset_opts o;
    stk_dataset_opts_init(&o);
    o.paths = (const char *const *)paths;
    o.n_paths = (size_t)n_paths;
    o.flags = flags;
    o.format = format;
    o.cache_dir = g_cache_dir;
    o.cache_limit = g_cache_limit;
    /* every DATA argument NAME=PATH: one field per file, named (stk_dataset_opts.field_names) */
    int named = 0;
    while (named < n_paths && named_field_arg(paths[named]))
        named++;
    char **names = NULL;
    const char **files = NULL;
    if (named == n_paths) {
        names = calloc((size_t)n_paths, sizeof(*names));
        files = calloc((size_t)n_paths, sizeof(*files));
        bool ok = names && files;
        for (int i = 0; ok && i < n_paths; i++) {
            const char *eq = strchr(paths[i], '=');
            ok = (names[i] = strndup(paths[i], (size_t)(eq - paths[i]))) != NULL;
            files[i] = eq + 1;
        }
        o.field_names = (const char *const *)names;
        o.paths = files;
        if (!ok)
            named = -1; /* out of memory */
    }
    int rc = named < 0                          ? stk_cli_error(cmd, "out of memory")
             : stk_dataset_open_v2(&o, out) < 0 ? stk_cli_error(cmd, "%s", stk_last_errmsg())
                                                : 0;
    named = named < 0 ? n_paths : named;
    for (int i = 0; names && i < named; i++)
        free(names[i]);
    free(names);
    free(files);
    return rc;
}

/* ---- progress bar ---- */

double stk_cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void stk_cli_progress_start(stk_cli_progress *p, const char *cmd, uint64_t total, const char *unit,
                            bool quiet)
{
    memset(p, 0, sizeof(*p));
    p->cmd = cmd;
    p->unit = unit ? unit : "items";
    p->total = total;
    p->enabled = !quiet && isatty(STDERR_FILENO);
    p->start_s = stk_cli_now();
}

void stk_cli_progress_update(stk_cli_progress *p, uint64_t done, uint64_t bytes)
{
    if (!p->enabled)
        return;
    double now = stk_cli_now();
    if (now - p->last_draw_s < 0.1 && done != p->total)
        return;
    p->last_draw_s = now;
    double el = now - p->start_s;
    char line[160], rate[32] = "", eta[32] = "";
    int n = 0;
    if (p->total) {
        enum { W = 20 };
        int fill =
            (int)((double)W * (double)(done < p->total ? done : p->total) / (double)p->total);
        char bar[W + 1];
        for (int i = 0; i < W; i++)
            bar[i] = i < fill ? '#' : ' ';
        bar[W] = '\0';
        n = snprintf(line, sizeof(line), "[%s] %llu/%llu %s", bar, (unsigned long long)done,
                     (unsigned long long)p->total, p->unit);
    } else {
        n = snprintf(line, sizeof(line), "%llu %s", (unsigned long long)done, p->unit);
    }
    if (el > 0.05) {
        if (bytes)
            snprintf(rate, sizeof(rate), " %.1f MB/s", (double)bytes / el / 1e6);
        else
            snprintf(rate, sizeof(rate), " %.1f %s/s", (double)done / el, p->unit);
        if (p->total && done > 0 && done < p->total) {
            unsigned long s = (unsigned long)((double)(p->total - done) * el / (double)done);
            if (s >= 3600)
                snprintf(eta, sizeof(eta), " ETA %lu:%02lu:%02lu", s / 3600, s / 60 % 60, s % 60);
            else
                snprintf(eta, sizeof(eta), " ETA %lu:%02lu", s / 60, s % 60);
        }
    }
    n = snprintf(line + n, sizeof(line) - (size_t)n, "%s%s", rate, eta) + n;
    /* Pad over a longer previous line rather than rely on terminal escapes. */
    fprintf(stderr, "\r%s%*s", line, p->drawn > n ? p->drawn - n : 0, "");
    fflush(stderr);
    p->drawn = n;
}

void stk_cli_progress_end(stk_cli_progress *p)
{
    if (p->enabled && p->drawn) {
        fprintf(stderr, "\r%*s\r", p->drawn, "");
        fflush(stderr);
    }
    p->drawn = 0;
}

/* ---- JSON ---- */

size_t stk_cli_utf8_seq(const unsigned char *s, size_t n)
{
    if (n == 0)
        return 0;
    if (s[0] < 0x80)
        return 1;
    size_t len = s[0] >= 0xf5 ? 0 : s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
    if (len == 0 || len > n)
        return 0;
    for (size_t k = 1; k < len; k++)
        if ((s[k] & 0xc0) != 0x80)
            return 0;
    return len;
}

void stk_cli_json_string(FILE *f, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = u[i];
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc(c, f);
        } else if (c == '\n') {
            fputs("\\n", f);
        } else if (c == '\t') {
            fputs("\\t", f);
        } else if (c < 0x20 || c == 0x7f) {
            fprintf(f, "\\u%04x", c);
        } else if (c < 0x80) {
            fputc(c, f);
        } else {
            /* Copy a well-formed UTF-8 sequence; escape a stray byte as its code point. */
            size_t len = stk_cli_utf8_seq(u + i, n - i);
            if (len) {
                fwrite(u + i, 1, len, f);
                i += len - 1;
            } else {
                fprintf(f, "\\u%04x", c);
            }
        }
    }
    fputc('"', f);
}

const char *stk_cli_json_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

/* ---- reading JSON: members and items of validated values ---- */

const char *stk_cli_json_members(const char *obj)
{
    const char *p = stk_cli_json_ws(obj);
    return *p == '{' && stk_json_valid(obj) ? stk_cli_json_ws(p + 1) : NULL;
}

bool stk_cli_json_member(const char **p, const char **key, int *key_len, const char **val,
                         const char **val_end)
{
    if (**p != '"')
        return false;
    const char *k_end = stk_json_skip(*p);
    *key = *p + 1;
    *key_len = (int)(k_end - *p - 2);
    *val = stk_cli_json_ws(stk_cli_json_ws(k_end) + 1);
    *val_end = stk_json_skip(*val);
    *p = stk_cli_json_ws(*val_end);
    if (**p == ',')
        *p = stk_cli_json_ws(*p + 1);
    return true;
}

bool stk_cli_json_item(const char **p, const char **val, const char **val_end)
{
    if (**p == ']' || **p == '\0')
        return false;
    *val = *p;
    *val_end = stk_json_skip(*p);
    *p = stk_cli_json_ws(*val_end);
    if (**p == ',')
        *p = stk_cli_json_ws(*p + 1);
    return true;
}

const char *stk_cli_json_get(const char *obj, const char *key)
{
    size_t klen = strlen(key);
    const char *p = stk_cli_json_members(obj), *k, *v, *v_end;
    int k_len;
    while (p && stk_cli_json_member(&p, &k, &k_len, &v, &v_end))
        if ((size_t)k_len == klen && strncmp(k, key, klen) == 0)
            return v;
    return NULL;
}

double stk_cli_json_num(const char *obj, const char *key)
{
    const char *v = stk_cli_json_get(obj, key);
    return v && (*v == '-' || (*v >= '0' && *v <= '9')) ? strtod(v, NULL) : NAN;
}

void stk_cli_json_str(const char *v, char *out, size_t size)
{
    size_t n = 0;
    for (const char *p = v + 1; *p && *p != '"' && n + 5 < size; p++) {
        unsigned cp = (unsigned char)*p;
        if (*p == '\\') {
            p++;
            const char *esc = strchr("b\bf\fn\nr\rt\t", *p);
            if (*p == 'u') {
                cp = (unsigned)strtoul((char[5]){p[1], p[2], p[3], p[4], 0}, NULL, 16);
                p += 4;
                if (cp >= 0xd800 && cp < 0xdc00 && p[1] == '\\' && p[2] == 'u') {
                    unsigned lo = (unsigned)strtoul((char[5]){p[3], p[4], p[5], p[6], 0}, NULL, 16);
                    if (lo >= 0xdc00 && lo < 0xe000) {
                        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                        p += 6;
                    }
                }
                if (cp >= 0xd800 && cp < 0xe000)
                    cp = 0xfffd;
            } else {
                cp = esc && *p ? (unsigned char)esc[1] : (unsigned char)*p;
            }
            if (cp >= 0x80) { /* UTF-8 encode */
                if (cp < 0x800) {
                    out[n++] = (char)(0xc0 | cp >> 6);
                } else if (cp < 0x10000) {
                    out[n++] = (char)(0xe0 | cp >> 12);
                    out[n++] = (char)(0x80 | (cp >> 6 & 0x3f));
                } else {
                    out[n++] = (char)(0xf0 | cp >> 18);
                    out[n++] = (char)(0x80 | (cp >> 12 & 0x3f));
                    out[n++] = (char)(0x80 | (cp >> 6 & 0x3f));
                }
                cp = 0x80 | (cp & 0x3f);
            }
        }
        out[n++] = (char)cp;
    }
    out[n] = '\0';
}

long stk_cli_count_classes(const char *meta)
{
    const char *p = stk_cli_json_members(meta), *key, *v, *v_end;
    int key_len;
    while (p && stk_cli_json_member(&p, &key, &key_len, &v, &v_end))
        if (key_len == 7 && strncmp(key, "classes", 7) == 0 && *v == '[') {
            long n = 0;
            const char *q = stk_cli_json_ws(v + 1), *item, *item_end;
            while (stk_cli_json_item(&q, &item, &item_end))
                n++;
            return n;
        }
    return -1;
}

const char *stk_cli_recipes(char *buf, size_t size)
{
    int n = snprintf(buf, size, "raw");
    for (size_t i = 0; i < stk_n_recipes() && n > 0 && (size_t)n < size; i++)
        n += snprintf(buf + n, size - (size_t)n, ", %s", stk_recipe_name(i));
    return buf;
}

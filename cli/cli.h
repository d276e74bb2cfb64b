/*
 * cli.h: the `stoker` command-line tool: one entry point per command and the helpers they
 * share (errors, number and size parsing, dataset opening, progress bar, JSON output). The CLI
 * uses the public API only (include/stoker.h), as zstd's programs/ do.
 *
 * Exit codes: 0 success, 1 runtime failure (printed as "stoker <cmd>: <message>" on stderr),
 * 2 usage error (unknown command or option, bad value).
 */
#ifndef STK_CLI_H
#define STK_CLI_H

/* The doctor's decision (stk_diagnose) and the sampler are building blocks. */
#define STK_BUILDING_BLOCKS
#include "stoker.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* The whole command line: argv[0] is the program, argv[1] the command; returns the exit code.
 * Called once per process: by main (main.c) and by `python -m stoker` (the extension's
 * _cli.c), which flushes stdout and stderr after it. */
int stk_cli_main(int argc, char **argv);

/* ---- commands: argv[0] is the command name; each returns the process exit code ---- */

int stk_cmd_pack(int argc, char **argv);    /* cmd_pack.c */
int stk_cmd_inspect(int argc, char **argv); /* cmd_inspect.c */
int stk_cmd_verify(int argc, char **argv);  /* cmd_inspect.c */
int stk_cmd_bench(int argc, char **argv);   /* cmd_bench.c */
int stk_cmd_doctor(int argc, char **argv);  /* cmd_doctor.c */

/* ---- errors ---- */

/* Print "stoker <cmd>: <message>\n" on stderr; returns 1, the runtime-failure exit code. */
int stk_cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Print "stoker <cmd>: <message>\nTry 'stoker <cmd> --help'.\n" on stderr; returns 2. */
int stk_cli_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The message for a getopt_long() failure (c is '?' or ':'; the option string must start with
 * ':' so a missing value reports ':'), via stk_cli_usage_error; returns 2. */
int stk_cli_getopt_error(const char *cmd, int c, char **argv);

/* ---- parsing ---- */

/* Parse a decimal integer in [min, max] into *out. On failure prints "stoker: <what>: ..." on
 * stderr and returns nonzero. */
int stk_cli_parse_int(const char *s, const char *what, long long min, long long max,
                      long long *out);

/* Parse a byte size: plain bytes ("4096") or a number with a binary suffix k/K, m/M, g/G, t/T
 * (optionally followed by "B" or "iB": "512M", "1G", "100k", "1.5GiB"). Returns 0, or -1 when
 * malformed, zero or over 2^62. */
int stk_cli_parse_size(const char *s, uint64_t *out);

/* "1.2 GB", "512 B": decimal units for humans; buf receives at most size bytes. */
const char *stk_cli_format_size(uint64_t bytes, char *buf, size_t size);

/* ---- data ---- */

/* Print "formats (--format NAME; detected when left out):" and one line per format the library
 * reads, name and summary, for a command's --help. */
void stk_cli_print_formats(FILE *f);

/* Open the dataset named by the DATA arguments (each a .stk file, a directory of shards or a
 * glob, passed through to stk_dataset_open; when every argument is NAME=PATH naming no file,
 * `image=x.npy label=y.npy`, one field per file named NAME: stk_dataset_opts.field_names). On
 * failure prints "stoker <cmd>: <why>" (the message names the file) and returns 1; else 0 with
 * *out set. */
int stk_cli_open_data(const char *cmd, char *const *paths, int n_paths, unsigned flags,
                      stk_dataset **out);

/* Compile recipe `name` for bench and doctor: --exact (`exact`) forces the exact decode, --fast
 * (`fast`) the fast one; with neither, a recipe whose ops draw nothing from the sample's stream
 * (imagenet-val) decodes exactly, as stoker.transforms.compile decides (issue 24). *exact_out
 * says which was used. Returns 0, or 2 after printing a usage error (both flags, an unknown
 * recipe). */
int stk_cli_recipe(const char *cmd, const char *name, bool exact, bool fast, stk_transform **out,
                   bool *exact_out);

/* Whether a field of this name holds encoded audio: `audio` (an audio folder's), or an audio
 * file's extension (a WebDataset member's, as the loader's transform-field pick reads them). */
bool stk_cli_audio_field_name(const char *name);
/* stk_cli_open_data of a given format (NULL: detect it; --format NAME). */
int stk_cli_open_data_as(const char *cmd, char *const *paths, int n_paths, unsigned flags,
                         const char *format, stk_dataset **out);

/* --cache-dir DIR / --cache-limit SIZE (inspect, verify, bench): the on-disk cache of remote
 * data (stk_dataset_opts.cache_dir / cache_limit), which stk_cli_open_data passes on. Commands
 * add STK_CLI_CACHE_LONGOPTS to their options, STK_CLI_CACHE_HELP to their help, and hand
 * those two option codes to stk_cli_cache_option. The CLI reads one dataset per process. */
enum { STK_CLI_OPT_CACHE_DIR = 0x1000, STK_CLI_OPT_CACHE_LIMIT };
#define STK_CLI_CACHE_LONGOPTS                                                                     \
    {"cache-dir", required_argument, NULL, STK_CLI_OPT_CACHE_DIR},                                 \
    {                                                                                              \
        "cache-limit", required_argument, NULL, STK_CLI_OPT_CACHE_LIMIT                            \
    }
#define STK_CLI_CACHE_HELP                                                                         \
    "  --cache-dir DIR     cache the bytes of s3:// and http(s):// DATA in DIR, shared by\n"       \
    "                      every process (default: $STOKER_CACHE_DIR; unset: no cache)\n"          \
    "  --cache-limit SIZE  at most SIZE there (\"20G\"; default: $STOKER_CACHE_LIMIT or 10G)\n"

/* Keep the value of a cache option (c: STK_CLI_OPT_CACHE_*). */
void stk_cli_cache_option(int c, const char *arg);
/* The cache options given (NULL when not). */
void stk_cli_cache_settings(const char **dir, const char **limit);

/* ---- token corpora in stoker inspect (inspect_tokens.c) ---- */

enum {
    STK_CLI_OPT_EOS = 0x1100,
    STK_CLI_OPT_BOS,
    STK_CLI_OPT_TOKEN_BYTES,
    STK_CLI_OPT_SEQ_LEN,
    STK_CLI_OPT_TOKENS,
    STK_CLI_OPT_PACKING
};
#define STK_CLI_TOKEN_LONGOPTS                                                                     \
    {"eos", required_argument, NULL, STK_CLI_OPT_EOS},                                             \
        {"bos", required_argument, NULL, STK_CLI_OPT_BOS},                                         \
        {"token-bytes", required_argument, NULL, STK_CLI_OPT_TOKEN_BYTES},                         \
        {"seq-len", required_argument, NULL, STK_CLI_OPT_SEQ_LEN},                                 \
        {"tokens", required_argument, NULL, STK_CLI_OPT_TOKENS},                                   \
    {                                                                                              \
        "packing", required_argument, NULL, STK_CLI_OPT_PACKING                                    \
    }
#define STK_CLI_TOKEN_HELP                                                                         \
    "token corpora (docs/tokens.md; any option opens DATA as one):\n"                              \
    "  --eos ID            a document ends after each token ID (files without an index)\n"         \
    "  --bos ID            a document starts at each token ID\n"                                   \
    "  --token-bytes N     2 (uint16, default) or 4: ids of headerless files\n"                    \
    "  --seq-len T         also make rows of T tokens and report them\n"                           \
    "  --tokens MODE       windows (default with --seq-len), random, packed\n"                     \
    "  --packing RULE      best-fit (default) or first-fit\n"

/* The token options of one command: any given, and stk_tokens_opts (mode DOCUMENTS until
 * --seq-len). */
typedef struct stk_cli_tokens {
    bool any;
    stk_tokens_opts o;
} stk_cli_tokens;
void stk_cli_tokens_init(stk_cli_tokens *t);
/* Take option c (STK_CLI_OPT_EOS..PACKING); 0, or 2 after a usage error. */
int stk_cli_tokens_option(const char *cmd, int c, const char *arg, stk_cli_tokens *t);
/* Open DATA with stk_tokens_open; as stk_cli_open_data_as. */
int stk_cli_open_tokens(const char *cmd, char *const *paths, int n_paths, unsigned flags,
                        const char *format, stk_cli_tokens *t, stk_dataset **out);
/* The token facts of ds (nothing when it is not a token dataset): a text section, or a
 * `, "tokens": {...}` member of inspect's JSON object. */
void stk_cli_tokens_text(const stk_dataset *ds);
void stk_cli_tokens_json(const stk_dataset *ds);

/* The names --recipe takes, "raw, imagenet-train, imagenet-val": raw, then the library's
 * recipes (stk_recipe_name), into buf. */
const char *stk_cli_recipes(char *buf, size_t size);

/* Number of items of the "classes" array of a metadata object, or -1 (stk_cli.c). */
long stk_cli_count_classes(const char *meta);

/* ---- progress bar: "[#####     ] 1234/5000 records 12.3 MB/s ETA 0:05" on stderr ---- */

typedef struct stk_cli_progress {
    const char *cmd;
    const char *unit; /* "records", "batches", ... */
    uint64_t total;   /* 0 = unknown: no bar, no ETA */
    bool enabled;     /* stderr is a TTY and not quiet */
    double start_s;   /* monotonic seconds at start */
    double last_draw_s;
    int drawn; /* width of the last line drawn, to clear it */
} stk_cli_progress;

/* Start a progress display; it draws only when stderr is a TTY and `quiet` is false. */
void stk_cli_progress_start(stk_cli_progress *p, const char *cmd, uint64_t total, const char *unit,
                            bool quiet);

/* Report `done` units (and `bytes` processed, 0 if not counted) so far; redraws at most ten
 * times a second, and always at done == total. Threads: call from one thread. */
void stk_cli_progress_update(stk_cli_progress *p, uint64_t done, uint64_t bytes);

/* Erase the bar, so later output starts on a clean line. */
void stk_cli_progress_end(stk_cli_progress *p);

/* Monotonic clock in seconds. */
double stk_cli_now(void);

/* ---- the loader run loop (stk_cli_run.c) ---- */

/* One loader run as stk_cli_loader_run drives it; the callback sees it filled so far. */
typedef struct stk_cli_run {
    stk_loader *loader;     /* valid during the callbacks (stats, trace), NULL after */
    stk_loader_info info;   /* the resolved settings, from create */
    double start_s;         /* stk_cli_now() before stk_loader_create */
    double arrived_s;       /* when the last stk_loader_next returned */
    double wait_s;          /* how long it blocked */
    double end_s;           /* when the callback stopped the run */
    uint64_t batches;       /* batches handed to the callback so far (this one included) */
    uint64_t epochs;        /* STK_END seen so far */
    stk_loader_stats stats; /* at the end of the run (cumulative since create) */
} stk_cli_run;

/* Called with each batch (b, released by the loop when the callback returns), and with b NULL
 * at each end of an epoch; returns nonzero to end the run. */
typedef int (*stk_cli_batch_fn)(stk_cli_run *run, stk_batch *b, void *ctx);

/* Create a loader with *o, hand its batches to fn until fn returns nonzero, read the stats,
 * write the trace to `trace` (when not NULL; o->trace_events must be set) and destroy it.
 * Returns 0, or 1 with "stoker <cmd>: <why>" printed (the progress bar `prog`, when given, is
 * ended first). */
int stk_cli_loader_run(const char *cmd, const stk_loader_opts *o, const char *trace,
                       stk_cli_progress *prog, stk_cli_batch_fn fn, void *ctx, stk_cli_run *run);

/* User + system CPU seconds of this process so far, every thread (stk_cli_run.c). */
double stk_cli_process_cpu_s(void);

/* ---- JSON output ---- */

/* Length of the well-formed UTF-8 sequence at s (1 for ASCII), or 0 if there is none. */
size_t stk_cli_utf8_seq(const unsigned char *s, size_t n);

/* Write `n` bytes of `s` as a JSON string literal (quotes included; control characters and
 * invalid UTF-8 escaped as \u00XX). */
void stk_cli_json_string(FILE *f, const char *s, size_t n);

/* Skip JSON whitespace. */
const char *stk_cli_json_ws(const char *p);

/* ---- JSON input: walking values the library's one reader (stk_json_skip, stk_json_valid)
 * checks (metadata, the profiler's report) ---- */

/* The first member of `obj` if it is a valid JSON object (the position to give
 * stk_cli_json_member), else NULL. */
const char *stk_cli_json_members(const char *obj);

/* Step through the members of a validated object: from *p (at a key, or at the closing brace),
 * set the key (without quotes, escapes as written) and the value's extent, and move *p to the
 * next member. Returns false at the end. */
bool stk_cli_json_member(const char **p, const char **key, int *key_len, const char **val,
                         const char **val_end);

/* Step through the items of a validated array: *p starts just inside '[' (after whitespace);
 * sets the item's extent and moves *p to the next. Returns false at the end. */
bool stk_cli_json_item(const char **p, const char **val, const char **val_end);

/* The value of member `key` of the JSON object `obj`, or NULL when obj is not a valid object or
 * has no such member (keys with escapes never match). */
const char *stk_cli_json_get(const char *obj, const char *key);

/* A number member as a double; NAN when absent, null or not a number. */
double stk_cli_json_num(const char *obj, const char *key);

/* Decode the JSON string literal at v into out (at most size bytes, truncated, NUL-terminated);
 * \u escapes become UTF-8 (surrogate pairs joined; a lone one becomes U+FFFD). */
void stk_cli_json_str(const char *v, char *out, size_t size);

#endif /* STK_CLI_H */

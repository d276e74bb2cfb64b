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

#include "stoker.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

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

/* Open the dataset named by the DATA arguments (each a .stk file, a directory of shards or a
 * glob, passed through to stk_dataset_open). On failure prints "stoker <cmd>: <why>" (the
 * message names the file) and returns 1; else 0 with *out set. */
int stk_cli_open_data(const char *cmd, char *const *paths, int n_paths, unsigned flags,
                      stk_dataset **out);

/* stk_cli_open_data of a given format (NULL: detect it; --format NAME). */
int stk_cli_open_data_as(const char *cmd, char *const *paths, int n_paths, unsigned flags,
                         const char *format, stk_dataset **out);

/* Number of items of the "classes" array of a metadata object, or -1 (cmd_inspect.c). */
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

/* ---- JSON output ---- */

/* Length of the well-formed UTF-8 sequence at s (1 for ASCII), or 0 if there is none. */
size_t stk_cli_utf8_seq(const unsigned char *s, size_t n);

/* Write `n` bytes of `s` as a JSON string literal (quotes included; control characters and
 * invalid UTF-8 escaped as \u00XX). */
void stk_cli_json_string(FILE *f, const char *s, size_t n);

/* Skip leading whitespace and one JSON value at p (nesting at most 64 deep); returns the
 * position just after the value, or NULL when it is malformed. */
const char *stk_cli_json_skip(const char *p);

/* Skip JSON whitespace. */
const char *stk_cli_json_ws(const char *p);

/* Whether `s` is one complete, valid JSON value (surrounding whitespace allowed). */
bool stk_cli_json_valid(const char *s);

#endif /* STK_CLI_H */

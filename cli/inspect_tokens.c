/*
 * inspect_tokens.c: token corpora in `stoker inspect` (docs/tokens.md): the token options
 * (--eos, --bos, --token-bytes, --seq-len, --tokens, --packing), opening DATA with them through
 * stk_tokens_open, and the corpus' facts: tokens, documents, the longest one, a histogram of
 * document lengths (powers of two), and with --seq-len the rows and their padding.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static const char *const mode_names[] = {"windows", "random", "packed", "documents"};
static const char *const packing_names[] = {"best-fit", "first-fit"};

void stk_cli_tokens_init(stk_cli_tokens *t)
{
    memset(t, 0, sizeof(*t));
    stk_tokens_opts_init(&t->o);
    t->o.mode = STK_TOKENS_DOCUMENTS;
}

int stk_cli_tokens_option(const char *cmd, int c, const char *arg, stk_cli_tokens *t)
{
    long long v;
    t->any = true;
    switch (c) {
    case STK_CLI_OPT_EOS:
    case STK_CLI_OPT_BOS:
        if (stk_cli_parse_int(arg, c == STK_CLI_OPT_EOS ? "--eos" : "--bos", 0, INT64_MAX, &v))
            return 2;
        if (c == STK_CLI_OPT_EOS)
            t->o.eos = v;
        else
            t->o.bos = v;
        return 0;
    case STK_CLI_OPT_TOKEN_BYTES:
        if (stk_cli_parse_int(arg, "--token-bytes", 2, 4, &v) || v == 3)
            return stk_cli_usage_error(cmd, "--token-bytes: 2 (uint16) or 4 (uint32)");
        t->o.token_bytes = (uint32_t)v;
        return 0;
    case STK_CLI_OPT_SEQ_LEN:
        if (stk_cli_parse_int(arg, "--seq-len", 1, 1 << 30, &v))
            return 2;
        t->o.seq_len = (uint32_t)v;
        if (t->o.mode == STK_TOKENS_DOCUMENTS)
            t->o.mode = STK_TOKENS_WINDOWS;
        return 0;
    case STK_CLI_OPT_TOKENS:
        for (uint32_t m = 0; m < 4; m++)
            if (strcmp(arg, mode_names[m]) == 0) {
                t->o.mode = m;
                return 0;
            }
        return stk_cli_usage_error(cmd, "--tokens: windows, random, packed or documents");
    default: /* STK_CLI_OPT_PACKING */
        for (uint32_t p = 0; p < 2; p++)
            if (strcmp(arg, packing_names[p]) == 0) {
                t->o.packing = p;
                return 0;
            }
        return stk_cli_usage_error(cmd, "--packing: best-fit or first-fit");
    }
}

int stk_cli_open_tokens(const char *cmd, char *const *paths, int n_paths, unsigned flags,
                        const char *format, stk_cli_tokens *t, stk_dataset **out)
{
    if (n_paths <= 0)
        return stk_cli_usage_error(cmd, "no DATA given");
    if (t->o.mode != STK_TOKENS_DOCUMENTS && t->o.seq_len == 0)
        return stk_cli_usage_error(cmd, "--tokens %s needs --seq-len", mode_names[t->o.mode]);
    t->o.paths = (const char *const *)paths;
    t->o.n_paths = (size_t)n_paths;
    t->o.flags = flags;
    t->o.format = format;
    stk_cli_cache_settings(&t->o.cache_dir, &t->o.cache_limit);
    if (stk_tokens_open(&t->o, out) < 0)
        return stk_cli_error(cmd, "%s", stk_last_errmsg());
    return 0;
}

/* "12,345,678" */
static const char *grouped(uint64_t v, char *buf, size_t size)
{
    char raw[32];
    int n = snprintf(raw, sizeof(raw), "%llu", (unsigned long long)v), o = 0;
    for (int i = 0; i < n && (size_t)o + 2 < size; i++) {
        if (i && (n - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = raw[i];
    }
    buf[o] = '\0';
    return buf;
}

void stk_cli_tokens_text(const stk_dataset *ds)
{
    stk_tokens_info in = {.struct_size = sizeof(in)};
    if (stk_tokens_info_get(ds, &in) < 0)
        return;
    char a[32], b[32];
    printf("\ntokens:\n");
    printf("  format:      %s (%u-byte ids)\n", in.format, in.token_bytes);
    printf("  tokens:      %s\n", grouped(in.n_tokens, a, sizeof(a)));
    if (in.boundaries)
        printf("  documents:   %s\n", grouped(in.n_documents, a, sizeof(a)));
    else
        printf("  documents:   %s (one per file: no boundaries known; give --eos or --bos)\n",
               grouped(in.n_documents, a, sizeof(a)));
    printf("  longest:     %s tokens\n", grouped(in.max_document, a, sizeof(a)));
    if (in.mode != STK_TOKENS_DOCUMENTS) {
        printf("  rows:        %s %s rows of %u", grouped(in.n_rows, a, sizeof(a)),
               mode_names[in.mode], in.seq_len);
        if (in.mode == STK_TOKENS_PACKED && in.n_rows)
            printf(" (%s, padding %s positions = %.2f%%)", packing_names[in.packing],
                   grouped(in.n_padding, b, sizeof(b)),
                   100.0 * (double)in.n_padding / ((double)in.n_rows * in.seq_len));
        if (in.n_unused)
            printf(" (%s tokens in no row: the tail)", grouped(in.n_unused, b, sizeof(b)));
        printf("\n");
    }
    uint64_t top = 1;
    int last = 47, first = 0;
    while (last > 0 && !in.doc_hist[last])
        last--;
    while (first < last && !in.doc_hist[first])
        first++;
    for (int k = first; k <= last; k++)
        top = in.doc_hist[k] > top ? in.doc_hist[k] : top;
    printf("  document lengths (tokens):\n");
    for (int k = first; k <= last; k++) {
        uint64_t lo = k ? 1ull << k : 0, hi = (2ull << k) - 1;
        char bar[41];
        int w = (int)(40 * in.doc_hist[k] / top);
        memset(bar, '#', (size_t)w);
        bar[w] = '\0';
        printf("  %12llu - %-12llu %12s  %s\n", (unsigned long long)lo, (unsigned long long)hi,
               grouped(in.doc_hist[k], a, sizeof(a)), bar);
    }
}

void stk_cli_tokens_json(const stk_dataset *ds)
{
    stk_tokens_info in = {.struct_size = sizeof(in)};
    if (stk_tokens_info_get(ds, &in) < 0)
        return;
    printf(", \"tokens\": {\"format\": \"%s\", \"token_bytes\": %u, \"n_tokens\": %llu, "
           "\"n_documents\": %llu, \"boundaries\": %s, \"max_document\": %llu, \"mode\": \"%s\", "
           "\"seq_len\": %u, \"n_rows\": %llu, \"n_padding\": %llu, \"n_unused\": %llu, "
           "\"doc_hist\": [",
           in.format, in.token_bytes, (unsigned long long)in.n_tokens,
           (unsigned long long)in.n_documents, in.boundaries ? "true" : "false",
           (unsigned long long)in.max_document, mode_names[in.mode % 4], in.seq_len,
           (unsigned long long)in.n_rows, (unsigned long long)in.n_padding,
           (unsigned long long)in.n_unused);
    int last = 47;
    while (last > 0 && !in.doc_hist[last])
        last--;
    for (int k = 0; k <= last; k++)
        printf("%s%llu", k ? ", " : "", (unsigned long long)in.doc_hist[k]);
    printf("]}");
}

/*
 * train_tokens.c: the data side of an llm.c-style C trainer on libstoker (docs/tokens.md "From
 * C"). It opens a token corpus (nanoGPT .bin, llm.c shards, a Megatron .idx/.bin, numpy tokens,
 * a .stk token column), makes rows of T tokens, and loops over batches of int32 inputs and
 * targets [B, T], what llm.c's gpt2_forward(model, inputs, targets, B, T) takes. The "training
 * step" here is a stand-in: a unigram model over hashed ids, whose loss on the batch is printed
 * before it counts the batch. Each step prints a checksum of the batch, so runs can be compared
 * (tests/cli/test_tokens.sh resumes one from a saved state and checks the batches that follow).
 *
 *   make examples
 *   build/examples/train_tokens train.bin --seq-len 1024 --batch 8 --steps 100
 *   build/examples/train_tokens 'fineweb_train_*.bin' --steps 50 --save-state s.json --save-at 20
 *   build/examples/train_tokens 'fineweb_train_*.bin' --steps 30 --resume s.json
 *
 * Ranks come from RANK/WORLD_SIZE (torchrun), SLURM or Open MPI, or --rank/--world: each rank
 * gets its slice of every global batch, and a state saved on any number of ranks resumes on any
 * other. Build line for your own trainer: cc train.c -Ipath/to/include path/to/libstoker.a
 * $(pkg-config --libs libturbojpeg spng libxxhash libwebp libtiff-4 hdf5 lmdb libcurl libcrypto
 * zlib) -ljpeg -lpthread -ldl -lm (or -lstoker with the shared library).
 */
#include "stoker.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUCKETS 65536

static void usage(void)
{
    fprintf(stderr,
            "usage: train_tokens DATA... [--seq-len T] [--batch B] [--steps N] [--threads N]\n"
            "       [--tokens windows|random|packed] [--eos ID] [--format NAME] [--seed S]\n"
            "       [--no-shuffle] [--save-state FILE --save-at K] [--resume FILE]\n"
            "       [--rank R --world W]\n");
}

/* FNV-1a over bytes, for the per-step checksum. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Read a whole small file (a resume state) into a fresh string. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = calloc(1, 65536);
    size_t n = buf ? fread(buf, 1, 65535, f) : 0;
    fclose(f);
    if (buf && n == 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

int main(int argc, char **argv)
{
    const char *paths[64];
    size_t n_paths = 0;
    const char *format = NULL, *save = NULL, *resume = NULL, *mode = "windows";
    long long seq_len = 64, batch = 4, steps = 10, threads = 2, eos = -1, seed = 0, save_at = -1;
    long long rank = -1, world = -1;
    int shuffle = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long *num = !strcmp(a, "--seq-len")   ? &seq_len
                         : !strcmp(a, "--batch")   ? &batch
                         : !strcmp(a, "--steps")   ? &steps
                         : !strcmp(a, "--threads") ? &threads
                         : !strcmp(a, "--eos")     ? &eos
                         : !strcmp(a, "--seed")    ? &seed
                         : !strcmp(a, "--save-at") ? &save_at
                         : !strcmp(a, "--rank")    ? &rank
                         : !strcmp(a, "--world")   ? &world
                                                   : NULL;
        if (num && v) {
            *num = strtoll(v, NULL, 10);
            i++;
        } else if (!strcmp(a, "--tokens") && v) {
            mode = argv[++i];
        } else if (!strcmp(a, "--format") && v) {
            format = argv[++i];
        } else if (!strcmp(a, "--save-state") && v) {
            save = argv[++i];
        } else if (!strcmp(a, "--resume") && v) {
            resume = argv[++i];
        } else if (!strcmp(a, "--no-shuffle")) {
            shuffle = 0;
        } else if (a[0] == '-' || n_paths == 64) {
            usage();
            return 2;
        } else {
            paths[n_paths++] = a;
        }
    }
    if (n_paths == 0) {
        usage();
        return 2;
    }

    /* The corpus as rows of T tokens: int32 ids, as llm.c's int arrays. */
    stk_tokens_opts to;
    stk_tokens_opts_init(&to);
    to.paths = paths;
    to.n_paths = n_paths;
    to.format = format;
    to.seq_len = (uint32_t)seq_len;
    to.mode = !strcmp(mode, "random")   ? STK_TOKENS_RANDOM
              : !strcmp(mode, "packed") ? STK_TOKENS_PACKED
                                        : STK_TOKENS_WINDOWS;
    to.eos = eos;
    to.ids_dtype = STK_DTYPE_INT32;
    stk_dataset *ds;
    if (stk_tokens_open(&to, &ds) != STK_OK) {
        fprintf(stderr, "train_tokens: %s\n", stk_last_errmsg());
        return 1;
    }
    stk_tokens_info info = {.struct_size = sizeof(info)};
    stk_tokens_info_get(ds, &info);
    fprintf(stderr, "train_tokens: %s, %llu tokens, %llu documents, %llu rows of %u\n", info.format,
            (unsigned long long)info.n_tokens, (unsigned long long)info.n_documents,
            (unsigned long long)info.n_rows, info.seq_len);

    stk_loader_opts lo;
    stk_loader_opts_init(&lo);
    lo.dataset = ds;
    lo.batch_size = batch;
    lo.n_threads = (int32_t)threads;
    lo.seed = (uint64_t)seed;
    lo.rank = (int32_t)rank;
    lo.world = (int32_t)world;
    lo.flags = shuffle ? STK_LOADER_SHUFFLE : 0;
    stk_loader *L;
    if (stk_loader_create(&lo, &L) != STK_OK) {
        fprintf(stderr, "train_tokens: %s\n", stk_last_errmsg());
        stk_dataset_close(ds);
        return 1;
    }
    int rc = 0;
    if (resume) {
        char *state = slurp(resume);
        if (!state || stk_loader_load_state(L, state) != STK_OK) {
            fprintf(stderr, "train_tokens: %s: %s\n", resume,
                    state ? stk_loader_errmsg(L) : "cannot read the state");
            free(state);
            rc = 1;
            goto done;
        }
        free(state);
    }

    static uint64_t counts[BUCKETS];
    uint64_t total = 0;
    for (long long step = 1; step <= steps; step++) {
        stk_batch *b;
        stk_status s = stk_loader_next(L, &b);
        if (s == STK_END) { /* the epoch ended: the next call starts the next one */
            step--;
            continue;
        }
        if (s != STK_OK) {
            fprintf(stderr, "train_tokens: %s\n", stk_loader_errmsg(L));
            rc = 1;
            break;
        }
        stk_tensor inputs, targets;
        stk_tensor_init(&inputs);
        stk_tensor_init(&targets);
        stk_batch_tensor(b, 0, &inputs);  /* input_ids, int32 [B, T] */
        stk_batch_tensor(b, 1, &targets); /* labels, int32 [B, T] (-100: no target) */
        const int32_t *x = inputs.data, *y = targets.data;
        size_t n = (size_t)inputs.shape[0] * (size_t)inputs.shape[1];
        /* the stand-in for forward/backward: a unigram model's loss, then its update */
        double loss = 0;
        size_t scored = 0;
        for (size_t i = 0; i < n; i++) {
            if (y[i] < 0)
                continue;
            uint32_t k = (uint32_t)y[i] % BUCKETS;
            loss -= log((double)(counts[k] + 1) / (double)(total + BUCKETS));
            scored++;
        }
        for (size_t i = 0; i < n; i++)
            if (y[i] >= 0) {
                counts[(uint32_t)y[i] % BUCKETS]++;
                total++;
            }
        uint64_t h = fnv(fnv(1469598103934665603ull, x, n * 4), y, n * 4);
        printf("step %lld epoch %llu batch %llu rows %u loss %.4f sum %016llx first %d\n", step,
               (unsigned long long)stk_batch_epoch(b), (unsigned long long)stk_batch_number(b),
               stk_batch_n_samples(b), scored ? loss / (double)scored : 0.0, (unsigned long long)h,
               (int)x[0]);
        stk_batch_release(b);
        if (save && step == save_at) {
            char state[512];
            FILE *f = fopen(save, "w");
            if (!f || stk_loader_save_state(L, state, sizeof(state)) != STK_OK ||
                fputs(state, f) < 0) {
                fprintf(stderr, "train_tokens: cannot save the state to %s\n", save);
                rc = 1;
            }
            if (f)
                fclose(f);
        }
    }
done:
    stk_loader_destroy(L);
    stk_dataset_close(ds);
    return rc;
}

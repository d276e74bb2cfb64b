/*
 * cmd_pack.c: `stoker pack SRC OUT`: convert a dataset of any format stoker reads (an ImageFolder
 * tree, `.stk` shards, `.npy` files, ...) into `.stk` shards, through the library's one packer
 * (stk_pack), which the Python stoker.pack uses too.
 *
 * An ImageFolder tree is read exactly as torchvision.datasets.ImageFolder reads it (the record
 * source src/source/folder/stk_src_folder.c), so labels and order match a PyTorch pipeline on the
 * same folder: each image becomes one record with image (bytes: the file as stored, not
 * re-encoded), label (int64) and path (bytes: the path relative to SRC). docs/format.md has the
 * worked example.
 */
#include "cli.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#define CMD "pack"

typedef struct pack_args {
    const char *src, *out, *format;
    uint64_t shard_size; /* 0 = by OUT's name */
    uint32_t align;
    bool quiet, force;
} pack_args;

static void on_progress(void *ctx, uint64_t done, uint64_t total, uint64_t bytes)
{
    (void)total;
    stk_cli_progress_update(ctx, done, bytes);
}

static int pack(const pack_args *a)
{
    stk_dataset *ds = NULL;
    double t0 = stk_cli_now();
    stk_dataset_opts dopts;
    stk_dataset_opts_init(&dopts);
    const char *paths[1] = {a->src};
    dopts.paths = paths;
    dopts.n_paths = 1;
    dopts.format = a->format;
    if (stk_dataset_open_v2(&dopts, &ds) != STK_OK)
        return stk_cli_error(CMD, "%s", stk_last_errmsg());
    char tool[64];
    snprintf(tool, sizeof(tool), "stoker pack %s", stk_version_string());
    stk_cli_progress prog;
    stk_cli_progress_start(&prog, CMD, stk_dataset_n_records(ds), "records", a->quiet);
    stk_pack_opts o;
    stk_pack_opts_init(&o);
    o.shard_size = a->shard_size;
    o.align = a->align;
    o.force = a->force;
    o.tool = tool;
    o.progress = on_progress;
    o.progress_ctx = &prog;
    stk_pack_result r = {.struct_size = sizeof(r)};
    stk_status rc = stk_pack(ds, a->out, &o, &r);
    stk_cli_progress_end(&prog);
    if (rc != STK_OK) {
        stk_cli_error(CMD, "%s", stk_last_errmsg());
        stk_dataset_close(ds);
        return 1;
    }
    stk_shard_info si = {.struct_size = sizeof(si)};
    long classes =
        stk_dataset_shard(ds, 0, &si) == STK_OK ? stk_cli_count_classes(si.metadata) : -1;
    if (!a->quiet) {
        char b1[32], b2[32], cls[32] = "";
        double secs = stk_cli_now() - t0;
        if (classes >= 0)
            snprintf(cls, sizeof(cls), " (%ld classes)", classes);
        printf("packed %llu records%s from %s (%s) into %llu shard%s in %s: %s of records, %s on "
               "disk, %.2f s (%.1f MB/s)\n",
               (unsigned long long)r.records, cls, a->src, stk_dataset_format(ds),
               (unsigned long long)r.shards, r.shards == 1 ? "" : "s", a->out,
               stk_cli_format_size(r.bytes, b1, sizeof(b1)),
               stk_cli_format_size(r.file_bytes, b2, sizeof(b2)), secs,
               secs > 0 ? (double)r.bytes / secs / 1e6 : 0.0);
        const char *skipped = strstr(si.metadata ? si.metadata : "", "\"n_skipped\": ");
        if (skipped && atoll(skipped + 13) > 0)
            fprintf(stderr,
                    "stoker %s: skipped %lld entries of %s that are not regular files (FIFOs, "
                    "sockets, devices); the shards' metadata lists them under \"skipped\"\n",
                    CMD, atoll(skipped + 13), a->src);
    }
    stk_dataset_close(ds);
    return 0;
}

static void usage(FILE *f)
{
    char exts[128] = ""; /* the library's list (stk_image_extension) */
    for (size_t i = 0, n = 0; i < stk_n_image_extensions() && n < sizeof(exts); i++)
        n += (size_t)snprintf(exts + n, sizeof(exts) - n, "%s%s", i ? " " : "",
                              stk_image_extension(i));
    fprintf(
        f,
        "usage: stoker pack SRC OUT [--format NAME] [--shard-size SIZE] [--align N] [--force]\n"
        "                  [--quiet]\n"
        "\n"
        "Pack a dataset of any format stoker reads into .stk shards, keeping every field.\n"
        "An ImageFolder tree (SRC/<class>/**/<image>, as torchvision.datasets.ImageFolder\n"
        "reads it) becomes one record per image with the fields\n"
        "  image  bytes  the file exactly as stored (not re-encoded)\n"
        "  label  int64  the class index (classes sorted by name)\n"
        "  path   bytes  the file's path relative to SRC\n"
        "Images are the files ending in %s (any case); entries\n"
        "that are not regular files (FIFOs, sockets) are skipped and reported.\n"
        "The format is detected from SRC (formats below); --format overrides.\n"
        "\n"
        "OUT ending in .stk (without --shard-size) is written as one shard; otherwise OUT is a\n"
        "directory that receives shard-00000.stk, shard-00001.stk, ... and stoker-manifest.json,\n"
        "written last: the dataset appears whole or not at all (a failure or kill before the\n"
        "manifest leaves OUT as it was).\n"
        "\n"
        "options:\n"
        "  --format NAME      SRC's format (listed below); default: detected\n"
        "  --shard-size SIZE  start a new shard before one would exceed SIZE bytes\n"
        "                     (512M, 1G, 100k, plain bytes; default 1G for a directory)\n"
        "  --align N          record alignment in bytes, a power of two (default 64)\n"
        "  --force            replace an existing OUT file, or the dataset in a non-empty OUT\n"
        "                     directory (its old files are removed once the new one is\n"
        "                     complete)\n"
        "  --quiet            no progress bar, no summary\n"
        "  -h, --help         show this help\n",
        exts);
    stk_cli_print_formats(f);
}

int stk_cmd_pack(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"shard-size", required_argument, NULL, 's'},
        {"format", required_argument, NULL, 'F'},
        {"align", required_argument, NULL, 'a'},
        {"force", no_argument, NULL, 'f'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    pack_args a;
    memset(&a, 0, sizeof(a));
    a.align = 64;
    int c;
    long long v;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":hfq", longopts, NULL)) != -1) {
        switch (c) {
        case 's':
            if (stk_cli_parse_size(optarg, &a.shard_size) != 0)
                return stk_cli_usage_error(CMD,
                                           "--shard-size: invalid size '%s' (e.g. 512M, 1G, "
                                           "100k, 4096)",
                                           optarg);
            break;
        case 'F':
            a.format = optarg;
            break;
        case 'a':
            if (stk_cli_parse_int(optarg, "--align", 1, 1 << 20, &v) || (v & (v - 1)))
                return stk_cli_usage_error(CMD, "--align must be a power of two in 1..1048576");
            a.align = (uint32_t)v;
            break;
        case 'f':
            a.force = true;
            break;
        case 'q':
            a.quiet = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return stk_cli_getopt_error(CMD, c, argv);
        }
    }
    if (argc - optind != 2)
        return stk_cli_usage_error(CMD, "expected SRC and OUT, got %d argument%s", argc - optind,
                                   argc - optind == 1 ? "" : "s");
    a.src = argv[optind];
    a.out = argv[optind + 1];
    return pack(&a);
}

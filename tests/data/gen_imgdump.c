/*
 * gen_imgdump.c: apply a stoker transform to image files and dump the raw output, for the
 * comparison tests against torchvision (python/tests/test_xform_vs_torchvision.py) and for
 * profiling the image pipeline.
 *
 *   gen_imgdump [--recipe NAME | --ops SPEC] [--dtype T] [--nhwc] [--exact] [--lenient]
 *               [--seed S] [--epoch E] [--index I] [--plan] IMAGE OUT
 *       Apply the transform to IMAGE as sample (S, E, I) and write the output tensor's raw bytes
 *       to OUT. --plan prints the sample's plan as one JSON line (image size, RandomResizedCrop
 *       box, flip, decode window and DCT denominator, ColorJitter and pixel ops' draws);
 *       --plans N first prints the plans of samples I+1 .. I+N-1, one line each (the
 *       distribution tests).
 *   gen_imgdump ... --bench N [--rounds R] [--ceiling] IMAGE...
 *       Apply the transform N times over the images (indices 0..N-1 round robin), R times, and
 *       print the per-stage time (wall clock, from the worker's stage timers) and images/s (wall
 *       and this thread's CPU time) as JSON. --ceiling: after each round, the full decode
 *       (libjpeg-turbo at full scale, nothing else) of the same N images, and the ratio
 *       pipeline/ceiling of each round's CPU times (median, min, max). --no-planes: the RGB path
 *       only (stk_transform.planar cleared). As the loader does, each file's first strict decode
 *       reads it to its end and later ones stop after the window (stk__transform_worker_trust);
 *       --check-every-read reads every one to its end, as a first read. --slot-rows R: sample k
 *       is stored in row k % R of an R-row buffer (written once before the first round), as the
 *       loader stores into a ring slot that is not in cache; 1 (one hot row) by default.
 *   gen_imgdump --boxes H W N [--scale A,B] [--ratio A,B] [--seed S]
 *       Print N RandomResizedCrop boxes "i j h w fallback" for an H x W image, sample k drawn
 *       from the stream (S, 0, k) exactly as the transform draws it.
 *
 * SPEC is a list of ops separated by spaces or '+':
 *   rrc:H[,W[,S0,S1[,R0,R1]]]  resize:H[,W]  ccrop:H[,W]  flip:P  vflip:P  jitter:B,C,S,H
 *   norm[:imagenet | :M0,M1,M2,S0,S1,S2]
 *   gray  rgray:P  invert:P  posterize:BITS[,P]  solarize:T[,P]  sharp:F[,P]  autocontrast:P
 *   equalize:P  blur:KX[,KY[,S0[,S1]]]  rcrop:H,W[,L,T,R,B[,PAD_IF_NEEDED]]  pad:L,T,R,B
 *   erase:P[,S0,S1[,R0,R1[,V0,V1,V2]]]  ta[:BINS]  ra[:N[,M[,BINS]]]  aa
 *   apply:P,N  choice:N  (RandomApply / RandomChoice over the N ops after them)
 *   gen_imgdump --aa-policy
 *       Print AutoAugment's IMAGENET policy as JSON: [[[name, p, bin or null], ...], ...].
 *   gen_imgdump --ta-table BINS [H W]
 *       Print TrivialAugmentWide's op table (with H W: RandAugment's for an H x W image) as
 *       JSON: [[name, signed, [magnitudes]], ...].
 */
#include "xform/stk_xform.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "gen_imgdump: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

/* Parse up to max comma-separated numbers from s; returns the count. */
static int numbers(const char *s, double *v, int max)
{
    int n = 0;
    while (s && *s && n < max) {
        char *end;
        v[n++] = strtod(s, &end);
        if (end == s)
            die("bad number in '%s'", s);
        s = *end == ',' ? end + 1 : NULL;
    }
    return n;
}

/* A token "Name:param=v,v;param=v" (torchvision's class and argument names, through the op
 * table's parameter list) into op. */
static void parse_generic(const char *tok, stk_op *op)
{
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", tok);
    char *colon = strchr(buf, ':');
    if (colon)
        *colon = '\0';
    stk_op_kind kind;
    if (stk_op_find(buf, &kind) < 0)
        die("%s", stk_last_errmsg());
    stk_op_init(op, kind);
    for (char *kv = colon ? strtok(colon + 1, ";") : NULL; kv; kv = strtok(NULL, ";")) {
        char *eq = strchr(kv, '=');
        if (!eq)
            die("expected param=value in '%s'", kv);
        *eq = '\0';
        const stk_op_param *pa = NULL;
        for (size_t k = 0; k < stk_op_n_params(kind); k++)
            if (strcmp(stk_op_param_at(kind, k)->name, kv) == 0)
                pa = stk_op_param_at(kind, k);
        if (!pa)
            die("%s has no parameter '%s'", buf, kv);
        double v[8];
        int n = numbers(eq + 1, v, 8);
        if (n != (int)pa->n_values)
            die("%s: %s needs %u numbers", buf, kv, pa->n_values);
        char *at = (char *)op + pa->offset;
        for (int k = 0; k < n; k++) {
            if (pa->type == STK_OP_PARAM_INT64)
                ((int64_t *)(void *)at)[k] = (int64_t)v[k];
            else if (pa->type == STK_OP_PARAM_DOUBLE)
                ((double *)(void *)at)[k] = v[k];
            else
                ((float *)(void *)at)[k] = (float)v[k];
        }
    }
}

/* Parse one op token into op; returns false for an unknown name. */
static bool parse_op(const char *tok, stk_op *op)
{
    if (tok[0] >= 'A' && tok[0] <= 'Z') {
        parse_generic(tok, op);
        return true;
    }
    const char *colon = strchr(tok, ':');
    size_t nlen = colon ? (size_t)(colon - tok) : strlen(tok);
    const char *args = colon ? colon + 1 : NULL;
    double v[8] = {0};
    int n = 0;
#define IS(name) (nlen == strlen(name) && strncmp(tok, name, nlen) == 0)
    if (IS("rrc")) {
        stk_op_init(op, STK_OP_RANDOM_RESIZED_CROP);
        n = numbers(args, v, 6);
        op->size[0] = (int64_t)v[0];
        op->size[1] = n > 1 ? (int64_t)v[1] : op->size[0];
        if (n > 3) {
            op->scale[0] = v[2];
            op->scale[1] = v[3];
        }
        if (n > 5) {
            op->ratio[0] = v[4];
            op->ratio[1] = v[5];
        }
    } else if (IS("resize")) {
        stk_op_init(op, STK_OP_RESIZE);
        n = numbers(args, v, 2);
        op->size[0] = (int64_t)v[0];
        op->size[1] = n > 1 ? (int64_t)v[1] : 0;
    } else if (IS("ccrop")) {
        stk_op_init(op, STK_OP_CENTER_CROP);
        n = numbers(args, v, 2);
        op->size[0] = (int64_t)v[0];
        op->size[1] = n > 1 ? (int64_t)v[1] : op->size[0];
    } else if (IS("flip")) {
        stk_op_init(op, STK_OP_RANDOM_HORIZONTAL_FLIP);
        if (numbers(args, v, 1) == 1)
            op->p = v[0];
    } else if (IS("vflip")) {
        stk_op_init(op, STK_OP_RANDOM_VERTICAL_FLIP);
        if (numbers(args, v, 1) == 1)
            op->p = v[0];
    } else if (IS("jitter")) {
        stk_op_init(op, STK_OP_COLOR_JITTER);
        numbers(args, v, 4);
        op->brightness = v[0];
        op->contrast = v[1];
        op->saturation = v[2];
        op->hue = v[3];
    } else if (IS("norm")) {
        stk_op_init(op, STK_OP_NORMALIZE);
        if (args && strcmp(args, "imagenet") == 0) {
            const float m[3] = {0.485f, 0.456f, 0.406f}, s[3] = {0.229f, 0.224f, 0.225f};
            memcpy(op->mean, m, sizeof(m));
            memcpy(op->std, s, sizeof(s));
        } else if (args) {
            if (numbers(args, v, 6) != 6)
                die("norm needs 6 numbers: '%s'", args);
            for (int c = 0; c < 3; c++) {
                op->mean[c] = (float)v[c];
                op->std[c] = (float)v[3 + c];
            }
        }
    } else if (IS("gray")) {
        stk_op_init(op, STK_OP_GRAYSCALE);
    } else if (IS("rgray") || IS("invert") || IS("autocontrast") || IS("equalize")) {
        stk_op_init(op, IS("rgray")          ? STK_OP_RANDOM_GRAYSCALE
                        : IS("invert")       ? STK_OP_RANDOM_INVERT
                        : IS("autocontrast") ? STK_OP_RANDOM_AUTOCONTRAST
                                             : STK_OP_RANDOM_EQUALIZE);
        if (numbers(args, v, 1) == 1)
            op->p = v[0];
    } else if (IS("posterize") || IS("solarize") || IS("sharp")) {
        stk_op_init(op, IS("posterize")  ? STK_OP_RANDOM_POSTERIZE
                        : IS("solarize") ? STK_OP_RANDOM_SOLARIZE
                                         : STK_OP_RANDOM_ADJUST_SHARPNESS);
        n = numbers(args, v, 2);
        if (op->kind == STK_OP_RANDOM_POSTERIZE)
            op->bits = (int64_t)v[0];
        else if (op->kind == STK_OP_RANDOM_SOLARIZE)
            op->threshold = v[0];
        else
            op->sharpness_factor = v[0];
        if (n > 1)
            op->p = v[1];
    } else if (IS("rcrop") || IS("pad")) {
        bool crop = IS("rcrop");
        stk_op_init(op, crop ? STK_OP_RANDOM_CROP : STK_OP_PAD);
        n = numbers(args, v, 7);
        int at = crop ? 2 : 0;
        if (crop) {
            op->size[0] = (int64_t)v[0];
            op->size[1] = (int64_t)v[1];
        }
        for (int k = 0; k < 4; k++)
            op->padding[k] = (int64_t)v[at + k];
        if (crop && n > 6)
            op->pad_if_needed = (int64_t)v[6];
    } else if (IS("erase")) {
        stk_op_init(op, STK_OP_RANDOM_ERASING);
        n = numbers(args, v, 8);
        if (n > 0)
            op->p = v[0];
        if (n > 2) {
            op->scale[0] = v[1];
            op->scale[1] = v[2];
        }
        if (n > 4) {
            op->ratio[0] = v[3];
            op->ratio[1] = v[4];
        }
        for (int c = 0; n > 7 && c < 3; c++)
            op->value[c] = v[5 + c];
    } else if (IS("ra")) {
        stk_op_init(op, STK_OP_RAND_AUGMENT);
        n = numbers(args, v, 3);
        if (n > 0)
            op->num_ops = (int64_t)v[0];
        if (n > 1)
            op->magnitude = (int64_t)v[1];
        if (n > 2)
            op->num_magnitude_bins = (int64_t)v[2];
    } else if (IS("apply") || IS("choice")) {
        bool apply = IS("apply");
        stk_op_init(op, apply ? STK_OP_RANDOM_APPLY : STK_OP_RANDOM_CHOICE);
        n = numbers(args, v, 2);
        if (apply) {
            op->p = v[0];
            op->n_transforms = (int64_t)v[1];
        } else {
            op->n_transforms = (int64_t)v[0];
        }
    } else if (IS("aa")) {
        stk_op_init(op, STK_OP_AUTO_AUGMENT);
    } else if (IS("ta")) {
        stk_op_init(op, STK_OP_TRIVIAL_AUGMENT_WIDE);
        if (numbers(args, v, 1) == 1)
            op->num_magnitude_bins = (int64_t)v[0];
    } else if (IS("blur")) {
        stk_op_init(op, STK_OP_GAUSSIAN_BLUR);
        n = numbers(args, v, 4);
        op->kernel_size[0] = (int64_t)v[0];
        op->kernel_size[1] = n > 1 ? (int64_t)v[1] : op->kernel_size[0];
        if (n > 2)
            op->sigma[0] = op->sigma[1] = v[2];
        if (n > 3)
            op->sigma[1] = v[3];
    } else {
        return false;
    }
#undef IS
    return true;
}

static stk_dtype parse_dtype(const char *s)
{
    if (strcmp(s, "uint8") == 0)
        return STK_DTYPE_UINT8;
    if (strcmp(s, "float32") == 0)
        return STK_DTYPE_FLOAT32;
    if (strcmp(s, "float16") == 0)
        return STK_DTYPE_FLOAT16;
    if (strcmp(s, "bfloat16") == 0)
        return STK_DTYPE_BFLOAT16;
    die("unknown dtype '%s'", s);
}

/* This thread's CPU time in seconds: on a loaded machine, unlike wall time, it leaves out the
 * time other processes had the core. */
static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint8_t *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die("cannot open '%s'", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n)
        die("cannot read '%s'", path);
    fclose(f);
    *size = (size_t)n;
    return buf;
}

/* Where output pixel 0's grid pixel starts, in full-resolution pixels (for pure crops and pads:
 * the crop's offset in the image, negative inside the padding). */
static double origin(const stk__xaxis *a)
{
    return a->c0 + (a->c1 - a->c0) * (double)a->off / (double)a->grid;
}

/* Print the plan of sample rng (a copy: the caller's stream is not advanced) as JSON. */
static void print_plan(const stk_transform *t, stk__tworker *w, const uint8_t *img, size_t size,
                       stk_rng rng)
{
    stk__imginfo info;
    char err[STK_ERRMSG_SIZE];
    if (stk__image_probe(w->dec, img, size, &info, err, sizeof(err)) < 0)
        die("probe failed: %s", err);
    stk__xplan p;
    stk__xform_plan(t, info.width, info.height, &rng, &p);
    printf("{\"width\": %u, \"height\": %u, \"box\": [%lld, %lld, %lld, %lld], \"fallback\": %d, "
           "\"has_box\": %d, \"flip\": %d, \"vflip\": %d, \"decode\": %d, \"den\": %u, "
           "\"win\": [%u, %u, %u, %u], \"origin\": [%.17g, %.17g], \"jitter\": [",
           info.width, info.height, (long long)p.box.i, (long long)p.box.j, (long long)p.box.h,
           (long long)p.box.w, p.box.fallback, p.has_box, p.flip, p.vflip, p.decode, p.den, p.win_x,
           p.win_y, p.win_w, p.win_h, origin(&p.y), origin(&p.x));
    int n_jitter = 0;
    for (uint32_t k = 0; k < p.n_pix; k++) {
        if (p.pix[k].def->kind != STK_OP_COLOR_JITTER)
            continue;
        const stk__jitter *j = &p.pix[k].draw.jitter;
        printf("%s{\"order\": [%d, %d, %d, %d], \"on\": [%d, %d, %d, %d], "
               "\"factor\": [%.17g, %.17g, %.17g, %.17g]}",
               n_jitter++ ? ", " : "", j->order[0], j->order[1], j->order[2], j->order[3], j->on[0],
               j->on[1], j->on[2], j->on[3], j->factor[0], j->factor[1], j->factor[2],
               j->factor[3]);
    }
    printf("], \"pixel\": [");
    int n_px = 0;
    for (uint32_t k = 0; k < p.n_pix; k++) {
        if (p.pix[k].def->kind == STK_OP_COLOR_JITTER)
            continue;
        if (p.pix[k].def->kind == STK_OP_TRIVIAL_AUGMENT_WIDE ||
            p.pix[k].def->kind == STK_OP_RAND_AUGMENT ||
            p.pix[k].def->kind == STK_OP_AUTO_AUGMENT) {
            const stk__ta *d = &p.pix[k].draw.ta;
            printf("%s{\"op\": \"%s\", \"policy\": %d, \"ops\": [", n_px++ ? ", " : "",
                   p.pix[k].def->name, d->policy);
            for (int q = 0; q < d->n; q++)
                printf("%s[\"%s\", %.17g]", q ? ", " : "", stk__ta_name(d->op[q]), d->magnitude[q]);
            printf("]}");
            continue;
        }
        if (p.pix[k].def->kind == STK_OP_AUG_MIX) {
            const stk__augmix *d = &p.pix[k].draw.augmix;
            printf("%s{\"op\": \"AugMix\", \"m0\": %.9g, \"chains\": [", n_px++ ? ", " : "",
                   (double)d->m0);
            for (int i = 0; i < d->width; i++) {
                printf("%s{\"w\": %.9g, \"ops\": [", i ? ", " : "", (double)d->w[i]);
                for (int q = 0; q < d->chain[i].n; q++)
                    printf("%s[\"%s\", %.17g]", q ? ", " : "", stk__ta_name(d->chain[i].op[q]),
                           d->chain[i].magnitude[q]);
                printf("]}");
            }
            printf("]}");
            continue;
        }
        if (p.pix[k].def->warp) {
            const stk__warpdraw *d = &p.pix[k].draw.warp;
            printf("%s{\"op\": \"%s\", \"angle\": %.17g, \"translate\": [%.17g, %.17g], "
                   "\"scale\": %.17g, \"shear\": [%.17g, %.17g]}",
                   n_px++ ? ", " : "", p.pix[k].def->name, d->angle, d->translate[0],
                   d->translate[1], d->scale, d->shear[0], d->shear[1]);
            continue;
        }
        if (p.pix[k].def->kind == STK_OP_RANDOM_ERASING) {
            const stk__erase *e = &p.pix[k].draw.erase;
            printf("%s{\"op\": \"RandomErasing\", \"on\": %d, \"box\": [%lld, %lld, %lld, %lld]}",
                   n_px++ ? ", " : "", e->on, (long long)e->i, (long long)e->j, (long long)e->h,
                   (long long)e->w);
            continue;
        }
        printf("%s{\"op\": \"%s\", \"on\": %d, \"sigma\": %.17g}", n_px++ ? ", " : "",
               p.pix[k].def->name, p.pix[k].draw.pix.on, p.pix[k].draw.pix.sigma);
    }
    printf("]}\n");
}

static int boxes(int argc, char **argv)
{
    long long h = 0, w = 0, n = 0;
    unsigned long long seed = 0;
    double scale[2] = {0.08, 1.0}, ratio[2] = {3.0 / 4.0, 4.0 / 3.0};
    int pos = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--scale") == 0 && i + 1 < argc)
            numbers(argv[++i], scale, 2);
        else if (strcmp(argv[i], "--ratio") == 0 && i + 1 < argc)
            numbers(argv[++i], ratio, 2);
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (pos == 0 && ++pos)
            h = atoll(argv[i]);
        else if (pos == 1 && ++pos)
            w = atoll(argv[i]);
        else if (pos == 2 && ++pos)
            n = atoll(argv[i]);
        else
            die("unexpected argument '%s'", argv[i]);
    }
    if (h < 1 || w < 1 || n < 1)
        die("usage: --boxes H W N [--scale A,B] [--ratio A,B] [--seed S]");
    for (long long k = 0; k < n; k++) {
        stk_rng rng;
        stk__box b;
        stk_rng_init(&rng, seed, 0, (uint64_t)k);
        stk__rrc_box(&rng, h, w, scale, ratio, &b);
        printf("%lld %lld %lld %lld %d\n", (long long)b.i, (long long)b.j, (long long)b.h,
               (long long)b.w, b.fallback);
    }
    return 0;
}

static int ta_table(int argc, char **argv)
{
    long bins = argc > 2 ? atol(argv[2]) : 31;
    int policy = argc > 4 ? STK__POLICY_RAND : STK__POLICY_TRIVIAL_WIDE;
    long h = argc > 4 ? atol(argv[3]) : 0, w = argc > 4 ? atol(argv[4]) : 0;
    printf("[");
    for (int op = 0; op < STK__TA_N; op++) {
        bool sgn;
        bool has = stk__ta_has_bins(op, &sgn);
        printf("%s[\"%s\", %d, [", op ? ", " : "", stk__ta_name(op), sgn);
        for (long k = 0; has && k < bins; k++)
            printf("%s%.17g", k ? ", " : "", stk__ta_magnitude(policy, op, bins, k, h, w));
        printf("]]");
    }
    printf("]\n");
    return 0;
}

static int aa_policy(void)
{
    printf("[");
    for (int k = 0; k < STK__AA_N_POLICIES; k++) {
        printf("%s[", k ? ", " : "");
        for (int i = 0; i < 2; i++) {
            const stk__aa_step *st = stk__aa_policy(k, i);
            printf("%s[\"%s\", %.17g, ", i ? ", " : "", stk__ta_name(st->op), st->p);
            if (st->bin < 0)
                printf("null]");
            else
                printf("%d]", st->bin);
        }
        printf("]");
    }
    printf("]\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--aa-policy") == 0)
        return aa_policy();
    if (argc > 1 && strcmp(argv[1], "--boxes") == 0)
        return boxes(argc, argv);
    if (argc > 1 && strcmp(argv[1], "--ta-table") == 0)
        return ta_table(argc, argv);
    const char *recipe = NULL, *spec = NULL, *dtype = NULL;
    bool nhwc = false, exact = false, plan = false, lenient = false;
    unsigned long long seed = 0, epoch = 0, index = 0;
    long bench = 0, plans = 1, rounds = 1, slot_rows = 1;
    bool ceiling = false, no_planes = false, every_read = false, libjpeg_entropy = false;
    const char *files[4096];
    int n_files = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        if (strcmp(a, "--recipe") == 0 && more)
            recipe = argv[++i];
        else if (strcmp(a, "--ops") == 0 && more)
            spec = argv[++i];
        else if (strcmp(a, "--dtype") == 0 && more)
            dtype = argv[++i];
        else if (strcmp(a, "--seed") == 0 && more)
            seed = strtoull(argv[++i], NULL, 10);
        else if (strcmp(a, "--epoch") == 0 && more)
            epoch = strtoull(argv[++i], NULL, 10);
        else if (strcmp(a, "--index") == 0 && more)
            index = strtoull(argv[++i], NULL, 10);
        else if (strcmp(a, "--bench") == 0 && more)
            bench = atol(argv[++i]);
        else if (strcmp(a, "--rounds") == 0 && more)
            rounds = atol(argv[++i]);
        else if (strcmp(a, "--slot-rows") == 0 && more)
            slot_rows = atol(argv[++i]);
        else if (strcmp(a, "--ceiling") == 0)
            ceiling = true;
        else if (strcmp(a, "--no-planes") == 0) /* the RGB path only (stk_transform.planar) */
            no_planes = true;
        else if (strcmp(a, "--libjpeg-entropy") == 0)
            libjpeg_entropy = true;
        else if (strcmp(a, "--check-every-read") == 0)
            every_read = true;
        else if (strcmp(a, "--nhwc") == 0)
            nhwc = true;
        else if (strcmp(a, "--exact") == 0)
            exact = true;
        else if (strcmp(a, "--lenient") == 0) /* stk_transform_opts.lenient */
            lenient = true;
        else if (strcmp(a, "--plan") == 0)
            plan = true;
        else if (strcmp(a, "--plans") == 0 && more)
            plans = atol(argv[++i]);
        else if (a[0] == '-' && a[1] == '-')
            die("unknown option '%s'", a);
        else if (n_files < 4096)
            files[n_files++] = a;
    }
    if (n_files < (bench ? 1 : 2) || (!recipe && !spec) || rounds < 1 || slot_rows < 1)
        die("usage: gen_imgdump (--recipe NAME | --ops SPEC) [options] IMAGE OUT");

    stk_transform *t = NULL;
    stk_op ops[STK__XF_MAX_OPS + 1];
    size_t n_ops = 0;
    if (spec) {
        char *copy = strdup(spec), *save = NULL;
        for (char *tok = strtok_r(copy, " +", &save); tok; tok = strtok_r(NULL, " +", &save)) {
            if (n_ops > STK__XF_MAX_OPS)
                die("too many ops in '%s'", spec);
            if (!parse_op(tok, &ops[n_ops++]))
                die("unknown op '%s'", tok);
        }
        free(copy);
    } else { /* a recipe, but with the dtype/layout overridable */
        stk_transform *r;
        if (stk_transform_recipe(recipe, exact, &r) < 0)
            die("%s", stk_last_errmsg());
        n_ops = r->n_ops;
        memcpy(ops, r->ops, n_ops * sizeof(stk_op));
        stk_transform_destroy(r);
    }
    stk_transform_opts o;
    stk_transform_opts_init(&o);
    o.ops = ops;
    o.n_ops = n_ops;
    o.exact = exact;
    o.lenient = lenient;
    o.nhwc = nhwc;
    if (dtype)
        o.dtype = parse_dtype(dtype);
    if (stk_transform_create(&o, &t) < 0)
        die("%s", stk_last_errmsg());
    if (no_planes)
        t->planar = false;
    stk__tworker *w;
    if (stk__transform_worker_create(t, &w) < 0)
        die("%s", stk_last_errmsg());
    stk__decoder_set_own_entropy(w->dec, !libjpeg_entropy);
    stk_dtype dt;
    uint32_t ndim;
    int64_t shape[STK_MAX_DIMS];
    stk_transform_output(t, &dt, &ndim, shape);
    size_t out_size = stk_dtype_size(dt) * (size_t)(shape[0] * shape[1] * shape[2]);
    void *mem = NULL; /* 64-byte aligned, as the loader's ring slots (stk__slot_alloc) */
    if (posix_memalign(&mem, 64, out_size * (size_t)slot_rows) != 0)
        mem = NULL;
    uint8_t *slot = mem, *out = slot;
    if (!slot)
        die("out of memory for %ld output rows", slot_rows);
    memset(slot, 0, out_size * (size_t)slot_rows); /* its pages mapped before any timing */
    char err[STK_ERRMSG_SIZE];

    if (bench) {
        uint8_t **imgs = malloc(sizeof(*imgs) * (size_t)n_files);
        size_t *sizes = malloc(sizeof(*sizes) * (size_t)n_files);
        bool *checked = calloc((size_t)n_files, sizeof(*checked)); /* the loader's per-record bit */
        for (int k = 0; k < n_files; k++)
            imgs[k] = read_file(files[k], &sizes[k]);
        /* Rounds of the pipeline, each followed by the ceiling when asked: the full decode of
         * the same N images (libjpeg-turbo at full scale, exact, nothing else). */
        double secs = 0.0, cpu = 0.0, ratios[64];
        int n_ratios = 0;
        stk__decoder *dec = NULL;
        if (ceiling && stk__decoder_create(0, &dec) < 0)
            die("cannot create a decoder");
        if (dec) /* the ceiling is libjpeg-turbo's decode, its own entropy decoder included */
            stk__decoder_set_own_entropy(dec, false);
        double csecs = 0.0;
        for (long r = 0; r < rounds; r++) {
            uint64_t t0 = stk__now_ns();
            double c0 = cpu_seconds();
            for (long k = 0; k < bench; k++) {
                stk_rng rng;
                stk_rng_init(&rng, seed, epoch, (uint64_t)k);
                int f = (int)(k % n_files);
                out = slot + (size_t)(k % slot_rows) * out_size;
                stk__transform_worker_trust(w, checked[f]);
                if (stk__transform_apply(t, w, imgs[f], sizes[f], &rng, out, err, sizeof(err)) < 0)
                    die("apply failed: %s", err);
                checked[f] = !every_read && (checked[f] || stk__transform_worker_checked(w));
            }
            double ps = cpu_seconds() - c0;
            secs += (double)(stk__now_ns() - t0) / 1e9;
            cpu += ps;
            if (!ceiling)
                continue;
            t0 = stk__now_ns();
            c0 = cpu_seconds();
            for (long k = 0; k < bench; k++) {
                int f = (int)(k % n_files);
                stk__imginfo info;
                stk__decoded d;
                if (stk__image_probe(dec, imgs[f], sizes[f], &info, err, sizeof(err)) < 0 ||
                    stk__image_decode(dec, imgs[f], sizes[f], &info, 0, 0, info.width, info.height,
                                      info.width, info.height, &d, err, sizeof(err)) < 0)
                    die("ceiling decode failed: %s", err);
            }
            double cs = cpu_seconds() - c0;
            csecs += cs;
            if (n_ratios < 64)
                ratios[n_ratios++] = cs / ps;
        }
        stk__decoder_destroy(dec);
        const stk__xtimes *tm = stk__transform_worker_times(w);
        double n = (double)tm->samples;
        printf("{\"samples\": %.0f, \"seconds\": %.4f, \"cpu_seconds\": %.4f, \"img_per_cpu_s\": "
               "%.1f, \"img_per_s\": %.1f, \"us_per_img\": "
               "{\"probe\": %.1f, \"decode\": %.1f, \"resize\": %.1f, \"jitter\": %.1f, "
               "\"store\": %.1f}",
               n, secs, cpu, n / cpu, n / secs, tm->probe_ns / n / 1e3, tm->decode_ns / n / 1e3,
               tm->resize_ns / n / 1e3, tm->jitter_ns / n / 1e3, tm->store_ns / n / 1e3);
        if (ceiling) {
            qsort(ratios, (size_t)n_ratios, sizeof(double), cmp_double);
            printf(", \"ceiling_img_per_cpu_s\": %.1f, \"ceiling_cpu_us_per_img\": %.1f, "
                   "\"ratio_to_ceiling\": {\"median\": %.3f, \"min\": %.3f, \"max\": %.3f}",
                   n / csecs, csecs / n * 1e6, ratios[n_ratios / 2], ratios[0],
                   ratios[n_ratios - 1]);
        }
        printf("}\n");
        for (int k = 0; k < n_files; k++)
            free(imgs[k]);
        free(imgs);
        free(sizes);
        free(checked);
    } else {
        size_t size;
        uint8_t *img = read_file(files[0], &size);
        stk_rng rng;
        stk_rng_init(&rng, seed, epoch, index);
        for (long k = 1; plan && k < plans; k++) { /* the plans of the next samples */
            stk_rng next;
            stk_rng_init(&next, seed, epoch, index + (uint64_t)k);
            print_plan(t, w, img, size, next);
        }
        if (plan)
            print_plan(t, w, img, size, rng);
        if (stk__transform_apply(t, w, img, size, &rng, out, err, sizeof(err)) < 0)
            die("apply failed: %s", err);
        FILE *f = fopen(files[1], "wb");
        if (!f || fwrite(out, 1, out_size, f) != out_size || fclose(f) != 0)
            die("cannot write '%s'", files[1]);
        free(img);
    }
    free(slot);
    stk__transform_worker_destroy(w);
    stk_transform_destroy(t);
    return 0;
}

/* bench_open SHARD [N]: time stk_dataset_open + close of one shard; with N, first write a shard
 * of N one-byte records there. Prints the median of 7 opens in ms (docs/reliability.md "The
 * index copy at open"). Build: cc -O2 -Iinclude -o build/bench_open bench/bench_open.c
 * build/libstoker.a -lturbojpeg -lspng -lxxhash -ljpeg -lpthread -ldl -lm */
#include <stoker.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc > 2) {
        stk_field f[1] = {
            {.struct_size = sizeof(stk_field), .name = "data", .kind = STK_FIELD_BYTES}};
        stk_writer_opts o;
        stk_writer_opts_init(&o);
        o.fields = f;
        o.n_fields = 1;
        o.align = 1;
        stk_writer *w;
        if (stk_writer_open(argv[1], &o, &w))
            return 1;
        long n = atol(argv[2]);
        for (long i = 0; i < n; i++) {
            unsigned char b = (unsigned char)i;
            stk_value v = {.struct_size = sizeof(stk_value), .data = &b, .size = 1};
            if (stk_writer_add(w, &v))
                return 1;
        }
        if (stk_writer_close(w))
            return 1;
    }
    const char *p[] = {argv[1]};
    double t[7];
    for (int k = 0; k < 7; k++) {
        stk_dataset *ds;
        double t0 = now();
        if (stk_dataset_open(p, 1, 0, &ds)) {
            fprintf(stderr, "%s\n", stk_last_errmsg());
            return 1;
        }
        t[k] = now() - t0;
        if (k == 0)
            fprintf(stderr, "%llu records\n", (unsigned long long)stk_dataset_n_records(ds));
        stk_dataset_close(ds);
    }
    qsort(t, 7, sizeof(double), cmp);
    printf("open median %.2f ms (min %.2f, max %.2f)\n", t[3] * 1e3, t[0] * 1e3, t[6] * 1e3);
    return 0;
}

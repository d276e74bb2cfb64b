/*
 * audio_ceiling.c: the decode-only ceiling of bench/bench_audio.py (issue 27): libsndfile
 * decoding whole files into memory as float, and nothing else, on T threads sharing a file list
 * (an atomic counter), for E epochs. Prints one JSON line: samples/s of the epochs after the
 * first, of the first, and the process CPU seconds.
 *
 *   cc -O2 bench/audio_ceiling.c -o build/audio_ceiling -lsndfile -lpthread
 *   build/audio_ceiling THREADS EPOCHS FILE...
 *
 * Each file is read into memory first (as the loader reads a record) and decoded from there
 * through libsndfile's virtual I/O into a reused buffer (as torchaudio.load decodes into a
 * tensor): the cost of the decode alone, the ceiling of any pipeline that decodes every file
 * whole. MP3 goes through libsndfile's own libmpg123 reader.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sndfile.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

typedef struct mem {
    const unsigned char *p;
    sf_count_t size, pos;
} mem;

static sf_count_t m_len(void *u)
{
    return ((mem *)u)->size;
}

static sf_count_t m_seek(sf_count_t off, int whence, void *u)
{
    mem *m = u;
    m->pos = (whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m->pos : m->size) + off;
    return m->pos;
}

static sf_count_t m_read(void *ptr, sf_count_t n, void *u)
{
    mem *m = u;
    if (m->pos >= m->size)
        return 0;
    n = n < m->size - m->pos ? n : m->size - m->pos;
    memcpy(ptr, m->p + m->pos, (size_t)n);
    m->pos += n;
    return n;
}

static sf_count_t m_write(const void *ptr, sf_count_t n, void *u)
{
    (void)ptr, (void)n, (void)u;
    return 0;
}

static sf_count_t m_tell(void *u)
{
    return ((mem *)u)->pos;
}

static char **files;
static long n_files;
static atomic_long next_file;
static atomic_long failures;

static void *worker(void *arg)
{
    (void)arg;
    SF_VIRTUAL_IO vio = {m_len, m_seek, m_read, m_write, m_tell};
    unsigned char *buf = NULL;
    size_t cap = 0;
    float *pcm = NULL;
    size_t pcap = 0;
    for (;;) {
        long i = atomic_fetch_add(&next_file, 1);
        if (i >= n_files)
            break;
        FILE *f = fopen(files[i], "rb");
        if (!f) {
            atomic_fetch_add(&failures, 1);
            continue;
        }
        fseek(f, 0, SEEK_END);
        size_t size = (size_t)ftell(f);
        fseek(f, 0, SEEK_SET);
        if (size > cap)
            buf = realloc(buf, cap = size);
        size_t got = fread(buf, 1, size, f);
        fclose(f);
        mem m = {buf, (sf_count_t)got, 0};
        SF_INFO info = {0};
        SNDFILE *s = sf_open_virtual(&vio, SFM_READ, &info, &m);
        if (!s) {
            atomic_fetch_add(&failures, 1);
            continue;
        }
        size_t need = (size_t)info.frames * (size_t)info.channels;
        if (need > pcap)
            pcm = realloc(pcm, (pcap = need) * sizeof(float));
        if (sf_readf_float(s, pcm, info.frames) != info.frames)
            atomic_fetch_add(&failures, 1);
        sf_close(s);
    }
    free(buf);
    free(pcm);
    return NULL;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s THREADS EPOCHS FILE...\n", argv[0]);
        return 2;
    }
    int threads = atoi(argv[1]), epochs = atoi(argv[2]);
    files = argv + 3;
    n_files = argc - 3;
    double first = 0, later = 0;
    for (int e = 0; e < epochs; e++) {
        atomic_store(&next_file, 0);
        pthread_t t[256];
        double t0 = now();
        for (int k = 0; k < threads && k < 256; k++)
            pthread_create(&t[k], NULL, worker, NULL);
        for (int k = 0; k < threads && k < 256; k++)
            pthread_join(t[k], NULL);
        double dt = now() - t0;
        if (e == 0)
            first = dt;
        else
            later += dt;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
                 ru.ru_stime.tv_usec * 1e-6;
    printf("{\"samples_per_s\": %.1f, \"first_epoch_samples_per_s\": %.1f, \"cpu_s\": %.3f, "
           "\"files\": %ld, \"failures\": %ld}\n",
           epochs > 1 ? n_files * (epochs - 1) / later : n_files / first, n_files / first, cpu,
           n_files, atomic_load(&failures));
    return 0;
}

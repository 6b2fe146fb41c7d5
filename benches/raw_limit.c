/* The raw limit in C, the check on benches/native's `raw` (docs/BENCHMARKS.md says how it is
 * used): the same shuffled, non-overlapping windows (splitmix64 Fisher-Yates over window
 * numbers, seed SEED), thread t of T reading batches t, t + T, ...: each window memcpy'd out of
 * a map populated up front into the thread's one batch buffer, the batch then summed there
 * (u16 ids in 32-bit lanes over blocks of 65,536, u32 ids in 64-bit lanes). No lock, no
 * per-window branch. Built by benches/run.sh with `cc -O3 -march=native -pthread`.
 *
 *   raw_limit_c BIN u16|u32 SEQ BATCH THREADS MAX_BATCHES(0 = epoch) SEED mmap
 *   raw_limit_c memcpy BIN THREADS SECONDS   (memcpy bandwidth alone: each thread copies
 *                                             consecutive 1 MiB blocks of the map, GB/s)
 *
 * Prints one JSON line like `guideloom_benches raw`. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t splitmix(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static const uint8_t *map;
static size_t map_len;
static uint64_t *perm, n_windows, total_batches, seq, batch, threads, size;
static double t0;
static double first_s = 1e300;
static pthread_mutex_t first_mu = PTHREAD_MUTEX_INITIALIZER;

typedef struct { uint64_t t, checksum, windows; } job;

static uint64_t sum_u16(const uint16_t *x, size_t n) {
  uint64_t total = 0;
  for (size_t at = 0; at < n; at += 65536) {
    size_t e = n - at < 65536 ? n - at : 65536;
    uint32_t s = 0;
    for (size_t i = 0; i < e; i++) s += x[at + i];
    total += s;
  }
  return total;
}

static uint64_t sum_u32(const uint32_t *x, size_t n) {
  uint64_t s = 0;
  for (size_t i = 0; i < n; i++) s += x[i];
  return s;
}

static void *reader(void *arg) {
  job *j = arg;
  size_t wbytes = seq * size;
  uint8_t *buf = aligned_alloc(4096, (batch * wbytes + 4095) & ~(size_t)4095);
  for (uint64_t b = j->t; b < total_batches; b += threads) {
    uint64_t lo = (b * batch) % n_windows;
    uint64_t hi = lo + batch < n_windows ? lo + batch : n_windows;
    for (uint64_t k = lo; k < hi; k++) memcpy(buf + (k - lo) * wbytes, map + perm[k] * wbytes, wbytes);
    size_t ids = (hi - lo) * seq;
    j->checksum += size == 2 ? sum_u16((const uint16_t *)buf, ids) : sum_u32((const uint32_t *)buf, ids);
    if (j->windows == 0) { /* once per thread, not per batch */
      double f = now() - t0;
      pthread_mutex_lock(&first_mu);
      if (f < first_s) first_s = f;
      pthread_mutex_unlock(&first_mu);
    }
    j->windows += hi - lo;
  }
  free(buf);
  return NULL;
}

static double bw_seconds;
static void *copier(void *arg) {
  job *j = arg;
  const size_t block = 1 << 20;
  uint8_t *buf = aligned_alloc(4096, block);
  size_t blocks = map_len / block, at = j->t;
  double until = now() + bw_seconds;
  while (now() < until) {
    for (int r = 0; r < 64; r++, at += threads) {
      memcpy(buf, map + (at % blocks) * block, block);
      j->checksum += buf[at % block];
    }
    j->windows += 64;
  }
  free(buf);
  return NULL;
}

static const uint8_t *map_file(const char *path) {
  int fd = open(path, O_RDONLY);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) { perror(path); exit(2); }
  map_len = st.st_size;
  void *m = mmap(NULL, map_len, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (m == MAP_FAILED) { perror("mmap"); exit(2); }
  return m;
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "memcpy") == 0) {
    threads = strtoull(argv[3], 0, 10);
    bw_seconds = atof(argv[4]);
    map = map_file(argv[2]);
    pthread_t th[64];
    job js[64] = {{0}};
    t0 = now();
    for (uint64_t t = 0; t < threads && t < 64; t++) { js[t].t = t; pthread_create(&th[t], 0, copier, &js[t]); }
    uint64_t blocks = 0, ck = 0;
    for (uint64_t t = 0; t < threads && t < 64; t++) { pthread_join(th[t], 0); blocks += js[t].windows; ck += js[t].checksum; }
    double s = now() - t0;
    printf("{\"method\": \"memcpy\", \"threads\": %llu, \"bytes\": %llu, \"seconds\": %.6f, \"gb_per_s\": %.3f, \"checksum\": \"%llu\"}\n",
           (unsigned long long)threads, (unsigned long long)(blocks << 20), s, (double)(blocks << 20) / s / 1e9, (unsigned long long)ck);
    return 0;
  }
  if (argc != 9 || strcmp(argv[8], "mmap") != 0) {
    fprintf(stderr, "usage: raw_limit_c BIN u16|u32 SEQ BATCH THREADS MAX_BATCHES SEED mmap | memcpy BIN THREADS SECONDS\n");
    return 2;
  }
  size = strcmp(argv[2], "u16") == 0 ? 2 : 4;
  seq = strtoull(argv[3], 0, 10);
  batch = strtoull(argv[4], 0, 10);
  threads = strtoull(argv[5], 0, 10);
  if (threads < 1) threads = 1;
  if (threads > 64) threads = 64;
  uint64_t max_batches = strtoull(argv[6], 0, 10), seed = strtoull(argv[7], 0, 10);
  t0 = now();
  map = map_file(argv[1]);
  n_windows = map_len / (seq * size);
  perm = malloc(n_windows * sizeof *perm);
  for (uint64_t i = 0; i < n_windows; i++) perm[i] = i;
  uint64_t s = seed;
  for (uint64_t i = n_windows - 1; i >= 1; i--) {
    uint64_t j = splitmix(&s) % (i + 1), x = perm[i];
    perm[i] = perm[j];
    perm[j] = x;
  }
  total_batches = max_batches ? max_batches : (n_windows + batch - 1) / batch;
  pthread_t th[64];
  job js[64] = {{0}};
  for (uint64_t t = 0; t < threads; t++) { js[t].t = t; pthread_create(&th[t], 0, reader, &js[t]); }
  uint64_t ck = 0, w = 0;
  for (uint64_t t = 0; t < threads; t++) { pthread_join(th[t], 0); ck += js[t].checksum; w += js[t].windows; }
  double secs = now() - t0;
  printf("{\"batches\": %llu, \"windows\": %llu, \"tokens\": %llu, \"seconds\": %.6f, \"first_batch_s\": %.6f, "
         "\"checksum\": \"%llu\", \"epoch_windows\": %llu, \"method\": \"c-mmap\", \"threads\": %llu}\n",
         (unsigned long long)total_batches, (unsigned long long)w, (unsigned long long)(w * seq), secs,
         first_s < secs ? first_s : secs, (unsigned long long)ck, (unsigned long long)n_windows, (unsigned long long)threads);
  return 0;
}

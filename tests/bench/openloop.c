// openloop DIR NFILES SECONDS: a busy workload for the lease-probe latency
// bench (bench_lease_latency.py). Opens and closes DIR/f<i> (i = 0..NFILES-1,
// round robin, read-only) for SECONDS, timing every open(2); prints one JSON
// line: the number of opens and their latency percentiles and maximum in
// microseconds, and how many took over 1 ms and over 100 ms.
// openloop lease DIR NFILES: the lease window of the agent's probe
// (scan/lease_probe.cc) on each file once: the time from entering
// fcntl(F_SETLEASE, F_WRLCK) to the return of fcntl(F_SETLEASE, F_UNLCK),
// an upper bound of the time a lease exists; prints its median, p99 and mean
// in microseconds as one JSON line.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp(const void* a, const void* b) {
  float x = *(const float*)a, y = *(const float*)b;
  return (x > y) - (x < y);
}

static int lease_window(const char* path, int n) {
  int dir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) {
    perror("open dir");
    return 1;
  }
  float* w = malloc((size_t)n * sizeof *w);
  double sum = 0;
  int count = 0;
  char name[64];
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof name, "f%d", i);
    int fd = openat(dir, name, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    double t0 = now_us();
    if (fcntl(fd, F_SETLEASE, F_WRLCK) == 0) {
      fcntl(fd, F_SETLEASE, F_UNLCK);
      w[count] = (float)(now_us() - t0);
      sum += w[count++];
    }
    close(fd);
  }
  if (count == 0) return 1;
  qsort(w, count, sizeof *w, cmp);
  printf("{\"leases\": %d, \"p50_us\": %.2f, \"p99_us\": %.2f, \"mean_us\": %.3f}\n", count, w[count / 2],
         w[count * 99 / 100], sum / count);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 4 && !strcmp(argv[1], "lease")) return lease_window(argv[2], atoi(argv[3]));
  if (argc != 4) {
    fprintf(stderr, "usage: openloop DIR NFILES SECONDS\n");
    return 2;
  }
  int n = atoi(argv[2]);
  double seconds = atof(argv[3]);
  int dir = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0 || n <= 0) {
    perror("open dir");
    return 1;
  }
  size_t cap = 1 << 20, count = 0;
  float* lat = malloc(cap * sizeof *lat);
  long over_1ms = 0, over_100ms = 0;
  double max = 0, end = now_us() + seconds * 1e6;
  char name[64];
  for (int i = 0; now_us() < end; i = (i + 1) % n) {
    snprintf(name, sizeof name, "f%d", i);
    double t0 = now_us();
    int fd = openat(dir, name, O_RDONLY | O_CLOEXEC);
    double dt = now_us() - t0;
    if (fd < 0) {
      perror(name);
      return 1;
    }
    close(fd);
    if (count == cap) {
      cap *= 2;
      lat = realloc(lat, cap * sizeof *lat);
    }
    lat[count++] = (float)dt;
    if (dt > max) max = dt;
    if (dt > 1000) over_1ms++;
    if (dt > 100000) over_100ms++;
  }
  qsort(lat, count, sizeof *lat, cmp);
  printf(
      "{\"opens\": %zu, \"p50_us\": %.2f, \"p99_us\": %.2f, \"p999_us\": %.2f, \"max_us\": %.0f, "
      "\"over_1ms\": %ld, \"over_100ms\": %ld}\n",
      count, lat[count / 2], lat[count * 99 / 100], lat[count * 999 / 1000], max, over_1ms, over_100ms);
  return 0;
}

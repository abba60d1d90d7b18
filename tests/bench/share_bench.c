/* share_bench SIZE_MIB ROUNDS: creates a segment of SIZE_MIB with the sharing
 * API, then ROUNDS times forks a second process that opens and maps it and
 * reads its first and last byte. Prints "reserve_ms <t>" and one
 * "open_map_us <t>" line per round (the second process's time). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shmkeeper/share.h"

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  size_t bytes = (size_t)atol(argv[1]) << 20;
  int rounds = atoi(argv[2]);
  char name[64];
  snprintf(name, sizeof name, "share-bench-%d", (int)getpid());
  shmk_segment* seg;
  double t0 = now_us();
  if (shmk_create(name, bytes, &seg) != 0) return 1;
  printf("reserve_ms %.1f\n", (now_us() - t0) / 1e3);
  ((char*)shmk_data(seg))[0] = 1;
  ((char*)shmk_data(seg))[bytes - 1] = 2;
  for (int r = 0; r < rounds; r++) {
    int fds[2];
    if (pipe(fds) != 0) return 1;
    pid_t child = fork();
    if (child == 0) {
      double a = now_us();
      shmk_segment* s;
      if (shmk_open(name, 0, &s) != 0) _exit(1);
      const char* d = shmk_data(s);
      volatile int sum = d[0] + d[shmk_size(s) - 1];
      double t = now_us() - a;
      (void)sum;
      if (write(fds[1], &t, sizeof t) != sizeof t) _exit(1);
      shmk_release(s);
      _exit(0);
    }
    double t;
    if (read(fds[0], &t, sizeof t) != sizeof t) return 1;
    waitpid(child, NULL, 0);
    close(fds[0]);
    close(fds[1]);
    printf("open_map_us %.1f\n", t);
  }
  shmk_release(seg);
  return 0;
}

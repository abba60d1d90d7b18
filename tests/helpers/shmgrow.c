/* shmgrow: a dynamically linked (glibc) probe for the sharing runtime.
 *   shmgrow create NAME MIB   shm_open+ftruncate+mmap, then write every page; "ok"
 *   shmgrow leak NAME MIB     create and size it, print "creator <pid>", live 300 ms
 *                             (a creator is killed later than it creates), SIGKILL itself
 *   shmgrow sparse NAME MIB   shm_open+ftruncate+mmap, touch the first and the last page only;
 *                             prints "ok" and how much of /dev/shm is in use ("used <KiB>"),
 *                             leaves the segment (the container's cgroup keeps its charge)
 *   shmgrow env               print LD_PRELOAD (or "none")
 *   shmgrow bench N           N cycles of shm_open/ftruncate(4 KiB)/mmap/munmap/shm_unlink;
 *                             prints the CPU nanoseconds per cycle (user + system: what a
 *                             shared machine's load does not inflate)
 *   shmgrow bench-open N      N cycles of open(O_CREAT|O_RDWR) of an existing /dev/shm file and
 *                             close; prints the CPU nanoseconds per cycle
 *   shmgrow cancel open|openat FIFO
 *                             pthread_cancel a thread blocked opening FIFO (nobody writes):
 *                             "canceled" (exit 0) when the join returns PTHREAD_CANCELED within 3 s */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

static int make(const char* name, size_t bytes) {
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    perror("shm_open");
    exit(2);
  }
  if (ftruncate(fd, (off_t)bytes) != 0) {
    printf("ftruncate: errno %d (%s)\n", errno, strerror(errno));
    fflush(stdout);
    shm_unlink(name);
    exit(28);
  }
  return fd;
}

static double elapsed_ns(const struct timespec* a, long n) {
  struct timespec b;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
  return ((b.tv_sec - a->tv_sec) * 1e9 + (b.tv_nsec - a->tv_nsec)) / (double)n;
}

static int bench_open(long n) {
  char path[64];
  struct timespec a;
  snprintf(path, sizeof path, "/dev/shm/shmgrow-open-%d", (int)getpid());
  close(open(path, O_CREAT | O_RDWR, 0600));
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
  for (long i = 0; i < n; i++) {
    int fd = open(path, O_CREAT | O_RDWR, 0600);
    if (fd < 0) return 1;
    close(fd);
  }
  printf("%.1f\n", elapsed_ns(&a, n));
  unlink(path);
  return 0;
}

static const char* cancel_how;
static const char* cancel_fifo;

static void* open_blocked(void* arg) {
  (void)arg;
  if (!strcmp(cancel_how, "openat")) return (void*)(long)openat(AT_FDCWD, cancel_fifo, O_RDONLY | O_CLOEXEC);
  return (void*)(long)open(cancel_fifo, O_RDONLY | O_CLOEXEC);
}

static int cancel_open(const char* how, const char* fifo) {
  pthread_t t;
  void* ret = NULL;
  struct timespec deadline;
  cancel_how = how;
  cancel_fifo = fifo;
  pthread_create(&t, NULL, open_blocked, NULL);
  usleep(200 * 1000); /* blocked in the open by now */
  pthread_cancel(t);
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 3;
  if (pthread_timedjoin_np(t, &ret, &deadline) != 0) {
    printf("not canceled\n");
    fflush(stdout);
    _exit(1);
  }
  printf(ret == PTHREAD_CANCELED ? "canceled\n" : "returned\n");
  return ret == PTHREAD_CANCELED ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc >= 3 && !strcmp(argv[1], "bench-open")) return bench_open(atol(argv[2]));
  if (argc >= 4 && !strcmp(argv[1], "cancel")) return cancel_open(argv[2], argv[3]);
  if (argc >= 2 && !strcmp(argv[1], "env")) {
    const char* p = getenv("LD_PRELOAD");
    printf("%s\n", p ? p : "none");
    return 0;
  }
  if (argc >= 3 && !strcmp(argv[1], "bench")) {
    long n = atol(argv[2]);
    struct timespec a;
    char name[64];
    snprintf(name, sizeof name, "/shmgrow-bench-%d", (int)getpid());
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
    for (long i = 0; i < n; i++) {
      int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd < 0 || ftruncate(fd, 4096) != 0) return 1;
      void* m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (m == MAP_FAILED) return 1;
      munmap(m, 4096);
      close(fd);
      shm_unlink(name);
    }
    printf("%.1f\n", elapsed_ns(&a, n));
    return 0;
  }
  if (argc < 4) {
    fprintf(stderr,
            "usage: shmgrow create|leak|sparse NAME MIB | env | bench N | bench-open N | cancel open|openat FIFO\n");
    return 2;
  }
  size_t bytes = (size_t)atol(argv[3]) << 20;
  int fd = make(argv[2], bytes);
  if (!strcmp(argv[1], "leak")) {
    printf("creator %d\n", (int)getpid());
    fflush(stdout);
    usleep(300 * 1000);
    kill(getpid(), SIGKILL);
  }
  char* m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    perror("mmap");
    return 2;
  }
  if (!strcmp(argv[1], "sparse")) {
    struct statvfs vfs;
    m[0] = 1;
    m[bytes - 1] = 1;
    if (statvfs("/dev/shm", &vfs) != 0) return 2;
    printf("ok\nused %llu\n", (unsigned long long)(vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize / 1024);
    return 0;
  }
  for (size_t off = 0; off < bytes; off += 4096) m[off] = 1;
  printf("ok\n");
  return 0;
}

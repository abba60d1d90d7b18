/* shmtool: a static probe the tests run inside containers (and on the host)
 * to create shared-memory segments in known states.
 *   shmtool create NAME MIB          create /dev/shm/NAME with MIB MiB, exit (orphaned)
 *   shmtool hold NAME MIB            create it and keep the fd open forever
 *   shmtool map NAME MIB             create it, map it, close the fd, sleep forever
 *   shmtool unlinked NAME MIB        create, map, unlink, sleep forever
 *   shmtool torch-leak MIB           create /dev/shm/torch_<pid>_0, then SIGKILL itself
 *   shmtool sysv MIB                 SysV segment, attach, touch, detach, exit (nattch 0)
 *   shmtool sysv-hold MIB            SysV segment kept attached forever
 *   shmtool sysv-use ID MS SECONDS   attach segment ID, touch it, detach, every MS ms for
 *                                    SECONDS or until SIGTERM; prints "ready" after its first
 *                                    use, "uses=N errors=M" at the end (an intermittent peer)
 *   shmtool map-later NAME MIB SECS  create /dev/shm/NAME of MIB MiB with ftruncate (no pages),
 *                                    map it, close the fd, print "ready"; after SECS seconds or
 *                                    at SIGUSR1 (runc exec forwards it), whichever is first,
 *                                    write every page through the mapping (no write(2), no
 *                                    close: no fanotify event), print "touched", sleep forever
 *   shmtool memfd MIB                a memfd of MIB MiB, mapped and written (shmem charged to
 *                                    the memory cgroup, nothing on /dev/shm), kept forever
 * Prints "ready" once the segment exists. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void die(const char* what) {
  perror(what);
  exit(1);
}

static int create(const char* name, size_t bytes) {
  char path[512];
  snprintf(path, sizeof path, "/dev/shm/%s", name);
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) die("open");
  char buf[65536];
  memset(buf, 0x5a, sizeof buf);
  for (size_t done = 0; done < bytes; done += sizeof buf) {
    if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf) die("write");
  }
  return fd;
}

static void ready(void) {
  printf("ready %d\n", getpid());
  fflush(stdout);
}

static void forever(void) {
  for (;;) pause();
}

static volatile sig_atomic_t stop_use;

static void on_term(int sig) {
  (void)sig;
  stop_use = 1;
}

static void on_usr1(int sig) { (void)sig; }

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: shmtool create|hold|map|unlinked NAME MIB | torch-leak|sysv|sysv-hold MIB\n");
    return 2;
  }
  const char* cmd = argv[1];
  if (!strcmp(cmd, "sysv-use") && argc == 5) {
    int id = atoi(argv[2]), errors = 0, uses = 0;
    useconds_t period = (useconds_t)atoi(argv[3]) * 1000;
    time_t end = time(NULL) + atoi(argv[4]);
    /* SIGTERM (forwarded by `runc exec`) ends the uses early, still with the count: a test stops its
     * reclaim loop first, then its peer, never the other way round. */
    struct sigaction sa = {0};
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    while (!stop_use && time(NULL) < end) {
      char* p = shmat(id, NULL, 0);
      if (p == (void*)-1) {
        errors++;
      } else {
        p[0]++;
        shmdt(p);
        if (uses++ == 0) ready();
      }
      usleep(period);
    }
    printf("uses=%d errors=%d\n", uses, errors);
    return 0;
  }
  if (!strcmp(cmd, "map-later") && argc == 5) {
    char path[512];
    snprintf(path, sizeof path, "/dev/shm/%s", argv[2]);
    size_t bytes = (size_t)atol(argv[3]) << 20;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) die("open");
    if (ftruncate(fd, (off_t)bytes) != 0) die("ftruncate");
    char* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) die("mmap");
    close(fd);
    struct sigaction sa = {0};
    sa.sa_handler = on_usr1; /* a handled signal ends sleep() early */
    sigaction(SIGUSR1, &sa, NULL);
    ready();
    sleep((unsigned)atoi(argv[4]));
    memset(p, 0x5a, bytes);
    printf("touched\n");
    fflush(stdout);
    forever();
  }
  if (!strcmp(cmd, "memfd")) {
    size_t bytes = (size_t)atol(argv[2]) << 20;
    int fd = memfd_create("shmtool", 0);
    if (fd < 0) die("memfd_create");
    if (ftruncate(fd, (off_t)bytes) != 0) die("ftruncate");
    char* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) die("mmap");
    memset(p, 0x5a, bytes);
    ready();
    forever();
  }
  if (!strcmp(cmd, "torch-leak") || !strcmp(cmd, "sysv") || !strcmp(cmd, "sysv-hold")) {
    size_t bytes = (size_t)atol(argv[2]) << 20;
    if (!strcmp(cmd, "torch-leak")) {
      char name[64];
      snprintf(name, sizeof name, "torch_%d_0", getpid());
      close(create(name, bytes));
      ready();
      raise(SIGKILL);
    }
    int id = shmget(IPC_PRIVATE, bytes, IPC_CREAT | 0600);
    if (id < 0) die("shmget");
    char* p = shmat(id, NULL, 0);
    if (p == (void*)-1) die("shmat");
    memset(p, 0x5a, bytes);
    printf("shmid %d\n", id);
    ready();
    if (!strcmp(cmd, "sysv-hold")) forever();
    shmdt(p);
    return 0;
  }
  if (argc < 4) return 2;
  const char* name = argv[2];
  size_t bytes = (size_t)atol(argv[3]) << 20;
  int fd = create(name, bytes);
  if (!strcmp(cmd, "create")) {
    close(fd);
    ready();
    return 0;
  }
  if (!strcmp(cmd, "hold")) {
    ready();
    forever();
  }
  void* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) die("mmap");
  close(fd);
  if (!strcmp(cmd, "unlinked")) {
    char path[512];
    snprintf(path, sizeof path, "/dev/shm/%s", name);
    if (unlink(path) != 0) die("unlink");
  }
  ready();
  forever();
  return 0;
}

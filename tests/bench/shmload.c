/* shmload: a synthetic node load for the agent benchmark.
 *   shmload DIR NPROCS FILES_PER_PROC UNLINKED_PCT LEAKED
 * Forks NPROCS processes; each creates FILES_PER_PROC 4 KiB files in DIR and
 * holds them (open fds; every 4th one also mapped), unlinking UNLINKED_PCT %
 * of them while still holding them. Then LEAKED more files with no holder
 * and a dead creator (torch_<pid>_N). Prints "ready" and waits for SIGTERM,
 * which ends every child. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static int make_file(const char* path) {
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return -1;
  char buf[4096];
  memset(buf, 1, sizeof buf);
  if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf) return -1;
  return fd;
}

int main(int argc, char** argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: shmload DIR NPROCS FILES_PER_PROC UNLINKED_PCT LEAKED\n");
    return 2;
  }
  const char* dir = argv[1];
  int nprocs = atoi(argv[2]), per = atoi(argv[3]), unlinked_pct = atoi(argv[4]), leaked = atoi(argv[5]);
  int ready[2];
  if (pipe(ready) != 0) return 1;
  for (int p = 0; p < nprocs; ++p) {
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
      for (int f = 0; f < per; ++f) {
        char path[512];
        snprintf(path, sizeof path, "%s/held_%d_%d", dir, p, f);
        int fd = make_file(path);
        if (fd < 0) _exit(1);
        if (f % 4 == 0) (void)mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);  // held mapped, on purpose
        if ((f * 100) / per < unlinked_pct) unlink(path);
      }
      if (write(ready[1], "x", 1) != 1) _exit(1);
      for (;;) pause();
    }
  }
  for (int p = 0; p < nprocs; ++p) {
    char c;
    if (read(ready[0], &c, 1) != 1) return 1;
  }
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, NULL, 0);
  for (int l = 0; l < leaked; ++l) {
    char path[512];
    snprintf(path, sizeof path, "%s/torch_%d_%d", dir, dead, l);
    int fd = make_file(path);
    if (fd >= 0) close(fd);
  }
  printf("ready\n");
  fflush(stdout);
  signal(SIGTERM, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigprocmask(SIG_BLOCK, &set, NULL);
  int sig;
  sigwait(&set, &sig);
  kill(0, SIGKILL);
  return 0;
}

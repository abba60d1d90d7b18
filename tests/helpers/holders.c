/* holders: adversaries for the agent's reclaim (tests/integration/test_reclaim_safety.py).
 * Every kind of holder the kernel knows, storms that race a reclaim, and the
 * tools to set a node state up. Real processes and real files, no mocks.
 *
 *   holders MODE [options] [PATH...]
 *
 * Holder modes (hold every PATH for -t seconds, then report):
 *   hold          open and map each PATH (the plain holder)
 *   private-fd    a thread calls unshare(CLONE_FILES) and opens each PATH (-m: and maps it); the
 *                 thread-group leader's fd table never has them
 *   zombie        a worker thread opens and maps each PATH, then the main thread calls pthread_exit:
 *                 the leader is a zombie, the worker holds everything
 *   relay         a chain of processes: each link holds the fds it inherited, forks its successor
 *                 after -a..-b ms (default 1..5) and exits at once; a subreaper reaps the chain
 *   map-closed    map each PATH and close its fd
 *   scm           send each PATH's fd over a socketpair (SCM_RIGHTS), close it; receive only at the end
 *   opath-scm     the same with an O_PATH fd; at the end reopen it through /proc/self/fd (removed: nlink 0)
 *   uring         register each PATH's fd with an io_uring (IORING_REGISTER_FILES), close it; only the ring
 *                 holds the file
 *   getfd         a child opens each PATH; the holder takes the fds with pidfd_getfd(2), the child is killed
 *   reopen-storm  open a random PATH (or -p PREFIX with -n N: PREFIX0..PREFIX<N-1>), keep it 0-2 ms,
 *                 close; an fd whose st_nlink is 0 while open is a file removed after it was opened;
 *                 -r: recreate a name that is gone (closed at once: a fresh leak, the churn goes on)
 *   swap          exchange directory -p DIR with a symlink DIR.swap -> -v TARGET (RENAME_EXCHANGE) every
 *                 0-1 ms: a path resolved through DIR may land in TARGET (outside the tmpfs)
 *   rename-storm  create -n N held files named -p PREFIX<pid>_<k>{a,b} and rename each back and forth
 *                 (and, with -v VPREFIX -V COUNT, over the names VPREFIX0.. and back: atomic replace)
 * -R: holders open read-only (and map PROT_READ).
 * Each prints "ready pid=<pid>" once it holds everything, and at the end one line
 *   result mode=<mode> watched=<files> removed=<n> missing=<n> transient=<n> [opens=<n> enoent=<n>]
 * removed: a held file whose st_nlink became 0 (or whose mapping turned "(deleted)");
 * missing: a held file not found under its name at the end, after -w seconds (default 3) of waiting;
 * transient: times a held file's name was briefly gone (a quarantine rename: allowed).
 * Exit status 3 when anything was removed or missing, else 0.
 *
 * Tool modes:
 *   leak -p DIR -n N [-z BYTES] [-x TAG]   files DIR/torch_<deadpid>_<TAG><i> of BYTES (default 4096),
 *                                          <deadpid> a child forked and reaped first; prints "deadpid=<pid>"
 *   sleepers -n N                          N sleeping children (dying with the parent); "ready", then waits
 *   forge -S SOCKET [-u UID] [-g GID] [-B DIR] [-o] [-l MS] [-k SECONDS] NAME
 *                                          (-B: bind DIR on /dev/shm in a private mount namespace, as root)
 *                                          drop to UID/GID, (-o: open /dev/shm/NAME and keep it while
 *                                          sending), send {"type":"create","path":"/dev/shm/NAME"} to
 *                                          SOCKET (-n COUNT times), linger MS (default 300), close, stay
 *                                          alive -k seconds
 *   killer -P PID -n N [-t SECONDS] DIR    SIGKILL PID after N deletions in DIR, at the next quarantine
 *                                          rename into .shmkeeper-reclaim.* when the agent uses them
 *   unlink DIR                             unlink every regular file in DIR; prints "unlinked=<n> seconds=<s>"
 *   plant -p VALUE PATH                    create PATH (if missing) and set its trusted.shmkeeper.name xattr to
 *                                          VALUE (needs CAP_SYS_ADMIN: a privileged container)
 *   linker [-t SECONDS] DIR                hard-link every file renamed into DIR under a quarantine name
 *                                          (.shmkeeper-reclaim.*) to "<that name>.linked" at once (the
 *                                          reclaim's settle window); prints "linked=<n>" at the end
 * forge -U: after dropping to UID/GID, unshare(CLONE_NEWUSER) and map uid/gid 0 of the new namespace to
 * them (root of a user namespace the sender made itself, with every capability there).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/io_uring.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#define QUARANTINE ".shmkeeper-reclaim."

struct opts {
  double seconds, settle;
  int seed, map, n, min_ms, max_ms, vcount, linger_ms, keep_s, open_first, refill, read_only, userns;
  long bytes, uid, gid, pid;
  const char *prefix, *vprefix, *tag, *socket, *bind_dir;
};

struct watched {
  char path[PATH_MAX];
  int fd;
  dev_t dev;
  ino_t ino;
  void* map;
  int removed, missing;
};

static struct opts O;
static struct watched* W;
static int NW;
static long transient;

/* One write(2) per line: lines from the links of a fork chain never interleave. */
static void say(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (n > (int)sizeof buf - 2) n = sizeof buf - 2;
  buf[n++] = '\n';
  if (write(1, buf, (size_t)n) < 0) _exit(4);
}

static void die(const char* what) {
  say("error %s: %s", what, strerror(errno));
  exit(1);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(double ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)((ms - (double)(time_t)(ms / 1000) * 1000) * 1e6)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Opens (and, with `map`, maps) w->path; records its inode. */
static void take(struct watched* w, int map) {
  w->fd = open(w->path, (O.read_only ? O_RDONLY : O_RDWR) | O_NOFOLLOW | O_CLOEXEC);
  if (w->fd < 0) die(w->path);
  struct stat st;
  if (fstat(w->fd, &st) != 0) die("fstat");
  w->dev = st.st_dev;
  w->ino = st.st_ino;
  if (map) {
    w->map = mmap(NULL, 4096, PROT_READ | (O.read_only ? 0 : PROT_WRITE), MAP_SHARED, w->fd, 0);
    if (w->map == MAP_FAILED) die("mmap");
  }
}

/* True when the mapping at `addr` is of a file that has been unlinked. */
static int mapping_deleted(void* addr) {
  FILE* f = fopen("/proc/self/maps", "r");
  if (!f) return 0;
  char line[PATH_MAX + 128];
  int deleted = 0;
  while (fgets(line, sizeof line, f)) {
    if (strtoul(line, NULL, 16) != (unsigned long)(uintptr_t)addr) continue;
    size_t len = strlen(line);
    while (len && line[len - 1] == '\n') line[--len] = 0;
    deleted = len > 10 && strcmp(line + len - 10, " (deleted)") == 0;
    break;
  }
  fclose(f);
  return deleted;
}

/* True when w->path names w's inode right now. */
static int name_ok(const struct watched* w) {
  struct stat st;
  return lstat(w->path, &st) == 0 && st.st_dev == w->dev && st.st_ino == w->ino;
}

/* One look at every watched file: removal is final, a missing name is counted as transient. */
static void check_all(void) {
  for (int i = 0; i < NW; ++i) {
    struct watched* w = &W[i];
    if (w->removed) continue;
    struct stat st;
    if (w->fd >= 0 && fstat(w->fd, &st) == 0 && st.st_nlink == 0) w->removed = 1;
    if (w->fd < 0 && w->map && mapping_deleted(w->map)) w->removed = 1;
    if (w->removed) {
      say("removed-while-held %s", w->path);
    } else if (!name_ok(w)) {
      ++transient;
    }
  }
}

/* Holds until the deadline, checking every 20 ms. */
static void watch_until(double deadline) {
  while (now() < deadline) {
    check_all();
    sleep_ms(50);
  }
  check_all();
}

/* The end: waits up to O.settle seconds for every name to come back, prints the result. */
static int report(const char* mode, const char* extra) {
  double deadline = now() + O.settle;
  int missing;
  for (;;) {
    missing = 0;
    for (int i = 0; i < NW; ++i) missing += !W[i].removed && !name_ok(&W[i]);
    if (!missing || now() >= deadline) break;
    sleep_ms(50);
  }
  int removed = 0;
  for (int i = 0; i < NW; ++i) {
    removed += W[i].removed;
    if (!W[i].removed && !name_ok(&W[i])) say("missing-at-end %s", W[i].path);
  }
  say("result mode=%s watched=%d removed=%d missing=%d transient=%ld%s%s", mode, NW, removed, missing, transient,
      extra ? " " : "", extra ? extra : "");
  return removed || missing ? 3 : 0;
}

static void ready(void) { say("ready pid=%d", getpid()); }

/* ---- holder modes ---------------------------------------------------------- */

static int mode_hold(void) {
  for (int i = 0; i < NW; ++i) take(&W[i], 1);
  ready();
  watch_until(now() + O.seconds);
  return report("hold", NULL);
}

static void* private_fd_thread(void* arg) {
  (void)arg;
  if (unshare(CLONE_FILES) != 0) die("unshare(CLONE_FILES)");
  for (int i = 0; i < NW; ++i) take(&W[i], O.map);
  ready();
  watch_until(now() + O.seconds);
  return (void*)(intptr_t)report(O.map ? "private-fd-map" : "private-fd", NULL);
}

static int mode_private_fd(void) {
  pthread_t t;
  void* rc = NULL;
  if (pthread_create(&t, NULL, private_fd_thread, NULL) != 0) die("pthread_create");
  if (pthread_join(t, &rc) != 0) die("pthread_join");
  return (int)(intptr_t)rc;
}

static int zombie_pipe[2];

static void* zombie_worker(void* arg) {
  (void)arg;
  for (int i = 0; i < NW; ++i) take(&W[i], 1);
  if (write(zombie_pipe[1], "x", 1) != 1) die("write");
  sleep_ms(100);  // the leader is gone by now
  ready();
  watch_until(now() + O.seconds);
  exit(report("zombie", NULL));
}

static int mode_zombie(void) {
  if (pipe(zombie_pipe) != 0) die("pipe");
  pthread_t t;
  if (pthread_create(&t, NULL, zombie_worker, NULL) != 0) die("pthread_create");
  char c;
  if (read(zombie_pipe[0], &c, 1) != 1) die("read");
  pthread_exit(NULL);  // the leader becomes a zombie; the worker keeps the process alive
}

static int mode_relay(void) {
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) die("PR_SET_CHILD_SUBREAPER");
  pid_t first = fork();
  if (first < 0) die("fork");
  if (first > 0) {  // the subreaper: holds nothing, reaps the chain, fails if a link did
    int worst = 0, st;
    while (wait(&st) > 0) {
      if (WIFEXITED(st) && WEXITSTATUS(st) > worst) worst = WEXITSTATUS(st);
    }
    return worst;
  }
  for (int i = 0; i < NW; ++i) take(&W[i], 0);
  ready();
  srand((unsigned)O.seed ^ (unsigned)getpid());
  double deadline = now() + O.seconds;
  long hops = 0;
  while (now() < deadline) {
    sleep_ms(O.min_ms + (O.max_ms > O.min_ms ? rand() % (O.max_ms - O.min_ms + 1) : 0));
    check_all();
    pid_t next = fork();
    if (next < 0) die("fork");
    if (next > 0) _exit(0);  // the parent leaves at once: only the new child holds the files
    ++hops;
  }
  char extra[64];
  snprintf(extra, sizeof extra, "hops=%ld", hops);
  check_all();
  return report("relay", extra);
}

static int mode_map_closed(void) {
  for (int i = 0; i < NW; ++i) {
    take(&W[i], 1);
    close(W[i].fd);
    W[i].fd = -1;
  }
  ready();
  watch_until(now() + O.seconds);
  return report("map-closed", NULL);
}

/* One byte with room for one fd of SCM_RIGHTS: msg points into it. */
struct scm_buf {
  char byte;
  struct iovec iov;
  _Alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  struct msghdr msg;
};

static void scm_init(struct scm_buf* b) {
  memset(b, 0, sizeof *b);
  b->byte = 'f';
  b->iov = (struct iovec){&b->byte, 1};
  b->msg = (struct msghdr){
      .msg_iov = &b->iov, .msg_iovlen = 1, .msg_control = b->control, .msg_controllen = sizeof b->control};
}

static int mode_scm(void) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) die("socketpair");
  struct scm_buf b;
  for (int i = 0; i < NW; ++i) {
    take(&W[i], 0);
    scm_init(&b);
    struct cmsghdr* c = CMSG_FIRSTHDR(&b.msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &W[i].fd, sizeof(int));
    if (sendmsg(sv[0], &b.msg, 0) != 1) die("sendmsg");
    close(W[i].fd);  // from now on the only reference is in flight in sv[1]'s queue
    W[i].fd = -1;
  }
  ready();
  double deadline = now() + O.seconds;
  while (now() < deadline) {  // no fd to look at: only the names
    for (int i = 0; i < NW; ++i) transient += !name_ok(&W[i]);
    sleep_ms(20);
  }
  for (int i = 0; i < NW; ++i) {  // the fds come back in the order they were sent
    scm_init(&b);
    if (recvmsg(sv[1], &b.msg, MSG_CMSG_CLOEXEC) != 1) die("recvmsg");
    struct cmsghdr* c = CMSG_FIRSTHDR(&b.msg);
    if (!c || c->cmsg_type != SCM_RIGHTS) die("no SCM_RIGHTS");
    memcpy(&W[i].fd, CMSG_DATA(c), sizeof(int));
  }
  check_all();
  return report("scm", NULL);
}

static int send_fd(int sock, int fd) {
  struct scm_buf b;
  scm_init(&b);
  struct cmsghdr* c = CMSG_FIRSTHDR(&b.msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof(int));
  return sendmsg(sock, &b.msg, 0) == 1;
}

/* An O_PATH fd in flight: no open file description (no lease conflict), no /proc entry. At the end it is
 * received and reopened through /proc/self/fd: a file with no name left (nlink 0) was removed. */
static int mode_opath_scm(void) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) die("socketpair");
  for (int i = 0; i < NW; ++i) {
    int fd = open(W[i].path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) die(W[i].path);
    W[i].dev = st.st_dev;
    W[i].ino = st.st_ino;
    if (!send_fd(sv[0], fd)) die("sendmsg");
    close(fd);
  }
  ready();
  double deadline = now() + O.seconds;
  while (now() < deadline) {
    for (int i = 0; i < NW; ++i) transient += !name_ok(&W[i]);
    sleep_ms(20);
  }
  for (int i = 0; i < NW; ++i) {
    struct scm_buf b;
    scm_init(&b);
    if (recvmsg(sv[1], &b.msg, MSG_CMSG_CLOEXEC) != 1) die("recvmsg");
    struct cmsghdr* c = CMSG_FIRSTHDR(&b.msg);
    if (!c || c->cmsg_type != SCM_RIGHTS) die("no SCM_RIGHTS");
    int opath;
    memcpy(&opath, CMSG_DATA(c), sizeof(int));
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", opath);
    W[i].fd = open(self, O_RDONLY | O_CLOEXEC);
    if (W[i].fd < 0) die("reopen through /proc/self/fd");
  }
  check_all();
  return report("opath-scm", NULL);
}

/* Each file registered with an io_uring and its fd closed: only the ring's fixed-file table holds it. */
static int mode_uring(void) {
  struct io_uring_params p;
  memset(&p, 0, sizeof p);
  int ring = (int)syscall(__NR_io_uring_setup, 4, &p);
  if (ring < 0) die("io_uring_setup");
  int* fds = calloc((size_t)(NW ? NW : 1), sizeof *fds);
  for (int i = 0; i < NW; ++i) {
    take(&W[i], 0);
    fds[i] = W[i].fd;
  }
  if (syscall(__NR_io_uring_register, ring, IORING_REGISTER_FILES, fds, NW) != 0) die("IORING_REGISTER_FILES");
  for (int i = 0; i < NW; ++i) {
    close(W[i].fd);
    W[i].fd = -1;
  }
  ready();
  double deadline = now() + O.seconds;
  while (now() < deadline) {
    for (int i = 0; i < NW; ++i) transient += !name_ok(&W[i]);
    sleep_ms(20);
  }
  /* The ring's table is the only reference: a removed file shows as missing at the end. */
  return report("uring", NULL);
}

/* A child opens the files; the holder takes its fds with pidfd_getfd(2), then kills it. */
static int mode_getfd(void) {
  int pipefd[2];
  if (pipe(pipefd) != 0) die("pipe");
  pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    for (int i = 0; i < NW; ++i) {
      take(&W[i], 0);
      if (write(pipefd[1], &W[i].fd, sizeof(int)) != sizeof(int)) _exit(4);
    }
    for (;;) pause();
  }
  int pidfd = (int)syscall(SYS_pidfd_open, child, 0);
  if (pidfd < 0) die("pidfd_open");
  for (int i = 0; i < NW; ++i) {
    int theirs;
    if (read(pipefd[0], &theirs, sizeof theirs) != sizeof theirs) die("read");
    W[i].fd = (int)syscall(SYS_pidfd_getfd, pidfd, theirs, 0);
    struct stat st;
    if (W[i].fd < 0 || fstat(W[i].fd, &st) != 0) die("pidfd_getfd");
    W[i].dev = st.st_dev;
    W[i].ino = st.st_ino;
  }
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  ready();
  watch_until(now() + O.seconds);
  return report("getfd", NULL);
}

static int is_quarantine(const struct inotify_event* e);

static int mode_plant(const char* path) {
  if (!O.prefix) die("plant needs -p VALUE");
  int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) die(path);
  if (fsetxattr(fd, "trusted.shmkeeper.name", O.prefix, strlen(O.prefix), 0) != 0) die("fsetxattr");
  close(fd);
  say("planted %s value=%s", path, O.prefix);
  return 0;
}

static int mode_linker(const char* dir) {
  int in = inotify_init1(IN_CLOEXEC);
  if (in < 0 || inotify_add_watch(in, dir, IN_MOVED_TO) < 0) die("inotify");
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) die(dir);
  ready();
  long linked = 0;
  double deadline = now() + O.seconds;
  _Alignas(struct inotify_event) char buf[65536];
  while (now() < deadline) {
    struct pollfd pfd = {in, POLLIN, 0};
    if (poll(&pfd, 1, 100) <= 0) continue;
    ssize_t n = read(in, buf, sizeof buf);
    for (char* q = buf; n > 0 && q < buf + n;) {
      struct inotify_event* e = (struct inotify_event*)q;
      q += sizeof *e + e->len;
      if (!is_quarantine(e)) continue;
      char to[NAME_MAX + 1];
      snprintf(to, sizeof to, "%.240s.linked", e->name + strlen(QUARANTINE));
      if (linkat(dfd, e->name, dfd, to, 0) == 0) {
        ++linked;
        say("linked %s", e->name);
      }
    }
  }
  say("linked=%ld", linked);
  return 0;
}

/* Names PREFIX0..PREFIX<n-1>, or the PATH arguments. */
static char** storm_names(int argc, char** argv, int* count) {
  if (O.prefix && O.n > 0) {
    char** names = calloc((size_t)O.n, sizeof *names);
    for (int i = 0; i < O.n; ++i) {
      if (asprintf(&names[i], "%s%d", O.prefix, i) < 0) die("asprintf");
    }
    *count = O.n;
    return names;
  }
  *count = argc;
  return argv;
}

static int mode_reopen_storm(int argc, char** argv) {
  int count;
  char** names = storm_names(argc, argv, &count);
  if (count == 0) die("no names");
  srand((unsigned)O.seed ^ (unsigned)getpid());
  long opens = 0, enoent = 0, removed = 0, refills = 0;
  ready();
  double deadline = now() + O.seconds;
  while (now() < deadline) {
    const char* name = names[rand() % count];
    int fd = open(name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      if (errno != ENOENT) continue;
      ++enoent;
      int made = O.refill ? open(name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644) : -1;
      if (made >= 0) {
        refills += write(made, name, strlen(name)) > 0;
        close(made);
      }
      continue;
    }
    ++opens;
    struct stat st;
    int gone = fstat(fd, &st) == 0 && st.st_nlink == 0;
    if (!gone) {
      sleep_ms((rand() % 2001) / 1000.0);
      gone = fstat(fd, &st) == 0 && st.st_nlink == 0;
    }
    if (gone) {
      ++removed;
      if (removed <= 20) say("removed-while-held %s", name);
    }
    close(fd);
  }
  say("result mode=reopen-storm watched=%d removed=%ld missing=0 transient=0 opens=%ld enoent=%ld refills=%ld", count,
      removed, opens, enoent, refills);
  return removed ? 3 : 0;
}

static pid_t dead_pid(void) {
  pid_t p = fork();
  if (p < 0) die("fork");
  if (p == 0) _exit(0);
  if (waitpid(p, NULL, 0) != p) die("waitpid");
  return p;
}

static void make_file(const char* path, long bytes) {
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) die(path);
  char buf[4096];
  memset(buf, 0x5a, sizeof buf);
  for (long done = 0; done < bytes; done += (long)sizeof buf) {
    size_t n = bytes - done < (long)sizeof buf ? (size_t)(bytes - done) : sizeof buf;
    if (write(fd, buf, n) != (ssize_t)n) die("write");
  }
  close(fd);
}

/* Holds files under names that look leaked and renames them all the time. */
static int mode_rename_storm(void) {
  if (!O.prefix || O.n <= 0) die("rename-storm needs -p PREFIX -n N");
  char(*alt)[2][PATH_MAX] = calloc((size_t)O.n, sizeof *alt);
  W = calloc((size_t)O.n, sizeof *W);
  NW = O.n;
  for (int k = 0; k < O.n; ++k) {
    snprintf(alt[k][0], PATH_MAX, "%s%d_%da", O.prefix, getpid(), k);
    snprintf(alt[k][1], PATH_MAX, "%s%d_%db", O.prefix, getpid(), k);
    make_file(alt[k][0], 4096);
    snprintf(W[k].path, PATH_MAX, "%s", alt[k][0]);
    take(&W[k], k % 2);
  }
  srand((unsigned)O.seed ^ (unsigned)getpid());
  long renames = 0, enoent = 0, replaced = 0;
  ready();
  double deadline = now() + O.seconds;
  while (now() < deadline) {
    int k = rand() % O.n;
    struct watched* w = &W[k];
    if (w->removed) continue;
    char target[PATH_MAX];
    int over = O.vprefix && O.vcount > 0 && rand() % 4 == 0;
    if (over) {
      snprintf(target, sizeof target, "%s%d", O.vprefix, rand() % O.vcount);
    } else {
      snprintf(target, sizeof target, "%s", strcmp(w->path, alt[k][0]) == 0 ? alt[k][1] : alt[k][0]);
    }
    if (rename(w->path, target) != 0) {
      if (errno != ENOENT) die("rename");
      ++enoent;  // our name is gone: in quarantine (it must come back) or removed (caught below)
      ++transient;
    } else {
      ++renames;
      replaced += over;
      snprintf(w->path, PATH_MAX, "%s", target);
    }
    check_all();
    if (over) sleep_ms((rand() % 2001) / 1000.0);  // a while under the leak's name
    if (over && !w->removed && rename(w->path, alt[k][0]) == 0) snprintf(w->path, PATH_MAX, "%s", alt[k][0]);
    sleep_ms((rand() % 1001) / 1000.0);
  }
  check_all();
  char extra[96];
  snprintf(extra, sizeof extra, "renames=%ld enoent=%ld replaced=%ld", renames, enoent, replaced);
  return report("rename-storm", extra);
}

/* ---- tool modes ------------------------------------------------------------ */

static int mode_leak(void) {
  if (!O.prefix || O.n <= 0) die("leak needs -p DIR -n N");
  pid_t dead = dead_pid();
  char path[PATH_MAX];
  for (int i = 0; i < O.n; ++i) {
    snprintf(path, sizeof path, "%s/torch_%d_%s%d", O.prefix, dead, O.tag ? O.tag : "", i);
    make_file(path, O.bytes);
  }
  say("deadpid=%d made=%d", dead, O.n);
  return 0;
}

static void on_term(int sig) { (void)sig; }

static int mode_sleepers(void) {
  for (int i = 0; i < O.n; ++i) {
    pid_t p = fork();
    if (p < 0) die("fork");
    if (p == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      for (;;) pause();
    }
  }
  signal(SIGTERM, on_term);
  ready();
  pause();
  return 0;
}

static void write_file(const char* path, const char* text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) die(path);
  close(fd);
}

/* uid and gid 0 of a new user namespace, mapped to the caller's own ids. */
static void become_userns_root(void) {
  uid_t uid = getuid();
  gid_t gid = getgid();
  /* setuid(2) made the process non-dumpable: its /proc files would stay root's and its maps unwritable. */
  if (prctl(PR_SET_DUMPABLE, 1) != 0) die("PR_SET_DUMPABLE");
  if (unshare(CLONE_NEWUSER) != 0) die("unshare(CLONE_NEWUSER)");
  char map[64];
  write_file("/proc/self/setgroups", "deny");
  snprintf(map, sizeof map, "0 %u 1", (unsigned)uid);
  write_file("/proc/self/uid_map", map);
  snprintf(map, sizeof map, "0 %u 1", (unsigned)gid);
  write_file("/proc/self/gid_map", map);
}

static int mode_forge(const char* name) {
  if (!O.socket) die("forge needs -S SOCKET");
  if (O.bind_dir) {
    if (unshare(CLONE_NEWNS) != 0) die("unshare(CLONE_NEWNS)");
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) die("mount private");
    if (mount(O.bind_dir, "/dev/shm", NULL, MS_BIND, NULL) != 0) die("bind /dev/shm");
  }
  if (O.gid >= 0 && (setgroups(0, NULL) != 0 || setgid((gid_t)O.gid) != 0)) die("setgid");
  if (O.uid >= 0 && setuid((uid_t)O.uid) != 0) die("setuid");
  if (O.userns) become_userns_root();
  char path[PATH_MAX];
  snprintf(path, sizeof path, "/dev/shm/%s", name);
  int fd = -1;
  if (O.open_first) fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  int open_errno = fd < 0 ? errno : 0;
  char payload[PATH_MAX + 64];
  int n = snprintf(payload, sizeof payload, "{\"type\":\"create\",\"path\":\"%s\"}", path);
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s", O.socket);
  int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) die("socket");
  int count = O.n > 0 ? O.n : 1;
  for (int i = 0; i < count; ++i) {
    if (sendto(s, payload, (size_t)n, 0, (struct sockaddr*)&addr, sizeof addr) != n) die("sendto");
  }
  say("sent path=%s count=%d uid=%d opened=%d open_error=%s pid=%d", path, count, (int)getuid(), fd >= 0,
      strerror(open_errno), getpid());
  sleep_ms(O.linger_ms);
  if (fd >= 0) close(fd);
  if (O.keep_s > 0) {
    ready();
    sleep_ms(O.keep_s * 1000.0);
  }
  return 0;
}

static int is_quarantine(const struct inotify_event* e) {
  return e->len && strncmp(e->name, QUARANTINE, strlen(QUARANTINE)) == 0;
}

struct killer {
  long deletes, quarantined, in_quarantine;
  double due;
  const char* at;
};

/* Kills O.pid while a file sits in quarantine when the agent uses quarantine names, else right after N
 * deletions; in any case no later than 0.5 s after the N-th deletion. True once it has. */
static int maybe_kill(const struct killer* k) {
  if (k->deletes < O.n || !(k->in_quarantine > 0 || k->quarantined == 0 || now() >= k->due)) return 0;
  kill((pid_t)O.pid, SIGKILL);
  say("killed pid=%ld deletes=%ld quarantined=%ld in_quarantine=%ld at=%s", O.pid, k->deletes, k->quarantined,
      k->in_quarantine, k->at);
  return 1;
}

static int mode_killer(const char* dir) {
  if (O.pid <= 0) die("killer needs -P PID");
  int in = inotify_init1(IN_CLOEXEC);
  if (in < 0) die("inotify_init1");
  if (inotify_add_watch(in, dir, IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM) < 0) die("inotify_add_watch");
  ready();
  struct killer k = {0, 0, 0, 0, ""};
  double deadline = now() + O.seconds;
  char buf[65536] __attribute__((aligned(__alignof__(struct inotify_event))));
  while (now() < deadline) {
    if (maybe_kill(&k)) return 0;
    struct pollfd pfd = {in, POLLIN, 0};
    if (poll(&pfd, 1, 10) <= 0) continue;
    ssize_t len = read(in, buf, sizeof buf);
    if (len <= 0) die("read inotify");
    for (char* p = buf; p < buf + len;) {
      struct inotify_event* e = (struct inotify_event*)p;
      p += sizeof *e + e->len;
      int q = is_quarantine(e);
      if ((e->mask & IN_DELETE) && ++k.deletes == O.n) k.due = now() + 0.5;
      k.quarantined += q && (e->mask & IN_MOVED_TO);
      k.in_quarantine += q && (e->mask & IN_MOVED_TO) ? 1 : q && (e->mask & (IN_MOVED_FROM | IN_DELETE)) ? -1 : 0;
      if (e->len) k.at = e->name;
      if (maybe_kill(&k)) return 0;
    }
  }
  say("not-killed deletes=%ld quarantined=%ld", k.deletes, k.quarantined);
  return 1;
}

/* Swaps directory -p DIR with a symlink to -v TARGET (RENAME_EXCHANGE) all the time. */
static int mode_swap(void) {
  if (!O.prefix || !O.vprefix) die("swap needs -p DIR -v TARGET");
  char link[PATH_MAX];
  snprintf(link, sizeof link, "%s.swap", O.prefix);
  if (symlink(O.vprefix, link) != 0 && errno != EEXIST) die("symlink");
  srand((unsigned)O.seed ^ (unsigned)getpid());
  long swaps = 0;
  ready();
  double deadline = now() + O.seconds;
  while (now() < deadline) {
    if (renameat2(AT_FDCWD, O.prefix, AT_FDCWD, link, RENAME_EXCHANGE) != 0) die("renameat2");
    ++swaps;
    sleep_ms((rand() % 1001) / 1000.0);
  }
  struct stat st;
  if (lstat(O.prefix, &st) == 0 && S_ISLNK(st.st_mode) &&
      renameat2(AT_FDCWD, O.prefix, AT_FDCWD, link, RENAME_EXCHANGE) != 0) {
    die("renameat2 back");
  }
  say("result mode=swap watched=0 removed=0 missing=0 transient=0 swaps=%ld", swaps);
  return 0;
}

static int mode_unlink(const char* dir) {
  double t0 = now();
  DIR* d = opendir(dir);
  if (!d) die(dir);
  long n = 0;
  struct dirent* e;
  while ((e = readdir(d))) {
    if (e->d_type != DT_REG) continue;
    if (unlinkat(dirfd(d), e->d_name, 0) != 0) die("unlinkat");
    ++n;
  }
  closedir(d);
  say("unlinked=%ld seconds=%.6f", n, now() - t0);
  return 0;
}

/* The options, one row each: letter, kind, field. */
enum kind { kDouble, kInt, kLong, kString, kFlag };
static const struct {
  char letter;
  enum kind kind;
  void* field;
} kOptions[] = {
    {'t', kDouble, &O.seconds},  {'w', kDouble, &O.settle},  {'s', kInt, &O.seed},    {'m', kFlag, &O.map},
    {'n', kInt, &O.n},           {'a', kInt, &O.min_ms},     {'b', kInt, &O.max_ms},  {'p', kString, &O.prefix},
    {'v', kString, &O.vprefix},  {'V', kInt, &O.vcount},     {'x', kString, &O.tag},  {'z', kLong, &O.bytes},
    {'S', kString, &O.socket},   {'u', kLong, &O.uid},       {'g', kLong, &O.gid},    {'B', kString, &O.bind_dir},
    {'o', kFlag, &O.open_first}, {'l', kInt, &O.linger_ms},  {'k', kInt, &O.keep_s},  {'P', kLong, &O.pid},
    {'r', kFlag, &O.refill},     {'R', kFlag, &O.read_only}, {'U', kFlag, &O.userns},
};

/* getopt over kOptions; false on an unknown option. */
static int parse_options(int argc, char** argv) {
  char spec[2 * sizeof kOptions / sizeof kOptions[0] + 1], *q = spec;
  for (size_t i = 0; i < sizeof kOptions / sizeof kOptions[0]; ++i) {
    *q++ = kOptions[i].letter;
    if (kOptions[i].kind != kFlag) *q++ = ':';
  }
  *q = 0;
  optind = 2;
  int c;
  while ((c = getopt(argc, argv, spec)) != -1) {
    size_t i = 0;
    while (i < sizeof kOptions / sizeof kOptions[0] && kOptions[i].letter != c) ++i;
    if (i == sizeof kOptions / sizeof kOptions[0]) return 0;
    void* f = kOptions[i].field;
    switch (kOptions[i].kind) {
      case kDouble:
        *(double*)f = atof(optarg);
        break;
      case kInt:
        *(int*)f = atoi(optarg);
        break;
      case kLong:
        *(long*)f = atol(optarg);
        break;
      case kString:
        *(const char**)f = optarg;
        break;
      case kFlag:
        *(int*)f = 1;
        break;
    }
  }
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: holders MODE [options] [PATH...] (see tests/helpers/holders.c)\n");
    return 2;
  }
  const char* mode = argv[1];
  O = (struct opts){.seconds = 5,
                    .settle = 3,
                    .seed = 1,
                    .min_ms = 1,
                    .max_ms = 5,
                    .linger_ms = 300,
                    .bytes = 4096,
                    .uid = -1,
                    .gid = -1};
  if (!parse_options(argc, argv)) return 2;
  int nargs = argc - optind;
  char** args = argv + optind;
  if (!strcmp(mode, "reopen-storm")) return mode_reopen_storm(nargs, args);
  if (!strcmp(mode, "rename-storm")) return mode_rename_storm();
  if (!strcmp(mode, "leak")) return mode_leak();
  if (!strcmp(mode, "sleepers")) return mode_sleepers();
  if (!strcmp(mode, "forge") && nargs == 1) return mode_forge(args[0]);
  if (!strcmp(mode, "killer") && nargs == 1) return mode_killer(args[0]);
  if (!strcmp(mode, "unlink") && nargs == 1) return mode_unlink(args[0]);
  if (!strcmp(mode, "linker") && nargs == 1) return mode_linker(args[0]);
  if (!strcmp(mode, "plant") && nargs == 1) return mode_plant(args[0]);
  if (!strcmp(mode, "swap")) return mode_swap();
  NW = nargs;
  W = calloc((size_t)(NW ? NW : 1), sizeof *W);
  for (int i = 0; i < NW; ++i) {
    snprintf(W[i].path, PATH_MAX, "%s", args[i]);
    W[i].fd = -1;
  }
  if (!strcmp(mode, "hold")) return mode_hold();
  if (!strcmp(mode, "private-fd")) return mode_private_fd();
  if (!strcmp(mode, "zombie")) return mode_zombie();
  if (!strcmp(mode, "relay")) return mode_relay();
  if (!strcmp(mode, "map-closed")) return mode_map_closed();
  if (!strcmp(mode, "scm")) return mode_scm();
  if (!strcmp(mode, "opath-scm")) return mode_opath_scm();
  if (!strcmp(mode, "uring")) return mode_uring();
  if (!strcmp(mode, "getfd")) return mode_getfd();
  fprintf(stderr, "holders: unknown mode or arguments: %s\n", mode);
  return 2;
}

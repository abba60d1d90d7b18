/* libshmkeeper-preload.so: the sharing runtime shmkeeper injects into
 * containers with LD_PRELOAD.
 *
 * It changes a program's behaviour in exactly two ways:
 *   1. Growing a file on the /dev/shm tmpfs with ftruncate/ftruncate64
 *      reserves the pages first (fallocate). A full /dev/shm then fails the
 *      call with ENOSPC and one line on stderr, instead of a SIGBUS at the
 *      first touch of a page that cannot be allocated.
 *   2. Creating or unlinking a segment (shm_open with O_CREAT, shm_unlink,
 *      open/openat with O_CREAT under /dev/shm, memfd_create) sends one
 *      datagram to the agent's event socket, non-blocking, dropped when no
 *      agent listens. The agent learns the sender from the kernel.
 * Everything else goes straight to the kernel, as glibc does. It needs only
 * libc and no glibc symbol newer than GLIBC_2.17 (it never calls dlsym: the
 * interposed calls are system calls it makes itself), and any failure of its
 * own falls back to the plain call.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define SHMK_EXPORT __attribute__((visibility("default")))
#define TMPFS_MAGIC_ 0x01021994
#define SHM_DIR "/dev/shm/"
#define DEFAULT_EVENT_SOCKET "/run/shmkeeper/events/events.sock"

/* ---- /dev/shm identity (cached) ---------------------------------------- */

static dev_t shm_dev;
static int shm_dev_state; /* 0 unknown, 1 known, -1 not a tmpfs */

/* Whether `st` (a fstat result) is a regular file on the /dev/shm tmpfs. */
static int is_on_dev_shm(const struct stat* st) {
  if (shm_dev_state == 0) {
    struct statfs fs;
    struct stat dir;
    if (syscall(SYS_statfs, "/dev/shm", &fs) == 0 && fs.f_type == TMPFS_MAGIC_ &&
        syscall(SYS_stat, "/dev/shm", &dir) == 0) {
      shm_dev = dir.st_dev;
      shm_dev_state = 1;
    } else {
      shm_dev_state = -1;
    }
  }
  return shm_dev_state == 1 && S_ISREG(st->st_mode) && st->st_dev == shm_dev;
}

/* SHMKEEPER_PRELOAD_RESERVE=0 turns the reservation off (creator records stay). */
static int reserve_enabled(void) {
  static int state; /* 0 unknown, 1 on, -1 off */
  if (state == 0) {
    const char* v = getenv("SHMKEEPER_PRELOAD_RESERVE");
    state = v && (!strcmp(v, "0") || !strcmp(v, "false")) ? -1 : 1;
  }
  return state == 1;
}

/* ---- the ENOSPC message ------------------------------------------------- */

static void human(char* out, size_t n, unsigned long long bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  snprintf(out, n, u ? "%.1f %s" : "%.0f %s", v, units[u]);
}

static void explain_enospc(int fd, long long want) {
  char link[64], name[512], req[32], free_s[32], size_s[32], line[1024];
  ssize_t len;
  struct statfs fs;
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  len = syscall(SYS_readlink, link, name, sizeof name - 1);
  name[len > 0 ? len : 0] = 0;
  if (syscall(SYS_fstatfs, fd, &fs) != 0) memset(&fs, 0, sizeof fs);
  human(req, sizeof req, (unsigned long long)want);
  human(free_s, sizeof free_s, (unsigned long long)fs.f_bavail * (unsigned long long)fs.f_bsize);
  human(size_s, sizeof size_s, (unsigned long long)fs.f_blocks * (unsigned long long)fs.f_bsize);
  len = snprintf(line, sizeof line,
                 "shmkeeper: cannot reserve %s for %s: /dev/shm has %s free of %s. Raise it with the pod annotation "
                 "shmkeeper.io/shm-size or the environment variable SHMKEEPER_SHM_SIZE (ENOSPC instead of SIGBUS)\n",
                 req, name[0] ? name : "a shared-memory file", free_s, size_s);
  if (len > 0) (void)!syscall(SYS_write, 2, line, (size_t)len < sizeof line ? (size_t)len : sizeof line - 1);
}

/* ---- ftruncate: reserve, don't SIGBUS ------------------------------------ */

/* 1: reserved, the file now has `length` bytes; 0: not reserved, the plain
 * call decides; -1: ENOSPC (reported). */
static int grow_reserved(int fd, long long length) {
  struct stat st;
  long r;
  if (length <= 0 || !reserve_enabled() || syscall(SYS_fstat, fd, &st) != 0 || !is_on_dev_shm(&st) ||
      length <= st.st_size) {
    return 0;
  }
  do {
    r = syscall(SYS_fallocate, fd, 0, (off_t)0, (off_t)length);
  } while (r != 0 && errno == EINTR);
  if (r == 0) return 1; /* fallocate mode 0 also set the size to `length` */
  if (errno == ENOSPC) {
    explain_enospc(fd, length);
    errno = ENOSPC;
    return -1;
  }
  return 0; /* EOPNOTSUPP and the like */
}

SHMK_EXPORT int ftruncate(int fd, off_t length) {
  int saved = errno;
  switch (grow_reserved(fd, (long long)length)) {
    case 1:
      errno = saved;
      return 0;
    case -1:
      return -1;
    default:
      errno = saved;
      return (int)syscall(SYS_ftruncate, fd, length);
  }
}

SHMK_EXPORT int ftruncate64(int fd, off_t length) { return ftruncate(fd, length); }

/* ---- creator records ----------------------------------------------------- */

static void json_escape(char* out, size_t n, const char* in) {
  size_t o = 0;
  for (; *in && o + 7 < n; in++) {
    unsigned char c = (unsigned char)*in;
    if (c == '"' || c == '\\') {
      out[o++] = '\\';
      out[o++] = (char)c;
    } else if (c < 0x20) {
      o += (size_t)snprintf(out + o, n - o, "\\u%04x", c);
    } else {
      out[o++] = (char)c;
    }
  }
  out[o] = 0;
}

/* One connected datagram socket per process, kept (with its inode, so an fd
 * number the program has since reused is never written to). With no agent
 * listening, sending is off for a few seconds: no system call per event. */
static int ev_fd = -1;
static ino_t ev_ino;
static struct timespec ev_retry_at;

static int ev_connect(void) {
  struct sockaddr_un addr;
  struct stat st;
  struct timespec now;
  const char* sock = getenv("SHMKEEPER_EVENT_SOCKET");
  int fd;
  clock_gettime(CLOCK_MONOTONIC, &now); /* vDSO: no system call */
  if (now.tv_sec < ev_retry_at.tv_sec) return -1;
  ev_retry_at.tv_sec = now.tv_sec + 5;
  if (!sock || !*sock) sock = DEFAULT_EVENT_SOCKET;
  if (strlen(sock) >= sizeof addr.sun_path) return -1;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, sock, strlen(sock) + 1);
  fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, (struct sockaddr*)&addr, sizeof addr) != 0 || syscall(SYS_fstat, fd, &st) != 0) {
    close(fd);
    return -1;
  }
  ev_ino = st.st_ino;
  ev_retry_at.tv_sec = 0;
  return ev_fd = fd;
}

static void send_event(const char* type, const char* path) {
  char esc[1024], msg[1200];
  struct stat st;
  int saved = errno, n;
  json_escape(esc, sizeof esc, path);
  n = snprintf(msg, sizeof msg, "{\"type\":\"%s\",\"path\":\"%s\"}", type, esc);
  if (n > 0 && (size_t)n < sizeof msg) {
    if (ev_fd >= 0 && (syscall(SYS_fstat, ev_fd, &st) != 0 || st.st_ino != ev_ino)) ev_fd = -1; /* not ours now */
    if (ev_fd >= 0 || ev_connect() >= 0) {
      if (send(ev_fd, msg, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno != EAGAIN) {
        close(ev_fd); /* the agent went away: reconnect later */
        ev_fd = -1;
      }
    }
  }
  errno = saved;
}

static int under_dev_shm(const char* path) {
  return path && strncmp(path, SHM_DIR, sizeof SHM_DIR - 1) == 0 && path[sizeof SHM_DIR - 1] != 0;
}

/* openat that knows whether it created the file. */
static int open_noting_creation(int dirfd, const char* path, int flags, mode_t mode, int* created) {
  int tries, fd;
  *created = 0;
  if (!(flags & O_CREAT) || (flags & O_EXCL)) {
    fd = (int)syscall(SYS_openat, dirfd, path, flags, mode);
    *created = fd >= 0 && (flags & O_CREAT);
    return fd;
  }
  for (tries = 0; tries < 8; tries++) {
    fd = (int)syscall(SYS_openat, dirfd, path, flags | O_EXCL, mode);
    if (fd >= 0) {
      *created = 1;
      return fd;
    }
    if (errno != EEXIST) return fd;
    fd = (int)syscall(SYS_openat, dirfd, path, flags & ~O_CREAT, mode);
    if (fd >= 0 || errno != ENOENT) return fd;
  }
  return (int)syscall(SYS_openat, dirfd, path, flags, mode);
}

static int open_impl(int dirfd, const char* path, int flags, mode_t mode) {
  int created, fd;
  if (!(flags & O_CREAT) || !under_dev_shm(path)) return (int)syscall(SYS_openat, dirfd, path, flags, mode);
  fd = open_noting_creation(dirfd, path, flags, mode, &created);
  if (created) send_event("create", path);
  return fd;
}

static mode_t mode_arg(int flags, va_list ap) {
  return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

/* open, open64, openat, openat64: the mode is passed only with O_CREAT or O_TMPFILE. */
#define SHMK_OPEN_BODY(dirfd_value) \
  va_list ap;                       \
  mode_t mode;                      \
  va_start(ap, flags);              \
  mode = mode_arg(flags, ap);       \
  va_end(ap);                       \
  return open_impl(dirfd_value, path, flags, mode);

SHMK_EXPORT int open(const char* path, int flags, ...){SHMK_OPEN_BODY(AT_FDCWD)} SHMK_EXPORT
    int open64(const char* path, int flags, ...){SHMK_OPEN_BODY(AT_FDCWD)} SHMK_EXPORT
    int openat(int dirfd, const char* path, int flags, ...){SHMK_OPEN_BODY(dirfd)} SHMK_EXPORT
    int openat64(int dirfd, const char* path, int flags, ...) {
  SHMK_OPEN_BODY(dirfd)
}

/* shm_open/shm_unlink as glibc implements them: /dev/shm/<name>, one leading
 * slash allowed, no other slash, O_NOFOLLOW | O_CLOEXEC. */
static int shm_path(const char* name, char* out, size_t n) {
  size_t len;
  while (*name == '/') name++;
  len = strlen(name);
  if (len == 0 || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..")) {
    errno = EINVAL;
    return -1;
  }
  if (len > 255 || sizeof SHM_DIR + len > n) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(out, SHM_DIR, sizeof SHM_DIR - 1);
  memcpy(out + sizeof SHM_DIR - 1, name, len + 1);
  return 0;
}

SHMK_EXPORT int shm_open(const char* name, int oflag, mode_t mode) {
  char path[sizeof SHM_DIR + 256];
  int created, fd;
  if (shm_path(name, path, sizeof path) != 0) return -1;
  fd = open_noting_creation(AT_FDCWD, path, oflag | O_NOFOLLOW | O_CLOEXEC, mode, &created);
  if (fd < 0 && errno == EISDIR) errno = EINVAL; /* as glibc's shm_open */
  if (created) send_event("create", path);
  return fd;
}

SHMK_EXPORT int shm_unlink(const char* name) {
  char path[sizeof SHM_DIR + 256];
  int r;
  if (shm_path(name, path, sizeof path) != 0) return -1;
  r = (int)syscall(SYS_unlinkat, AT_FDCWD, path, 0);
  if (r == 0) send_event("unlink", path);
  return r;
}

SHMK_EXPORT int memfd_create(const char* name, unsigned int flags) {
  int fd = (int)syscall(SYS_memfd_create, name, flags);
  if (fd >= 0) send_event("memfd", name ? name : "");
  return fd;
}

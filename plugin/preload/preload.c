/* libshmkeeper-preload.so: the sharing runtime shmkeeper injects into
 * containers with LD_PRELOAD.
 *
 * It changes a program's behaviour in exactly two ways:
 *   1. Growing a file on the /dev/shm tmpfs with ftruncate/ftruncate64 by
 *      more than the tmpfs has free (fstatfs, in whole pages) fails the call
 *      with ENOSPC and one line on stderr, the file untouched, instead of a
 *      SIGBUS at the first touch of a page that cannot be allocated. A growth
 *      that fits is the plain call: no page allocated, nothing charged. Only
 *      with SHMKEEPER_PRELOAD_RESERVE=1 (opt-in) is the whole size reserved
 *      (fallocate) at ftruncate time: memory the program may never touch,
 *      charged to its cgroup at once, for the guarantee that every page it
 *      was given is backed.
 *   2. Creating a segment (shm_open with O_CREAT, open/openat/creat with
 *      O_CREAT under /dev/shm) sends one creator record to the agent's event
 *      socket, non-blocking, dropped when no agent listens or its queue is
 *      full. The agent learns the sender from the kernel. (Unlinks and
 *      memfd_create sent datagrams too until the agent observed the tmpfs
 *      itself; they are plain libc now.)
 *
 * Everything else is libc's own: every interposed call first calls the next
 * definition of itself (dlsym(RTLD_NEXT), resolved once in the constructor),
 * with the caller's exact arguments, so errno, file-type checks (EISDIR,
 * O_TMPFILE, O_PATH, O_NOFOLLOW, fs.protected_regular, O_EXCL races) and
 * pthread cancellation are glibc's by construction. What the library adds
 * runs after that call, with raw system calls (never cancellation points, so
 * a cancelled thread never loses the descriptor it just opened) and only
 * async-signal-safe code (no stdio, no malloc, no locks). Its one descriptor
 * is the event socket, kept once an agent listened: CLOEXEC, at a high
 * number, checked to still be itself before each use (see preload_records.c).
 * Calls that arrive before the constructor (another library's constructor)
 * use the plain system call. It needs only libc (dlsym is a weak reference)
 * and no glibc symbol newer than GLIBC_2.17.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include "preload_internal.h"

/* dlsym's oldest version, weak: glibc >= 2.34 has it in libc.so.6, older
 * ones only in libdl.so.2, loaded when the program uses it. Never a needed
 * library of ours: an image without libdl.so.2 would not start at all. Without
 * dlsym the interposed calls are plain system calls (not cancellation points). */
#pragma weak dlsym
#if defined(__x86_64__)
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
#elif defined(__aarch64__)
__asm__(".symver dlsym,dlsym@GLIBC_2.17");
#endif

/* ---- the next definitions (libc's), resolved once ------------------------ */

typedef int (*open_fn)(const char*, int, ...);
typedef int (*openat_fn)(int, const char*, int, ...);
typedef int (*creat_fn)(const char*, mode_t);
typedef int (*shm_open_fn)(const char*, int, mode_t);

static struct {
  open_fn open, open64;
  openat_fn openat, openat64;
  creat_fn creat, creat64;
  shm_open_fn shm_open;
} next;

/* preload_internal.h */
int reserve_on;
struct sockaddr_un ev_addr;
socklen_t ev_addr_len;
long ev_owner;

__attribute__((constructor)) static void shmk_init(void) {
  const char* v = getenv("SHMKEEPER_PRELOAD_RESERVE");
  const char* sock = getenv("SHMKEEPER_EVENT_SOCKET");
  size_t len;
  reserve_on = v && (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes"));
  STORE(ev_owner, syscall(SYS_getpid));
  if (!sock || !*sock) sock = DEFAULT_EVENT_SOCKET;
  len = strlen(sock);
  if (len < sizeof ev_addr.sun_path) {
    ev_addr.sun_family = AF_UNIX;
    memcpy(ev_addr.sun_path, sock, len + 1);
    ev_addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + 1);
  }
  if (!dlsym) return;
  STORE(next.open, (open_fn)dlsym(RTLD_NEXT, "open"));
  STORE(next.open64, (open_fn)dlsym(RTLD_NEXT, "open64"));
  STORE(next.openat, (openat_fn)dlsym(RTLD_NEXT, "openat"));
  STORE(next.openat64, (openat_fn)dlsym(RTLD_NEXT, "openat64"));
  STORE(next.creat, (creat_fn)dlsym(RTLD_NEXT, "creat"));
  STORE(next.creat64, (creat_fn)dlsym(RTLD_NEXT, "creat64"));
  STORE(next.shm_open, (shm_open_fn)dlsym(RTLD_NEXT, "shm_open")); /* librt before glibc 2.34: may be absent */
}

static int under_dev_shm(const char* path) {
  return path && strncmp(path, SHM_DIR, sizeof SHM_DIR - 1) == 0 && path[sizeof SHM_DIR - 1] != 0;
}

static int after_open(int fd, int flags, const char* path) {
  /* O_PATH ignores O_CREAT: such an open never creates */
  if (fd >= 0 && (flags & (O_CREAT | O_PATH)) == O_CREAT && under_dev_shm(path)) note_created(fd, flags, path);
  return fd;
}

/* The mode is passed only with O_CREAT or O_TMPFILE; reading it otherwise
 * would read garbage (harmless, but not what libc does). */
#define SHMK_MODE_ARG(flags, mode)                                                              \
  do {                                                                                          \
    va_list ap;                                                                                 \
    va_start(ap, flags);                                                                        \
    mode = ((flags)&O_CREAT) || ((flags)&O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0; \
    va_end(ap);                                                                                 \
  } while (0)

static int open_via(open_fn fn, const char* path, int flags, mode_t mode) {
  int fd = fn ? fn(path, flags, mode) : (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
  return after_open(fd, flags, path);
}

static int openat_via(openat_fn fn, int dirfd, const char* path, int flags, mode_t mode) {
  int fd = fn ? fn(dirfd, path, flags, mode) : (int)syscall(SYS_openat, dirfd, path, flags, mode);
  return after_open(fd, flags, path);
}

SHMK_EXPORT int open(const char* path, int flags, ...) {
  mode_t mode;
  SHMK_MODE_ARG(flags, mode);
  return open_via(LOAD(next.open), path, flags, mode);
}

SHMK_EXPORT int open64(const char* path, int flags, ...) {
  mode_t mode;
  SHMK_MODE_ARG(flags, mode);
  return open_via(LOAD(next.open64), path, flags, mode);
}

SHMK_EXPORT int openat(int dirfd, const char* path, int flags, ...) {
  mode_t mode;
  SHMK_MODE_ARG(flags, mode);
  return openat_via(LOAD(next.openat), dirfd, path, flags, mode);
}

SHMK_EXPORT int openat64(int dirfd, const char* path, int flags, ...) {
  mode_t mode;
  SHMK_MODE_ARG(flags, mode);
  return openat_via(LOAD(next.openat64), dirfd, path, flags, mode);
}

static int creat_via(creat_fn fn, const char* path, mode_t mode) {
  int flags = O_CREAT | O_WRONLY | O_TRUNC;
  int fd = fn ? fn(path, mode) : (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
  return after_open(fd, flags, path);
}

SHMK_EXPORT int creat(const char* path, mode_t mode) { return creat_via(LOAD(next.creat), path, mode); }
SHMK_EXPORT int creat64(const char* path, mode_t mode) { return creat_via(LOAD(next.creat64), path, mode); }

/* shm_open for the path only: /dev/shm/<name>, one leading slash
 * allowed; 0 when the name is not one libc would accept (libc's call then
 * fails it, or, without libc's, these fail it as glibc does). */
static int shm_path(const char* name, char* out, size_t n) {
  size_t len;
  while (*name == '/') name++;
  len = strlen(name);
  if (len == 0 || len > 255 || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..") ||
      sizeof SHM_DIR + len > n) {
    return 0;
  }
  memcpy(out, SHM_DIR, sizeof SHM_DIR - 1);
  memcpy(out + sizeof SHM_DIR - 1, name, len + 1);
  return 1;
}

SHMK_EXPORT int shm_open(const char* name, int oflag, mode_t mode) {
  char path[sizeof SHM_DIR + 256];
  shm_open_fn fn = LOAD(next.shm_open);
  int fd, ok = shm_path(name, path, sizeof path);
  if (fn) {
    fd = fn(name, oflag, mode);
  } else if (!ok) {
    errno = strlen(name) > 255 ? ENAMETOOLONG : EINVAL;
    return -1;
  } else {
    fd = (int)syscall(SYS_openat, AT_FDCWD, path, oflag | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0 && errno == EISDIR) errno = EINVAL; /* as glibc's shm_open */
  }
  if (fd >= 0 && ok && (oflag & O_CREAT)) note_created(fd, oflag, path);
  return fd;
}

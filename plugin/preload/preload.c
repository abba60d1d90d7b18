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
 * number, checked to still be itself before each use (see "creator records").
 * Calls that arrive before the constructor (another library's constructor)
 * use the plain system call. It needs only libc (dlsym is a weak reference)
 * and no glibc symbol newer than GLIBC_2.17.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

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

#define SHMK_EXPORT __attribute__((visibility("default")))
#define TMPFS_MAGIC_ 0x01021994
#define SHM_DIR "/dev/shm/"
#define DEFAULT_EVENT_SOCKET "/run/shmkeeper/events/events.sock"

#define LOAD(p) __atomic_load_n(&(p), __ATOMIC_ACQUIRE)
#define STORE(p, v) __atomic_store_n(&(p), (v), __ATOMIC_RELEASE)

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

static int reserve_on;             /* SHMKEEPER_PRELOAD_RESERVE=1|true|yes: fallocate at ftruncate */
static struct sockaddr_un ev_addr; /* the agent's event socket */
static socklen_t ev_addr_len;      /* 0: no events (before the constructor, or a bad path) */
static long long ev_tat;           /* the records' rate limit (within_agent_limit) */
static long ev_owner;              /* the pid ev_tat counts for */

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

/* ---- async-signal-safe formatting ---------------------------------------- */

/* Appends `s` to [*p, end), always leaving room for the terminating NUL. */
static void put(char** p, char* end, const char* s) {
  while (*s && *p + 1 < end) *(*p)++ = *s++;
  **p = 0;
}

static void put_u64(char** p, char* end, unsigned long long v) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (n && *p + 1 < end) *(*p)++ = digits[--n];
  **p = 0;
}

/* "512 B", "64.0 MiB": one decimal above bytes. */
static void put_size(char** p, char* end, unsigned long long bytes) {
  static const char* const units[] = {" B", " KiB", " MiB", " GiB", " TiB"};
  unsigned long long div = 1, whole, tenths;
  int u = 0;
  while (u < 4 && bytes / div >= 1024) {
    div *= 1024;
    u++;
  }
  whole = bytes / div;
  tenths = (bytes % div * 10 + div / 2) / div;
  if (u && tenths >= 10) {
    whole++;
    tenths -= 10;
  }
  put_u64(p, end, whole);
  if (u) {
    put(p, end, ".");
    put_u64(p, end, tenths);
  }
  put(p, end, units[u]);
}

/* JSON string contents. */
static void put_escaped(char** p, char* end, const char* s) {
  static const char hex[] = "0123456789abcdef";
  char esc[7] = "\\u00";
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      esc[0] = '\\';
      esc[1] = (char)c;
      esc[2] = 0;
    } else if (c < 0x20) {
      memcpy(esc, "\\u00", 4);
      esc[4] = hex[c >> 4];
      esc[5] = hex[c & 15];
      esc[6] = 0;
    } else {
      esc[0] = (char)c;
      esc[1] = 0;
    }
    put(p, end, esc);
  }
}

/* ---- /dev/shm identity (cached) ---------------------------------------- */

static dev_t shm_dev;
static int shm_dev_state; /* 0 unknown, 1 known, -1 not a tmpfs */

/* Whether `st` (a fstat result) is a regular file on the /dev/shm tmpfs. */
static int is_on_dev_shm(const struct stat* st) {
  int state = LOAD(shm_dev_state);
  if (state == 0) {
    struct statfs fs;
    struct stat dir;
    state = -1;
    if (syscall(SYS_statfs, "/dev/shm", &fs) == 0 && fs.f_type == TMPFS_MAGIC_ &&
        syscall(SYS_stat, "/dev/shm", &dir) == 0) {
      shm_dev = dir.st_dev;
      state = 1;
    }
    STORE(shm_dev_state, state);
  }
  return state == 1 && S_ISREG(st->st_mode) && st->st_dev == shm_dev;
}

/* ---- the ENOSPC message ------------------------------------------------- */

/* One line on stderr: `what` ("reserve" or "fit") `want` bytes (`more` of them
 * new) for the file behind `fd`, and what its tmpfs has. */
static void explain_enospc(int fd, const char* what, unsigned long long want, unsigned long long more) {
  char link[48] = "/proc/self/fd/", name[512], line[1200];
  char *p = link + strlen(link), *end = link + sizeof link;
  struct statfs fs;
  long len;
  put_u64(&p, end, (unsigned long long)fd);
  len = syscall(SYS_readlink, link, name, sizeof name - 1);
  name[len > 0 ? len : 0] = 0;
  if (syscall(SYS_fstatfs, fd, &fs) != 0) memset(&fs, 0, sizeof fs);
  p = line;
  end = line + sizeof line;
  put(&p, end, "shmkeeper: cannot ");
  put(&p, end, what);
  put(&p, end, " ");
  put_size(&p, end, more);
  if (more != want) {
    put(&p, end, " more (to ");
    put_size(&p, end, want);
    put(&p, end, ")");
  }
  put(&p, end, " for ");
  put(&p, end, name[0] ? name : "a shared-memory file");
  put(&p, end, ": /dev/shm has ");
  put_size(&p, end, (unsigned long long)fs.f_bavail * (unsigned long long)fs.f_bsize);
  put(&p, end, " free of ");
  put_size(&p, end, (unsigned long long)fs.f_blocks * (unsigned long long)fs.f_bsize);
  put(&p, end,
      ". Raise it with the pod annotation shmkeeper.io/shm-size or the environment variable SHMKEEPER_SHM_SIZE "
      "(ENOSPC instead of SIGBUS)\n");
  (void)!syscall(SYS_write, 2, line, (size_t)(p - line));
}

/* ---- ftruncate: ENOSPC now, not SIGBUS later ----------------------------- */

static unsigned long long pages(unsigned long long bytes, unsigned long long page) {
  return bytes / page + (bytes % page != 0);
}

/* Whether the plain ftruncate(fd, length) would fail before the file system
 * is asked for room, as the kernel checks in do_sys_ftruncate and
 * inode_newsize_ok: a descriptor not open for writing (EINVAL, or EBADF for
 * O_PATH), an append-only inode (EPERM), RLIMIT_FSIZE (SIGXFSZ and EFBIG).
 * Then that error is the caller's, never our ENOSPC. Spent only on the way to
 * ENOSPC, never on a call that fits. */
static int plain_call_fails_first(int fd, long long length) {
  struct rlimit fsize;
  long fl = syscall(SYS_fcntl, fd, F_GETFL);
  int attr = 0;
  if (fl < 0 || (fl & O_PATH) || (fl & O_ACCMODE) == O_RDONLY) return 1;
  if ((fl & O_APPEND) && syscall(SYS_ioctl, fd, FS_IOC_GETFLAGS, &attr) == 0 && (attr & FS_APPEND_FL)) return 1;
  if (syscall(SYS_prlimit64, 0, RLIMIT_FSIZE, NULL, &fsize) == 0 && fsize.rlim_cur != RLIM_INFINITY &&
      (unsigned long long)length > fsize.rlim_cur) {
    return 1;
  }
  return 0;
}

/* Reservation mode: fallocate the whole new size. Returns as before_grow. */
static int grow_reserved(int fd, long long length) {
  struct stat st;
  long r;
  if (syscall(SYS_fstat, fd, &st) != 0 || !is_on_dev_shm(&st) || length <= st.st_size) return 0;
  do {
    r = syscall(SYS_fallocate, fd, 0, (off_t)0, (off_t)length);
  } while (r != 0 && errno == EINTR);
  if (r == 0) return 1; /* fallocate mode 0 also set the size to `length` */
  if (errno == ENOSPC) explain_enospc(fd, "reserve", (unsigned long long)length, (unsigned long long)length);
  if (errno == ENOSPC || errno == EFBIG) return -1;
  return 0; /* EBADF (read-only fd: ftruncate says EINVAL), EPERM (seals), ...: the plain call's errno */
}

/* Before ftruncate(fd, length). 1: done here, the file now has `length`
 * bytes (reservation mode); 0: the plain call decides; -1: failed with errno
 * set as ftruncate would (ENOSPC, reported; EFBIG, whose SIGXFSZ the kernel
 * already sent). Without the reservation, a growth of the file on /dev/shm by
 * more pages than its tmpfs has free is ENOSPC with nothing changed; any other
 * call is the plain one. One system call (fstatfs) on the common path: a
 * tmpfs with room for the whole new size needs no more; only a size that
 * does not fit costs the fstat (the file's size, and that it is /dev/shm's)
 * and the checks of errors the plain call would give first. The free space is
 * read at this instant: two growers that each fit can still, together,
 * overfill it later (the reservation mode closes that). */
static int before_grow(int fd, long long length) {
  struct stat st;
  struct statfs fs;
  unsigned long long need, page;
  if (length <= 0) return 0;
  if (LOAD(reserve_on)) return grow_reserved(fd, length);
  /* f_blocks 0: a tmpfs without a size limit (size=0), nothing to check */
  if (syscall(SYS_fstatfs, fd, &fs) != 0 || fs.f_type != TMPFS_MAGIC_ || fs.f_bsize <= 0 || fs.f_blocks == 0) {
    return 0;
  }
  page = (unsigned long long)fs.f_bsize;
  if (pages((unsigned long long)length, page) <= (unsigned long long)fs.f_bavail) return 0;
  if (syscall(SYS_fstat, fd, &st) != 0 || !is_on_dev_shm(&st) || length <= st.st_size) return 0;
  need = pages((unsigned long long)length, page) - pages((unsigned long long)st.st_size, page);
  if (need <= (unsigned long long)fs.f_bavail || plain_call_fails_first(fd, length)) return 0;
  explain_enospc(fd, "fit", (unsigned long long)length, (unsigned long long)(length - st.st_size));
  errno = ENOSPC;
  return -1;
}

SHMK_EXPORT int ftruncate(int fd, off_t length) {
  int saved = errno;
  switch (before_grow(fd, (long long)length)) {
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

/* Whether the agent listens: unknown until the first record needs it, then
 * found out by connecting the kept socket (below). While it listens every
 * record is sent; once it is found absent (or a send fails for another reason
 * than a full queue) nothing is tried, and no system call made, for 5 s
 * (CLOCK_MONOTONIC, read from the vDSO). Stored with plain atomics: any
 * thread or signal handler may race here, and any interleaving leaves a valid
 * state. */
static int ev_state; /* 0 unknown, 1 listening, -1 absent until ev_recheck_at */
static long ev_recheck_at;

/* The kept socket: one SOCK_DGRAM socket per process, connected to the agent
 * once and used for every record (one sendto each, no path lookup; the old
 * socket()+sendto()+close() per record cost ~0.8x the plain shm cycle).
 *   - Identity before every send: a program may close every descriptor it did
 *     not open (closefrom, close_range) or dup2 over ours, and the number may
 *     then be another file of the program's. So each send first fstats the
 *     number and uses it only if it is still a socket with our socket's inode
 *     and device; otherwise the number is forgotten, never closed (it is the
 *     program's now), and a new socket is made. A number checked and then
 *     replaced by another thread within the next system call is the one race
 *     left: sendto on a socket that is not connected to anything fails, and
 *     on any other file it fails with ENOTSOCK.
 *   - Out of the program's way: CLOEXEC (never inherited by an exec'd
 *     program) and moved with F_DUPFD_CLOEXEC to a number at 3/4 of the
 *     descriptor limit (at most 768), so the program's own opens still get
 *     the lowest free numbers, adjacent as without the library. It is one
 *     more entry in /proc/self/fd while the process has created a segment
 *     with an agent listening.
 *   - fork: the child inherits the socket and may use it: the kernel attaches
 *     the credentials of the task that sends (SCM_CREDENTIALS is the sender's
 *     pid and uid at sendto, not the socket's creator), so the agent sees the
 *     child as the sender of the child's records. No pid check is needed.
 *   - Threads and signal handlers: a thread takes the socket with an atomic
 *     flag; whoever finds it taken (another thread, or a handler that
 *     interrupted the holder) sends through a socket of its own made for that
 *     call, as every record was sent before: never a lock, never a wait.
 *   - The agent restarted (ECONNREFUSED, ENOTCONN): the socket is closed and
 *     connected afresh once. */
static int ev_busy;               /* the kept socket is in use */
static int ev_fd = -1;            /* the kept socket, -1 none */
static unsigned long long ev_ino; /* its identity */
static unsigned long long ev_dev;

static void agent_gone(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  STORE(ev_recheck_at, (long)now.tv_sec + 5);
  STORE(ev_state, -1);
}

/* A socket connected to the agent, CLOEXEC, non-blocking; -1 when no agent
 * listens. */
static long connect_agent(void) {
  long fd = syscall(SYS_socket, AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (syscall(SYS_connect, fd, &ev_addr, ev_addr_len) != 0) {
    syscall(SYS_close, fd);
    return -1;
  }
  return fd;
}

/* Whether ev_fd is still the socket this library made. Holder of ev_busy only. */
static int kept_is_ours(void) {
  struct stat st;
  return ev_fd >= 0 && syscall(SYS_fstat, ev_fd, &st) == 0 && S_ISSOCK(st.st_mode) &&
         (unsigned long long)st.st_ino == ev_ino && (unsigned long long)st.st_dev == ev_dev;
}

/* Makes ev_fd a fresh connected socket, or -1. Holder of ev_busy only. */
static void open_kept(void) {
  struct rlimit nofile;
  struct stat st;
  long fd = connect_agent(), high;
  ev_fd = -1;
  if (fd < 0) return;
  if (syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, NULL, &nofile) == 0 && nofile.rlim_cur >= 16) {
    unsigned long long at = nofile.rlim_cur > 1024 ? 1024 : nofile.rlim_cur;
    high = syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, (long)(at / 4 * 3));
    if (high >= 0) {
      syscall(SYS_close, fd);
      fd = high;
    }
  }
  if (syscall(SYS_fstat, fd, &st) != 0) {
    syscall(SYS_close, fd);
    return;
  }
  ev_ino = (unsigned long long)st.st_ino;
  ev_dev = (unsigned long long)st.st_dev;
  ev_fd = (int)fd;
}

/* One datagram through a socket made for this call only (the kept socket is
 * another thread's at this moment). */
static int send_once(const char* msg, size_t len) {
  long fd = syscall(SYS_socket, AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  long r;
  if (fd < 0) return 0;
  r = syscall(SYS_sendto, fd, msg, len, MSG_DONTWAIT | MSG_NOSIGNAL, &ev_addr, ev_addr_len);
  if (r < 0 && errno != EAGAIN) r = -2;
  syscall(SYS_close, fd);
  return r == -2 ? -1 : 0;
}

/* Sends `msg`; -1 when no agent takes it (gone, refusing), 0 otherwise (sent,
 * or dropped on a full queue). */
static int send_datagram(const char* msg, size_t len) {
  int tries, r = -1;
  if (__atomic_exchange_n(&ev_busy, 1, __ATOMIC_ACQUIRE)) return send_once(msg, len);
  for (tries = 0; tries < 2; tries++) {
    if (!kept_is_ours()) open_kept(); /* a number no longer ours is forgotten, never closed */
    if (ev_fd < 0) break;
    if (syscall(SYS_sendto, ev_fd, msg, len, MSG_DONTWAIT | MSG_NOSIGNAL, NULL, 0) >= 0 || errno == EAGAIN) {
      r = 0;
      break;
    }
    /* ECONNREFUSED, ENOTCONN, ECONNRESET: the agent's socket went away (a
     * restarted agent bound a new one): connect again, once */
    syscall(SYS_close, ev_fd);
    ev_fd = -1;
  }
  __atomic_store_n(&ev_busy, 0, __ATOMIC_RELEASE);
  return r;
}

/* The agent's rate limit per sender (plugin/core/node/sender_limiter.h: a
 * burst of 1000 records, then 200 a second), kept here too so that a record
 * the agent would drop unread costs the program no system call to send it (a
 * program creating segments in a tight loop: ~0.1x of its own CPU in
 * fstat+sendto for records refused at the agent or, while its receiver naps,
 * by the kernel). Generic cell rate algorithm on one atomic word, so any
 * thread or signal handler may race here: ev_tat is when the bucket would be
 * full again (CLOCK_MONOTONIC, ns). The sustained rate is a quarter above the
 * agent's: the agent counts at receipt, later than the send, and a record the
 * agent would keep must never be dropped here. Per process, as the agent
 * counts (SCM_CREDENTIALS carries the thread group's pid): a forked child
 * inherits its parent's count, so when the count says no, the pid is
 * looked at (one getpid) and a child starts its own. */
#define EV_BURST 1000LL
#define EV_INTERVAL_NS (1000000000LL / 250)

static int within_agent_limit(void) {
  struct timespec ts;
  long long now, tat, next;
  long pid;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  now = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
  tat = LOAD(ev_tat);
  do {
    long long base = tat > now ? tat : now;
    if (base - now > (EV_BURST - 1) * EV_INTERVAL_NS) goto over;
    next = base + EV_INTERVAL_NS;
  } while (!__atomic_compare_exchange_n(&ev_tat, &tat, next, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
  return 1;
over:
  pid = syscall(SYS_getpid);
  if (pid == LOAD(ev_owner)) return 0;
  STORE(ev_owner, pid); /* a forked child: its own burst, as the agent sees it */
  STORE(ev_tat, now + EV_INTERVAL_NS);
  return 1;
}

/* Whether a record may be sent: the kept socket's connect is the probe. */
static int agent_may_listen(void) {
  struct timespec now;
  int state = LOAD(ev_state);
  if (!ev_addr_len) return 0;
  if (state == 1) return 1;
  if (state == -1) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec < LOAD(ev_recheck_at)) return 0;
  }
  STORE(ev_state, 1); /* the first send finds out (connect), and says gone if not */
  return 1;
}

/* The creation record of `path`, which the caller holds open at `fd`:
 * {"type":"create","path":"/dev/shm/<name>","fd":<fd>}. The number lets the
 * agent check that one descriptor of the sender instead of all its
 * descriptors and mappings (it checks everything when the number no longer
 * shows the file). Raw system calls: no cancellation point,
 * async-signal-safe, errno kept. */
static void send_create(const char* path, int fd) {
  char msg[1200];
  char *p = msg, *end = msg + sizeof msg;
  int saved = errno;
  put(&p, end, "{\"type\":\"create\",\"path\":\"");
  put_escaped(&p, end, path);
  put(&p, end, "\",\"fd\":");
  put_u64(&p, end, (unsigned long long)fd);
  put(&p, end, "}");
  if (p + 1 < end && send_datagram(msg, (size_t)(p - msg)) < 0) agent_gone(); /* truncated: not a record */
  errno = saved;
}

static int under_dev_shm(const char* path) {
  return path && strncmp(path, SHM_DIR, sizeof SHM_DIR - 1) == 0 && path[sizeof SHM_DIR - 1] != 0;
}

/* After a successful open with O_CREAT of `path` under /dev/shm: a creation
 * record when this call made the file. O_EXCL says so exactly; without it the
 * file is a candidate while still empty (a file somebody sized is never ours),
 * and the agent keeps the first record. The fstat is spent only while an agent
 * listens. */
static void note_created(int fd, int flags, const char* path) {
  struct stat st;
  int saved = errno;
  if (!agent_may_listen()) return;
  if (!(flags & O_EXCL) && (syscall(SYS_fstat, fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != 0)) {
    errno = saved;
    return;
  }
  if (within_agent_limit()) send_create(path, fd);
  errno = saved;
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

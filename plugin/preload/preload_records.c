/* libshmkeeper-preload.so: creator records (see preload.c, item 2): one
 * datagram to the agent's event socket per segment this process creates,
 * through one kept socket, within the agent's rate limit. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "preload_internal.h"

static long long ev_tat; /* the records' rate limit (within_agent_limit) */

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

/* After a successful open with O_CREAT of `path` under /dev/shm: a creation
 * record when this call made the file. O_EXCL says so exactly; without it the
 * file is a candidate while still empty (a file somebody sized is never ours),
 * and the agent keeps the first record. The fstat is spent only while an agent
 * listens. */
void note_created(int fd, int flags, const char* path) {
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

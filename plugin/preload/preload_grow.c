/* libshmkeeper-preload.so: ftruncate on the /dev/shm tmpfs (see preload.c,
 * item 1): a growth past the tmpfs's free space is ENOSPC with one line on
 * stderr instead of a SIGBUS later; with SHMKEEPER_PRELOAD_RESERVE the whole
 * size is reserved (fallocate). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include "preload_internal.h"

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

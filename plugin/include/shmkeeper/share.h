/* shmkeeper/share.h: named, sized, crash-safe shared segments for programs
 * that want them (a small C API, usable from C, C++ and Python's ctypes).
 *
 * A segment is /dev/shm/<name>: one header page (magic, size, a reference
 * count) and then the data. Creating it reserves every page up front
 * (posix_fallocate), so a full /dev/shm is ENOSPC at create time, never a
 * SIGBUS later. Opening maps the existing pages: sharing a buffer with
 * another process costs a map, whatever its size, instead of a copy. The last
 * release unlinks the name. A process that dies without releasing leaves the
 * count high; shmkeeperd then sees a segment nobody holds whose creator is
 * dead (its creator record), and reclaims it under its usual rules.
 *
 * Functions return 0 or an errno value; they never abort. Thread-safety: a
 * shmk_segment is used by one thread at a time; different segments (and
 * processes) are independent.
 */
#ifndef SHMKEEPER_SHARE_H_
#define SHMKEEPER_SHARE_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct shmk_segment shmk_segment;

/* Creates the segment with `size` data bytes (EEXIST if the name is taken,
 * ENOSPC if /dev/shm cannot hold it). The creator holds one reference. */
int shmk_create(const char* name, size_t size, shmk_segment** out);

/* Opens an existing segment and takes a reference; `writable` maps it
 * read-write, else read-only. ENOENT if it does not exist or is being
 * destroyed; EINVAL if the file is not a shmkeeper segment. */
int shmk_open(const char* name, int writable, shmk_segment** out);

/* The data and its size. */
void* shmk_data(const shmk_segment* seg);
size_t shmk_size(const shmk_segment* seg);

/* Drops this reference and unmaps; the last reference unlinks the name.
 * `seg` is freed. */
int shmk_release(shmk_segment* seg);

#ifdef __cplusplus
}
#endif

#endif /* SHMKEEPER_SHARE_H_ */

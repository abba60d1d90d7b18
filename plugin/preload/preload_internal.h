/* What the modules of libshmkeeper-preload.so share (internal: every symbol
 * of the library but the interposed calls is hidden, -fvisibility=hidden).
 *
 *   preload.c          the interposed open/openat/creat/shm_open and the
 *                      constructor that resolves libc's definitions
 *   preload_grow.c     ftruncate: ENOSPC instead of SIGBUS (the size check,
 *                      the opt-in reservation, the ENOSPC message)
 *   preload_records.c  creator records to the agent's event socket (the kept
 *                      socket, the agent's rate limit)
 *   preload_format.c   async-signal-safe formatting
 *
 * Everything here is async-signal-safe: raw system calls, no stdio, no
 * malloc, no locks (see preload.c). */
#pragma once

#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#define SHMK_EXPORT __attribute__((visibility("default")))
#define TMPFS_MAGIC_ 0x01021994
#define SHM_DIR "/dev/shm/"
#define DEFAULT_EVENT_SOCKET "/run/shmkeeper/events/events.sock"

#define LOAD(p) __atomic_load_n(&(p), __ATOMIC_ACQUIRE)
#define STORE(p, v) __atomic_store_n(&(p), (v), __ATOMIC_RELEASE)

/* ---- set by the constructor (preload.c) ---------------------------------- */

extern int reserve_on;             /* SHMKEEPER_PRELOAD_RESERVE=1|true|yes: fallocate at ftruncate */
extern struct sockaddr_un ev_addr; /* the agent's event socket */
extern socklen_t ev_addr_len;      /* 0: no events (before the constructor, or a bad path) */
extern long ev_owner;              /* the pid the records' rate limit counts for (within_agent_limit) */

/* ---- preload_format.c ---------------------------------------------------- */

/* Appends `s` to [*p, end), always leaving room for the terminating NUL. */
void put(char** p, char* end, const char* s);
void put_u64(char** p, char* end, unsigned long long v);
/* "512 B", "64.0 MiB": one decimal above bytes. */
void put_size(char** p, char* end, unsigned long long bytes);
/* JSON string contents. */
void put_escaped(char** p, char* end, const char* s);

/* ---- preload_records.c --------------------------------------------------- */

/* After a successful open with O_CREAT of `path` under /dev/shm: a creation
 * record when this call made the file (see preload_records.c). */
void note_created(int fd, int flags, const char* path);

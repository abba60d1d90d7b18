/* A table of the processes holding something, kept in shared memory: each
 * holder claims a slot with its pid and start time, and a checker counts the
 * slots whose process is still that process (a pid that is gone, or reused by
 * a process with another start time, frees its slot). Internal to
 * plugin/share; the CUDA export's consumer list is one.
 *
 * Pids are those of the caller's PID namespace: holders and checkers must
 * share one (legacy CUDA IPC needs that anyway). All access is atomic; any
 * process may join, leave or count concurrently.
 */
#ifndef SHMKEEPER_SHARE_HOLDERS_H_
#define SHMKEEPER_SHARE_HOLDERS_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHMK_MAX_HOLDERS 64

struct shmk_holder {
  uint32_t pid; /* 0: free; claimed with a compare-and-swap */
  uint32_t reserved;
  uint64_t start_ticks; /* /proc/<pid>/stat field 22; 0 while being written */
};

struct shmk_holders {
  struct shmk_holder slot[SHMK_MAX_HOLDERS];
};

/* Claims a slot for the calling process; *slot names it for leave. EAGAIN
 * when every slot is held by a live process. */
int shmk_holders_join(struct shmk_holders* t, int* slot);

/* Frees the caller's slot. */
void shmk_holders_leave(struct shmk_holders* t, int slot);

/* How many slots hold a live process; the slots of dead ones are freed. */
int shmk_holders_live(struct shmk_holders* t);

/* The start time of `pid` in clock ticks after boot, or 0 if it is gone. */
uint64_t shmk_process_start(uint32_t pid);

#ifdef __cplusplus
}
#endif

#endif /* SHMKEEPER_SHARE_HOLDERS_H_ */

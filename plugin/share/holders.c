#include "holders.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint64_t shmk_process_start(uint32_t pid) {
  char path[64], buf[1024];
  const char* p;
  ssize_t n;
  int fd, field;
  snprintf(path, sizeof path, "/proc/%u/stat", pid);
  if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) return 0;
  n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  /* The command may hold spaces and parentheses: fields count from the last ')'. */
  if (!(p = strrchr(buf, ')'))) return 0;
  for (field = 2; field < 22 && p; ++field) p = strchr(p + 1, ' ');
  return p ? strtoull(p + 1, NULL, 10) : 0;
}

/* Whether the slot's process is still the one that claimed it; *seen gets
 * the start time the slot held. A slot whose start time is not written yet
 * belongs to a live claimer unless its pid is gone. */
static int slot_live(struct shmk_holder* h, uint32_t pid, uint64_t* seen) {
  uint64_t now = shmk_process_start(pid);
  *seen = __atomic_load_n(&h->start_ticks, __ATOMIC_SEQ_CST);
  if (now == 0) return 0;
  return *seen == 0 || *seen == now;
}

/* Frees a dead process's slot, unless someone claimed it meanwhile: the start
 * time is cleared only if it is still the dead one's, before the pid. */
static void free_dead(struct shmk_holder* h, uint32_t pid, uint64_t seen) {
  if (!__atomic_compare_exchange_n(&h->start_ticks, &seen, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) return;
  __atomic_compare_exchange_n(&h->pid, &pid, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

static int try_claim(struct shmk_holder* h, uint32_t self, uint64_t start) {
  uint32_t cur = __atomic_load_n(&h->pid, __ATOMIC_SEQ_CST);
  uint64_t seen;
  if (cur != 0) {
    if (slot_live(h, cur, &seen)) return 0;
    free_dead(h, cur, seen);
    cur = 0;
  }
  if (!__atomic_compare_exchange_n(&h->pid, &cur, self, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) return 0;
  __atomic_store_n(&h->start_ticks, start, __ATOMIC_SEQ_CST);
  return 1;
}

int shmk_holders_join(struct shmk_holders* t, int* slot) {
  uint32_t self = (uint32_t)getpid();
  uint64_t start = shmk_process_start(self);
  int i;
  if (!t || !slot) return EINVAL;
  for (i = 0; i < SHMK_MAX_HOLDERS; ++i) {
    if (try_claim(&t->slot[i], self, start)) {
      *slot = i;
      return 0;
    }
  }
  return EAGAIN;
}

void shmk_holders_leave(struct shmk_holders* t, int slot) {
  uint32_t self = (uint32_t)getpid();
  if (!t || slot < 0 || slot >= SHMK_MAX_HOLDERS) return;
  __atomic_store_n(&t->slot[slot].start_ticks, 0, __ATOMIC_SEQ_CST);
  __atomic_compare_exchange_n(&t->slot[slot].pid, &self, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

int shmk_holders_live(struct shmk_holders* t) {
  int i, live = 0;
  for (i = 0; t && i < SHMK_MAX_HOLDERS; ++i) {
    uint32_t pid = __atomic_load_n(&t->slot[i].pid, __ATOMIC_SEQ_CST);
    uint64_t seen;
    if (pid == 0) continue;
    if (slot_live(&t->slot[i], pid, &seen)) {
      ++live;
    } else {
      free_dead(&t->slot[i], pid, seen);
    }
  }
  return live;
}

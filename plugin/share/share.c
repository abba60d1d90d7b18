#define _GNU_SOURCE
#include "shmkeeper/share.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHMK_MAGIC 0x53484d4b53454731ull /* "SHMKSEG1" */
#define HEADER_BYTES 4096u

struct header {
  uint64_t magic;
  uint64_t size;
  uint32_t refs; /* atomic */
  uint32_t reserved;
};

struct shmk_segment {
  char name[256];
  void* map;
  size_t map_bytes;
  size_t size;
};

static struct header* header_of(const shmk_segment* s) { return (struct header*)s->map; }

static int valid_name(const char* name) {
  size_t n = name ? strlen(name) : 0;
  return n > 0 && n < 250 && !strchr(name, '/') && strcmp(name, ".") && strcmp(name, "..");
}

static int map_segment(int fd, size_t bytes, int writable, void** out) {
  void* m = mmap(NULL, bytes, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return errno;
  *out = m;
  return 0;
}

static shmk_segment* new_segment(const char* name) {
  shmk_segment* s = calloc(1, sizeof *s);
  if (s) memcpy(s->name, name, strlen(name) + 1);
  return s;
}

int shmk_create(const char* name, size_t size, shmk_segment** out) {
  shmk_segment* s;
  struct header* h;
  void* hmap;
  int fd, err;
  if (!valid_name(name) || !out || size > SIZE_MAX - HEADER_BYTES) return EINVAL;
  if (!(s = new_segment(name))) return ENOMEM;
  fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    free(s);
    return errno;
  }
  s->size = size;
  s->map_bytes = HEADER_BYTES + size;
  err = posix_fallocate(fd, 0, (off_t)s->map_bytes); /* reserve: ENOSPC now, not SIGBUS later */
  if (!err) err = map_segment(fd, s->map_bytes, 1, &s->map);
  close(fd);
  if (err) {
    shm_unlink(name);
    free(s);
    return err;
  }
  hmap = s->map;
  h = (struct header*)hmap;
  h->size = size;
  __atomic_store_n(&h->refs, 1, __ATOMIC_RELEASE);
  __atomic_store_n(&h->magic, SHMK_MAGIC, __ATOMIC_RELEASE); /* published last: openers check it */
  *out = s;
  return 0;
}

int shmk_open(const char* name, int writable, shmk_segment** out) {
  shmk_segment* s;
  struct stat st;
  struct header* h;
  uint32_t refs;
  void* hdr = NULL;
  int fd, err;
  if (!valid_name(name) || !out) return EINVAL;
  fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return errno;
  if (fstat(fd, &st) != 0 || (size_t)st.st_size < HEADER_BYTES) {
    close(fd);
    return EINVAL;
  }
  /* The header is always mapped writable (the reference count lives there). */
  if ((err = map_segment(fd, HEADER_BYTES, 1, &hdr)) != 0) {
    close(fd);
    return err;
  }
  h = (struct header*)hdr;
  if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != SHMK_MAGIC || h->size + HEADER_BYTES != (size_t)st.st_size) {
    munmap(hdr, HEADER_BYTES);
    close(fd);
    return EINVAL;
  }
  refs = __atomic_load_n(&h->refs, __ATOMIC_ACQUIRE);
  do {
    if (refs == 0) { /* the last user is unlinking it */
      munmap(hdr, HEADER_BYTES);
      close(fd);
      return ENOENT;
    }
  } while (!__atomic_compare_exchange_n(&h->refs, &refs, refs + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
  if (!(s = new_segment(name))) {
    __atomic_sub_fetch(&h->refs, 1, __ATOMIC_ACQ_REL);
    munmap(hdr, HEADER_BYTES);
    close(fd);
    return ENOMEM;
  }
  s->size = h->size;
  s->map_bytes = HEADER_BYTES + s->size;
  munmap(hdr, HEADER_BYTES);
  /* The header page stays writable (the count); read-only users get the data protected. */
  err = map_segment(fd, s->map_bytes, 1, &s->map);
  if (!err && !writable && s->size) mprotect((char*)s->map + HEADER_BYTES, s->size, PROT_READ);
  close(fd);
  if (err) {
    free(s);
    return err;
  }
  *out = s;
  return 0;
}

void* shmk_data(const shmk_segment* seg) { return seg ? (char*)seg->map + HEADER_BYTES : NULL; }

size_t shmk_size(const shmk_segment* seg) { return seg ? seg->size : 0; }

int shmk_release(shmk_segment* seg) {
  int err = 0;
  if (!seg) return EINVAL;
  if (__atomic_sub_fetch(&header_of(seg)->refs, 1, __ATOMIC_ACQ_REL) == 0 && shm_unlink(seg->name) != 0) err = errno;
  munmap(seg->map, seg->map_bytes);
  free(seg);
  return err;
}

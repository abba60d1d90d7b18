#define _GNU_SOURCE
#include "shmkeeper/share_cuda.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "holders.h"
#include "shmkeeper/share.h"

#define CUDA_MAGIC 0x53484d4b43554441ull /* "SHMKCUDA" */

/* The segment's data: written by the producer, magic published last. */
struct record {
  uint64_t magic;
  uint64_t bytes;
  int32_t device;
  uint32_t closing; /* atomic: set once by shmk_cuda_unexport */
  cudaIpcMemHandle_t handle;
  struct shmk_holders consumers;
};

struct shmk_cuda_producer {
  shmk_segment* seg;
  char name[256];
};

struct shmk_cuda_consumer {
  shmk_segment* seg;
  int slot;
  void* ptr;
};

static int from_cuda(cudaError_t e) {
  if (e == cudaSuccess) return 0;
  return e == cudaErrorMemoryAllocation ? ENOMEM : EIO;
}

static struct record* record_of(shmk_segment* seg) { return (struct record*)shmk_data(seg); }

int shmk_cuda_export(const char* name, void* dev_ptr, size_t bytes, shmk_cuda_producer** out) {
  cudaIpcMemHandle_t handle;
  shmk_cuda_producer* ex;
  struct record* r;
  int device, err;
  if (!name || strlen(name) >= sizeof ex->name || !dev_ptr || !out) return EINVAL;
  if ((err = from_cuda(cudaGetDevice(&device))) != 0) return err;
  if ((err = from_cuda(cudaIpcGetMemHandle(&handle, dev_ptr))) != 0) return err;
  if (!(ex = calloc(1, sizeof *ex))) return ENOMEM;
  if ((err = shmk_create(name, sizeof(struct record), &ex->seg)) != 0) {
    free(ex);
    return err;
  }
  memcpy(ex->name, name, strlen(name) + 1);
  r = record_of(ex->seg);
  r->bytes = bytes;
  r->device = device;
  memcpy(&r->handle, &handle, sizeof handle);
  __atomic_store_n(&r->magic, CUDA_MAGIC, __ATOMIC_SEQ_CST);
  *out = ex;
  return 0;
}

int shmk_cuda_consumers(shmk_cuda_producer* ex) { return ex ? shmk_holders_live(&record_of(ex->seg)->consumers) : 0; }

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

int shmk_cuda_unexport(shmk_cuda_producer* ex, int timeout_ms) {
  int waited = 0;
  if (!ex) return EINVAL;
  /* Closed before counting; an importer joins before it checks: one of the
   * two always sees the other (sequentially consistent). */
  __atomic_store_n(&record_of(ex->seg)->closing, 1, __ATOMIC_SEQ_CST);
  while (shmk_cuda_consumers(ex) > 0) {
    if (timeout_ms >= 0 && waited >= timeout_ms) return ETIMEDOUT;
    sleep_ms(10);
    waited += 10;
  }
  /* A consumer that died still counts a reference in the segment: the name
   * goes now, whatever the count says. */
  shm_unlink(ex->name);
  shmk_release(ex->seg);
  free(ex);
  return 0;
}

static int join(shmk_segment* seg, int* slot) {
  struct record* r = record_of(seg);
  int err;
  if (shmk_size(seg) < sizeof *r) return EINVAL;
  if (__atomic_load_n(&r->magic, __ATOMIC_SEQ_CST) != CUDA_MAGIC) return ENOENT; /* not published yet */
  if ((err = shmk_holders_join(&r->consumers, slot)) != 0) return err;
  if (__atomic_load_n(&r->closing, __ATOMIC_SEQ_CST)) {
    shmk_holders_leave(&r->consumers, *slot);
    return ENOENT;
  }
  return 0;
}

int shmk_cuda_import(const char* name, void** dev_ptr, size_t* bytes, shmk_cuda_consumer** out) {
  shmk_cuda_consumer* im;
  cudaIpcMemHandle_t handle;
  int err;
  if (!dev_ptr || !out) return EINVAL;
  if (!(im = calloc(1, sizeof *im))) return ENOMEM;
  if ((err = shmk_open(name, 1, &im->seg)) != 0) {
    free(im);
    return err;
  }
  if ((err = join(im->seg, &im->slot)) == 0) {
    memcpy(&handle, &record_of(im->seg)->handle, sizeof handle);
    err = from_cuda(cudaIpcOpenMemHandle(&im->ptr, handle, cudaIpcMemLazyEnablePeerAccess));
    if (err) shmk_holders_leave(&record_of(im->seg)->consumers, im->slot);
  }
  if (err) {
    shmk_release(im->seg);
    free(im);
    return err;
  }
  *dev_ptr = im->ptr;
  if (bytes) *bytes = record_of(im->seg)->bytes;
  *out = im;
  return 0;
}

int shmk_cuda_import_release(shmk_cuda_consumer* im) {
  int err;
  if (!im) return EINVAL;
  err = from_cuda(cudaIpcCloseMemHandle(im->ptr));
  shmk_holders_leave(&record_of(im->seg)->consumers, im->slot);
  shmk_release(im->seg);
  free(im);
  return err;
}

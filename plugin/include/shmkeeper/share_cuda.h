/* shmkeeper/share_cuda.h: hand a CUDA device buffer to other processes
 * through a shmkeeper segment (share.h), and free it only after every
 * consumer has released it or died.
 *
 * The producer exports a buffer it allocated: its cudaIpcMemHandle_t, size
 * and device go into the segment `name`, with a table of consumers. A consumer
 * imports: it takes a slot in the table (its pid and start time), then opens
 * the handle (cudaIpcOpenMemHandle). shmk_cuda_unexport first closes the
 * export to new consumers, then waits until no slot holds a live process —
 * released slots are empty, and a killed consumer's slot names a pid that is
 * gone or reused — and only then drops the segment, so the producer may
 * cudaFree the buffer. This is the caveat PyTorch documents for CUDA tensors
 * shared between processes (a consumer that dies keeps the producer's memory
 * pinned), turned into a wait the producer can bound.
 *
 * Legacy CUDA IPC works only between processes that share a PID namespace
 * (containers: shareProcessNamespace / --pid, see docs/sharing-runtime.md); the consumer
 * table uses the same pids. Built only when the CUDA toolkit is found
 * (libshmkeeper_share_cuda, links cudart).
 *
 * Functions return 0 or an errno value: CUDA failures are EIO (ENOMEM for an
 * allocation failure); they never abort. Thread-safety as share.h.
 */
#ifndef SHMKEEPER_SHARE_CUDA_H_
#define SHMKEEPER_SHARE_CUDA_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct shmk_cuda_producer shmk_cuda_producer;
typedef struct shmk_cuda_consumer shmk_cuda_consumer;

/* Exports `bytes` of device memory at `dev_ptr` (from cudaMalloc on the
 * current device) under `name`. EEXIST if the name is taken. */
int shmk_cuda_export(const char* name, void* dev_ptr, size_t bytes, shmk_cuda_producer** out);

/* How many consumers hold the export now (dead ones are dropped). */
int shmk_cuda_consumers(shmk_cuda_producer* ex);

/* Closes the export to new consumers and waits up to `timeout_ms` (-1: no
 * limit) for the current ones to release or die. 0: nobody holds the
 * buffer any more, the segment is gone and `ex` is freed; the caller may now
 * cudaFree. ETIMEDOUT: a live consumer still holds it; `ex` stays valid and
 * closed, call again. */
int shmk_cuda_unexport(shmk_cuda_producer* ex, int timeout_ms);

/* Maps the buffer exported under `name` into this process (on the current
 * device). ENOENT if there is no such export or it is closing; EAGAIN if
 * its consumer table is full. */
int shmk_cuda_import(const char* name, void** dev_ptr, size_t* bytes, shmk_cuda_consumer** out);

/* Unmaps the buffer and leaves the consumer table; `im` is freed. */
int shmk_cuda_import_release(shmk_cuda_consumer* im);

#ifdef __cplusplus
}
#endif

#endif /* SHMKEEPER_SHARE_CUDA_H_ */

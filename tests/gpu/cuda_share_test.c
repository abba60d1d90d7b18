/* The CUDA sharing helper (shmkeeper/share_cuda.h) on a real GPU: a consumer
 * process sees and writes the producer's buffer; the producer's unexport
 * waits for a live consumer and not for a killed one. Exits 77 (skipped)
 * where no CUDA device is present. Consumers are separate processes started
 * with posix_spawn (CUDA does not survive fork). */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shmkeeper/share_cuda.h"

#define BYTES (64u << 20)

extern char** environ;

#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                        \
    }                                                                 \
  } while (0)

static int all_bytes(const void* dev, unsigned char want) {
  static unsigned char host[4096];
  size_t i;
  if (cudaMemcpy(host, dev, sizeof host, cudaMemcpyDeviceToHost) != cudaSuccess) return 0;
  for (i = 0; i < sizeof host; ++i) {
    if (host[i] != want) return 0;
  }
  return 1;
}

/* Child: import, check the producer's bytes, overwrite them; with `hold`,
 * say "ready" and keep the import until stdin closes. */
static int consume(const char* name, int hold) {
  shmk_cuda_consumer* im;
  void* p;
  size_t bytes;
  char c;
  int err = shmk_cuda_import(name, &p, &bytes, &im);
  if (err) return err == ENOENT ? 2 : 3;
  if (bytes != BYTES || !all_bytes(p, 0x5a)) return 4;
  if (cudaMemset(p, 0x33, bytes) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) return 5;
  if (hold) {
    if (write(1, "ready\n", 6) != 6) return 6;
    while (read(0, &c, 1) > 0) {
    }
  }
  return shmk_cuda_import_release(im) == 0 ? 0 : 7;
}

struct child {
  pid_t pid;
  int to, from; /* its stdin and stdout */
};

static struct child spawn(const char* mode, const char* name) {
  struct child ch;
  posix_spawn_file_actions_t fa;
  int in[2], out[2];
  char* argv[] = {"cuda_share_test", (char*)mode, (char*)name, NULL};
  CHECK(pipe(in) == 0 && pipe(out) == 0);
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, in[1]);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  CHECK(posix_spawn(&ch.pid, "/proc/self/exe", &fa, NULL, argv, environ) == 0);
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  ch.to = in[1];
  ch.from = out[0];
  return ch;
}

static int wait_exit(pid_t pid) {
  int st;
  CHECK(waitpid(pid, &st, 0) == pid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void await_ready(struct child ch) {
  char buf[6];
  CHECK(read(ch.from, buf, sizeof buf) == 6 && memcmp(buf, "ready\n", 6) == 0);
}

static shmk_cuda_producer* export_as(const char* name, void* buf) {
  shmk_cuda_producer* ex;
  CHECK(cudaMemset(buf, 0x5a, BYTES) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess);
  CHECK(shmk_cuda_export(name, buf, BYTES, &ex) == 0);
  return ex;
}

int main(int argc, char** argv) {
  char name[64], path[80];
  shmk_cuda_producer* ex;
  struct child ch;
  void* buf;
  int n = 0;
  if (argc == 3) return consume(argv[2], strcmp(argv[1], "hold") == 0);
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    printf("SKIP: no CUDA device\n");
    return 77;
  }
  snprintf(name, sizeof name, "shmk-cuda-test-%d", (int)getpid());
  snprintf(path, sizeof path, "/dev/shm/%s", name);
  CHECK(cudaMalloc(&buf, BYTES) == cudaSuccess);

  /* A consumer reads and writes the producer's memory, then releases. */
  ex = export_as(name, buf);
  CHECK(wait_exit(spawn("consume", name).pid) == 0);
  CHECK(shmk_cuda_consumers(ex) == 0);
  CHECK(all_bytes(buf, 0x33));

  /* A live consumer holds the buffer: unexport waits, then succeeds. */
  ch = spawn("hold", name);
  await_ready(ch);
  CHECK(shmk_cuda_consumers(ex) == 1);
  CHECK(shmk_cuda_unexport(ex, 200) == ETIMEDOUT);
  close(ch.to);
  CHECK(shmk_cuda_unexport(ex, 30000) == 0);
  CHECK(wait_exit(ch.pid) == 0);
  CHECK(access(path, F_OK) != 0);
  {
    shmk_cuda_consumer* im;
    void* p;
    CHECK(shmk_cuda_import(name, &p, NULL, &im) == ENOENT); /* closed exports take no one */
  }

  /* A killed consumer does not keep the buffer pinned. */
  ex = export_as(name, buf);
  ch = spawn("hold", name);
  await_ready(ch);
  kill(ch.pid, SIGKILL);
  CHECK(wait_exit(ch.pid) == 128 + SIGKILL);
  CHECK(shmk_cuda_unexport(ex, 30000) == 0);
  CHECK(access(path, F_OK) != 0);

  CHECK(cudaFree(buf) == cudaSuccess);
  printf("cuda_share_test: ok\n");
  return 0;
}

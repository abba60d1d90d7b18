// Measuring one shared-memory tmpfs: statfs totals and a walk of its files.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "scan/proc_table.h"

namespace shmkeeper {

struct ShmFile {
  std::string path;  // relative to the shm root, e.g. "torch_7_0" or "dir/x"
  FileKey key;
  int64_t bytes = 0;  // st_blocks * 512: allocated, not st_size
  int64_t mtime_sec = 0;
};

struct ShmDir {
  dev_t dev = 0;
  bool is_tmpfs = false;
  int64_t size_bytes = 0;
  int64_t used_bytes = 0;
  std::vector<ShmFile> files;
  int64_t linked_bytes = 0;  // sum of files[].bytes
};

// Measures the directory open at `dir_fd` (not consumed). Symlinks are never
// followed; subdirectories are walked to `max_depth`.
Result<ShmDir> MeasureShmDir(int dir_fd, int max_depth = 8);

}  // namespace shmkeeper

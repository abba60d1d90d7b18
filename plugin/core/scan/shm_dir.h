// Measuring one shared-memory tmpfs: statfs totals and a walk of its files.
#pragma once

#include <sys/types.h>

#include <cstddef>
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
  // Inodes in use on the filesystem (statfs f_files - f_ffree, the root
  // directory included); -1 when the tmpfs has no inode limit (nr_inodes=0:
  // statfs reports none).
  int64_t inodes_used = -1;
  std::vector<ShmFile> files;
  int64_t linked_bytes = 0;  // sum of files[].bytes
  // The walk met more than `max_entries` entries and stopped there: `files`
  // and `linked_bytes` are empty (what it met is dropped, not a partial list).
  bool over_limit = false;
  // Entries this walk stat'ed (0 for a statfs-only measure or a reused listing).
  int64_t entries = 0;
};

// Measures the directory open at `dir_fd` (not consumed). Symlinks are never
// followed; subdirectories are walked to `max_depth`. At most `max_entries`
// entries (files, directories, anything a readdir returns but . and ..) are
// read and stat'ed; the next one readdir returns (not stat'ed) sets `over_limit`: the
// cost and the memory of a walk are bounded whatever the tmpfs holds.
Result<ShmDir> MeasureShmDir(int dir_fd, int max_depth = 8, size_t max_entries = SIZE_MAX);

// The statfs figures of the directory open at `dir_fd` (dev, is_tmpfs, size,
// used, inodes): no walk, no files.
Result<ShmDir> MeasureShmFs(int dir_fd);

}  // namespace shmkeeper

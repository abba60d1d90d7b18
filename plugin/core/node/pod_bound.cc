// The per-pod bound of a scan (agent.maxFilesPerPod, docs/agent.md#bounded-per-pod):
// a tmpfs with more entries than ScanOptions::max_files_per_pod is listed no
// further, reported, and none of its files is judged.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "node/node_scan.h"

namespace shmkeeper {

std::optional<ShmDir> Scanner::OverLimitListing(int fd, dev_t dev) const {
  auto it = listings_.find(dev);
  if (it == listings_.end() || !it->second.dir.over_limit) return std::nullopt;
  Result<ShmDir> now = MeasureShmFs(fd);
  if (!now.ok() || now->dev != dev) return std::nullopt;
  // Back under the limit for certain: the inodes in use (the root directory
  // one of them) leave no room for more entries than the limit.
  if (now->inodes_used >= 0 && static_cast<uint64_t>(now->inodes_used) <= opts_.max_files_per_pod + 1) {
    return std::nullopt;
  }
  now->over_limit = true;
  return std::move(*now);
}

void Scanner::KeepOverLimit(PodRecord* p, const ShmDir& d, NodeSnapshot* snap) const {
  constexpr int64_t kMaxFiles = std::numeric_limits<int32_t>::max();
  int64_t limit = static_cast<int64_t>(std::min(opts_.max_files_per_pod, static_cast<size_t>(kMaxFiles - 1)));
  // The root directory is no entry; with no inode limit, statfs cannot count.
  int64_t files = d.inodes_used > 0 ? d.inodes_used - 1 : limit + 1;
  p->files_over_limit = true;
  p->files_limit = static_cast<int32_t>(limit);
  p->files = static_cast<int32_t>(std::clamp<int64_t>(files, limit + 1, kMaxFiles));
  p->unlinked_bytes = 0;  // unknown: its files were not all listed
  p->top_segments.clear();
  if (!p->shm_counted_elsewhere) snap->kept_by_reason["files_over_limit"] += p->files;
}

}  // namespace shmkeeper

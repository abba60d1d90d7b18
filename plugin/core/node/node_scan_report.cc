// What a pod's row shows of its files: the largest ones, their holders and
// verdicts (node_scan_internal.h).
#include <algorithm>
#include <cstddef>

#include "node/node_scan_internal.h"

namespace shmkeeper::node_scan_detail {
namespace {

// The verdict of each file of a pod for its top segments.
LeakState SegmentState(const std::map<FileKey, LeakState>& verdicts, const FileKey& key, bool held) {
  if (held) return LeakState::kHeld;
  auto it = verdicts.find(key);
  return it == verdicts.end() ? LeakState::kUnheld : it->second;
}

}  // namespace

std::string DisplayPath(const PodRecord& p, const std::string& rel) {
  return (p.host_dir.empty() ? std::string("/dev/shm") : p.host_dir) + "/" + rel;
}

std::vector<SegmentRecord> TopSegments(const PodRecord& p, const std::vector<ShmFile>& files, const ProcTable& table,
                                       const NodeRefs* refs, size_t n, const std::map<FileKey, LeakState>& verdicts,
                                       const std::set<FileKey>& held_keys,
                                       const std::map<FileKey, std::vector<pid_t>>& observed, const std::string& proc) {
  std::vector<size_t> idx(files.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  n = std::min(n, idx.size());
  std::partial_sort(idx.begin(), idx.begin() + static_cast<ptrdiff_t>(n), idx.end(),
                    [&](size_t a, size_t b) { return files[a].bytes > files[b].bytes; });
  std::vector<SegmentRecord> out;
  for (size_t k = 0; k < n; ++k) {
    const ShmFile& f = files[idx[k]];
    SegmentRecord seg{DisplayPath(p, f.path), f.bytes, false, LeakState::kHeld, {}};
    auto held = table.holders.find(f.key);
    if (held != table.holders.end()) {
      for (const HolderRef& r : held->second) seg.holders.push_back({r.pid, ProcCommand(r.pid, proc), r.mapped, ""});
    } else if (auto seen = observed.find(f.key); seen != observed.end()) {
      for (pid_t pid : seen->second) {
        if (ProcessHolds(pid, f.key, proc)) seg.holders.push_back({pid, ProcCommand(pid, proc), false, ""});
      }
    }
    if (refs) {  // read by this scan (always when some file was unheld)
      for (const FileRef& r : refs->Of(f.key, f.path)) seg.holders.push_back({r.pid, "", false, r.what});
    }
    seg.state = SegmentState(verdicts, f.key, !seg.holders.empty() || held_keys.count(f.key) > 0);
    out.push_back(std::move(seg));
  }
  return out;
}

}  // namespace shmkeeper::node_scan_detail

// The observer's holders (observer.h): who holds a file probed held, from
// its events, the recent creators on its tmpfs, or the batched walk of /proc.
#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "node/observer.h"
#include "scan/proc_table.h"

namespace shmkeeper {
namespace {

// How long a holder walk's findings name the holders of other files on the
// same tmpfs (those a scan probes right after): long enough for one scan.
constexpr auto kWalkReuse = std::chrono::seconds(2);

}  // namespace

void Observer::Seed(const FileKey& key, const std::vector<pid_t>& pids) {
  MutexLock l(&mu_);
  inodes_[key].use.Seed(pids);
}

std::vector<pid_t> Observer::Holders(const FileKey& key) {
  std::vector<pid_t> candidates;
  {
    MutexLock l(&mu_);
    if (auto it = inodes_.find(key); it != inodes_.end())
      candidates.assign(it->second.use.pids().rbegin(), it->second.use.pids().rend());
    if (auto it = fs_.find(key.dev); it != fs_.end()) {
      const std::vector<pid_t>& creators = it->second.creators;
      for (auto p = creators.rbegin(); p != creators.rend(); ++p) {
        if (std::find(candidates.begin(), candidates.end(), *p) == candidates.end()) candidates.push_back(*p);
      }
    }
  }
  for (pid_t pid : candidates) {
    if (ProcessHolds(pid, key, opts_.proc)) return {pid};
  }
  return {};
}

std::optional<std::vector<pid_t>> Observer::WalkHolders(const FileKey& key) {
  {
    MutexLock l(&mu_);
    // A walk of this tmpfs a moment ago (this scan, most often) already
    // knows every process that held a file there.
    if (walked_at_ && walked_devs_.count(key.dev) && Now() - *walked_at_ < kWalkReuse) {
      auto it = walked_.find(key);
      return it == walked_.end() ? std::vector<pid_t>{} : it->second;
    }
    pending_walk_.insert(key);
    if (last_walk_ && Now() - *last_walk_ < opts_.holder_walk_every) return std::nullopt;
  }
  std::map<FileKey, std::vector<pid_t>> found = RunWalk();
  auto it = found.find(key);
  return it == found.end() ? std::vector<pid_t>{} : it->second;
}

void Observer::WalkIfDue() {
  {
    MutexLock l(&mu_);
    if (pending_walk_.empty() || (last_walk_ && Now() - *last_walk_ < opts_.holder_walk_every)) return;
  }
  RunWalk();
}

std::map<FileKey, std::vector<pid_t>> Observer::RunWalk() {
  std::set<FileKey> keys;
  {
    MutexLock l(&mu_);
    keys.swap(pending_walk_);
    last_walk_ = Now();
    counters_.holder_walks++;
  }
  std::map<FileKey, std::vector<pid_t>> found;
  if (keys.empty()) return found;
  // The holders of every file on those tmpfs (the same walk as for `keys`
  // alone): files of the same scan found held next need no walk of their own.
  std::set<dev_t> devs;
  for (const FileKey& k : keys) devs.insert(k.dev);
  for (const auto& [key, refs] : ScanProcesses(devs, opts_.proc).holders) {
    std::vector<pid_t>& pids = found[key];
    for (const HolderRef& r : refs) {
      if (std::find(pids.begin(), pids.end(), r.pid) == pids.end()) pids.push_back(r.pid);
    }
  }
  MutexLock l(&mu_);
  walked_at_ = Now();
  walked_devs_ = devs;
  walked_ = found;
  for (const FileKey& key : keys) {
    auto it = inodes_.find(key);
    if (it == inodes_.end()) continue;
    auto f = found.find(key);
    it->second.use.WalkFound(f == found.end() ? std::vector<pid_t>{} : f->second);
  }
  return found;
}

}  // namespace shmkeeper

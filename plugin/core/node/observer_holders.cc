// The observer's holders (observer.h): who holds a file probed held, from
// its events, the recent creators on its tmpfs, or the batched walk of /proc.
#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "node/observer.h"
#include "node/observer_internal.h"
#include "scan/proc_table.h"

namespace shmkeeper {
namespace {

using observer_internal::kMaxPids;
using observer_internal::Remember;

// How long a holder walk's findings name the holders of other files on the
// same tmpfs (those a scan probes right after): long enough for one scan.
constexpr auto kWalkReuse = std::chrono::seconds(2);

}  // namespace

void Observer::Seed(const FileKey& key, const std::vector<pid_t>& pids) {
  MutexLock l(&mu_);
  Inode& in = inodes_[key];
  for (pid_t pid : pids) {
    if (pid <= 0 || std::find(in.pids.begin(), in.pids.end(), pid) != in.pids.end()) continue;
    in.pids.insert(in.pids.begin(), pid);  // older than any pid an event names
    if (in.pids.size() > kMaxPids) in.pids.erase(in.pids.begin());
  }
}

std::vector<pid_t> Observer::Holders(const FileKey& key) {
  std::vector<pid_t> candidates;
  {
    MutexLock l(&mu_);
    if (auto it = inodes_.find(key); it != inodes_.end())
      candidates.assign(it->second.pids.rbegin(), it->second.pids.rend());
    if (auto it = creators_.find(key.dev); it != creators_.end()) {
      for (auto p = it->second.rbegin(); p != it->second.rend(); ++p) {
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
    Inode& in = it->second;
    auto f = found.find(key);
    if (f == found.end() || f->second.empty()) {
      // Held by no process /proc shows (a mount, a loop device, an O_PATH
      // or a lease's holder): probe it again, without a walk, so the scan
      // judges what holds it.
      if (in.holders_pending) in.dirty = true;
      in.walked_empty = true;
    } else {
      for (pid_t pid : f->second) Remember(&in.pids, pid, kMaxPids);
    }
    in.holders_pending = false;
  }
  return found;
}

}  // namespace shmkeeper

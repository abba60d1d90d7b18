// The observer's filesystems (observer.h): marking each tmpfs once per
// superblock, forgetting what was known under a device number, arming and
// disarming creates, pruning what the scan no longer sees.
#include <sys/stat.h>

#include <set>
#include <vector>

#include "node/observer.h"
#include "scan/fs_identity.h"

namespace shmkeeper {

bool Observer::Watch(int dir_fd, dev_t dev, bool* marked_now, Reopen reopen) {
  if (marked_now) *marked_now = false;
  Result<uint64_t> fsid = FilesystemId(dir_fd);
  std::optional<uint64_t> known;
  {
    MutexLock l(&mu_);
    if (auto it = watched_.find(dev); it != watched_.end()) known = it->second;
  }
  // The same number on another superblock (a new pod's tmpfs), or one whose
  // identity cannot be read: nothing known under the number is about it.
  if (known && (!fsid.ok() || *known != *fsid)) ForgetSuperblock(dev);
  {
    MutexLock l(&mu_);
    if (reopen) reopen_[dev] = std::move(reopen);  // the newest way in (a pod's access pid may change)
  }
  if (known && fsid.ok() && *known == *fsid) {
    Rearm(dir_fd, dev);  // before the caller lists the directory
    return true;
  }
  Status s = !fan_              ? Status::Precondition("observer not started")
             : !fsid.ok()       ? fsid.status()
             : opts_.mark_fault ? opts_.mark_fault(dev)
                                : Status::Ok();
  if (s.ok()) s = fan_->Mark(dir_fd, dev);
  {
    MutexLock l(&mu_);
    if (s.ok()) {
      watched_[dev] = *fsid;
      disarmed_.erase(dev);
      layout_[dev]++;  // a new mark: nothing measured before it counts
      if (unmarked_.erase(dev)) counters_.mark_retries++;
      if (marked_now) *marked_now = true;
      return true;
    }
    // Never a mode: the next Watch tries again; meanwhile its files are kept.
    unmarked_[dev] = fsid.ok() ? *fsid : 0;
    counters_.mark_failures++;
  }
  if (reporter_) {  // without the lock: the report logs through the agent's callback
    reporter_->Report(kObserverMarkErrors, "cannot observe the tmpfs of device " + std::to_string(dev) +
                                               " (its files are kept until a later scan marks it): " + s.message());
  }
  return false;
}

void Observer::ForgetSuperblock(dev_t dev) {
  // No batch of events is being applied meanwhile, and none read after this
  // names `dev` until the new superblock is marked.
  MutexLock one(&drain_mu_);
  if (fan_) fan_->Forget(dev);
  MutexLock l(&mu_);
  ForgetDeviceLocked(dev);
  layout_[dev]++;  // never the value a listing of the old superblock was cached under
  counters_.superblock_changes++;
}

void Observer::ForgetDeviceLocked(dev_t dev) {
  watched_.erase(dev);
  unmarked_.erase(dev);
  dev_floor_.erase(dev);
  all_uses_.erase(dev);
  disarmed_.erase(dev);
  arm_failed_.erase(dev);
  reopen_.erase(dev);
  to_disarm_.erase(dev);
  creators_.erase(dev);
  walked_devs_.erase(dev);
  std::erase_if(walked_, [dev](const auto& kv) { return kv.first.dev == dev; });
  std::erase_if(pending_walk_, [dev](const FileKey& k) { return k.dev == dev; });
  int64_t unmarked = 0;  // inode marks that went with their files (counted here: the lambda holds no lock)
  std::erase_if(inodes_, [&](const auto& kv) {
    if (kv.first.dev != dev) return false;
    if (kv.second.marked) unmarked++;
    return true;
  });
  counters_.inode_marks -= unmarked;
}

void Observer::Rearm(int dir_fd, dev_t dev) {
  Status s;
  bool first_failure = false;
  {
    MutexLock a(&arm_mu_);
    {
      MutexLock l(&mu_);
      if (!disarmed_.count(dev)) return;
    }
    s = opts_.mark_fault ? opts_.mark_fault(dev) : Status::Ok();
    if (s.ok()) s = fan_->Creates(dir_fd, true);
    MutexLock l(&mu_);
    layout_[dev]++;  // creates while disarmed were no events: the listing cache must not be reused
    if (s.ok()) {
      disarmed_.erase(dev);
      arm_failed_.erase(dev);
      counters_.rearms++;
      return;
    }
    first_failure = arm_failed_.insert(dev).second;
  }
  if (first_failure && reporter_) {  // without the locks: the report logs through the agent's callback
    reporter_->Report(kObserverMarkErrors, "cannot re-arm the create events of the tmpfs of device " +
                                               std::to_string(dev) + " (listed every scan): " + s.message());
  }
}

void Observer::Disarm(dev_t dev) {
  Reopen reopen;
  {
    MutexLock l(&mu_);
    auto it = reopen_.find(dev);
    if (!watched_.count(dev) || disarmed_.count(dev) || it == reopen_.end()) return;
    reopen = it->second;
  }
  Result<UniqueFd> fd = reopen();
  struct stat st;
  // Not that tmpfs any more (its pod's process gone, the pid reused, a new
  // superblock on the number): keep the creates armed (an event each,
  // nothing missed).
  if (!fd.ok() || ::fstat(fd->get(), &st) != 0 || st.st_dev != dev) return;
  Result<uint64_t> fsid = FilesystemId(fd->get());
  if (!fsid.ok()) return;
  MutexLock a(&arm_mu_);
  {
    MutexLock l(&mu_);
    auto w = watched_.find(dev);
    if (w == watched_.end() || w->second != *fsid || disarmed_.count(dev)) return;
  }
  if (!fan_->Creates(fd->get(), false).ok()) return;  // still armed: an event per create, nothing missed
  MutexLock l(&mu_);
  disarmed_.insert(dev);
  layout_[dev]++;
  counters_.disarms++;
}

std::optional<uint64_t> Observer::Layout(dev_t dev) const {
  MutexLock l(&mu_);
  if (!watched_.count(dev) || arm_failed_.count(dev)) return std::nullopt;
  auto it = layout_.find(dev);
  return it == layout_.end() ? 0 : it->second;
}

bool Observer::Watching(dev_t dev) const {
  MutexLock l(&mu_);
  return watched_.count(dev) > 0;
}

void Observer::Retain(const std::set<dev_t>& devs, const std::set<FileKey>& live) {
  std::vector<dev_t> gone;
  {
    MutexLock l(&mu_);
    for (const auto& [d, _] : watched_) {
      if (!devs.count(d)) gone.push_back(d);
    }
    std::set<dev_t> known;  // every device some fact is kept under
    for (const auto& [d, _] : unmarked_) known.insert(d);
    for (const auto& [d, _] : layout_) known.insert(d);
    for (const auto& [d, _] : reopen_) known.insert(d);
    for (const auto& [d, _] : creators_) known.insert(d);
    for (const auto& [d, _] : dev_floor_) known.insert(d);
    known.insert(gone.begin(), gone.end());
    known.insert(all_uses_.begin(), all_uses_.end());
    known.insert(disarmed_.begin(), disarmed_.end());
    known.insert(arm_failed_.begin(), arm_failed_.end());
    for (dev_t d : known) {
      if (devs.count(d)) continue;
      ForgetDeviceLocked(d);
      layout_.erase(d);  // the scanner's listing cache forgets it at the same point
    }
    int64_t unmarked = 0;  // inode marks that went with their files (counted here: the lambda holds no lock)
    std::erase_if(inodes_, [&](const auto& kv) {
      if (live.count(kv.first)) return false;
      if (kv.second.marked) unmarked++;
      return true;
    });
    counters_.inode_marks -= unmarked;
    std::erase_if(pending_walk_, [&](const FileKey& k) { return !live.count(k); });
  }
  // The mark stays with its superblock until that goes (a pod's tmpfs goes
  // with the pod); its events are ignored meanwhile.
  for (dev_t d : gone) fan_->Forget(d);
}

}  // namespace shmkeeper

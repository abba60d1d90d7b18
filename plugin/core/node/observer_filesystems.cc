// The observer's filesystems (observer.h): marking each tmpfs once per
// superblock, forgetting what was known under a device number, arming and
// disarming creates, pruning what the scan no longer sees.
#include <sys/stat.h>

#include <set>
#include <vector>

#include "node/observer.h"
#include "scan/fs_identity.h"

namespace shmkeeper {

const Observer::FsState* Observer::MarkedLocked(dev_t dev) const {
  auto it = fs_.find(dev);
  return it != fs_.end() && it->second.mark == FsState::Mark::kMarked ? &it->second : nullptr;
}

Observer::FsState* Observer::MarkedLocked(dev_t dev) {
  auto it = fs_.find(dev);
  return it != fs_.end() && it->second.mark == FsState::Mark::kMarked ? &it->second : nullptr;
}

bool Observer::Watch(int dir_fd, dev_t dev, bool* marked_now, Reopen reopen) {
  if (marked_now) *marked_now = false;
  Result<uint64_t> fsid = FilesystemId(dir_fd);
  std::optional<uint64_t> known;
  {
    MutexLock l(&mu_);
    if (const FsState* fs = MarkedLocked(dev)) known = fs->fsid;
  }
  // The same number on another superblock (a new pod's tmpfs), or one whose
  // identity cannot be read: nothing known under the number is about it.
  if (known && (!fsid.ok() || *known != *fsid)) ForgetSuperblock(dev);
  {
    MutexLock l(&mu_);
    if (reopen) fs_[dev].reopen = std::move(reopen);  // the newest way in (a pod's access pid may change)
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
    FsState& fs = fs_[dev];
    if (s.ok()) {
      if (fs.mark == FsState::Mark::kUnmarked) counters_.mark_retries++;
      fs.mark = FsState::Mark::kMarked;
      fs.fsid = *fsid;
      fs.creates = FsState::Creates::kArmed;
      fs.layout++;  // a new mark: nothing measured before it counts
      if (marked_now) *marked_now = true;
      return true;
    }
    // Never a mode: the next Watch tries again; meanwhile its files are kept.
    fs.mark = FsState::Mark::kUnmarked;
    fs.fsid = fsid.ok() ? *fsid : 0;
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
  fs_[dev].layout++;  // never the value a listing of the old superblock was cached under
  counters_.superblock_changes++;
}

void Observer::ForgetDeviceLocked(dev_t dev) {
  if (auto it = fs_.find(dev); it != fs_.end()) {
    FsState fresh;
    fresh.layout = it->second.layout;  // only ever moves on while the scan may hold a listing of it
    it->second = std::move(fresh);
  }
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
      const FsState* fs = MarkedLocked(dev);
      if (!fs || fs->creates == FsState::Creates::kArmed) return;
    }
    s = opts_.mark_fault ? opts_.mark_fault(dev) : Status::Ok();
    if (s.ok()) s = fan_->Creates(dir_fd, true);
    MutexLock l(&mu_);
    FsState& fs = fs_[dev];
    fs.layout++;  // creates while disarmed were no events: the listing cache must not be reused
    if (s.ok()) {
      fs.creates = FsState::Creates::kArmed;
      counters_.rearms++;
      return;
    }
    first_failure = fs.creates != FsState::Creates::kRearmFailed;
    fs.creates = FsState::Creates::kRearmFailed;
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
    const FsState* fs = MarkedLocked(dev);
    if (!fs || fs->creates != FsState::Creates::kArmed || !fs->reopen) return;
    reopen = fs->reopen;
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
    const FsState* fs = MarkedLocked(dev);
    if (!fs || fs->fsid != *fsid || fs->creates != FsState::Creates::kArmed) return;
  }
  if (!fan_->Creates(fd->get(), false).ok()) return;  // still armed: an event per create, nothing missed
  MutexLock l(&mu_);
  FsState& fs = fs_[dev];
  fs.creates = FsState::Creates::kDisarmed;
  fs.layout++;
  counters_.disarms++;
}

std::optional<uint64_t> Observer::Layout(dev_t dev) const {
  MutexLock l(&mu_);
  const FsState* fs = MarkedLocked(dev);
  if (!fs || fs->creates == FsState::Creates::kRearmFailed) return std::nullopt;
  return fs->layout;
}

bool Observer::Watching(dev_t dev) const {
  MutexLock l(&mu_);
  return MarkedLocked(dev) != nullptr;
}

void Observer::Retain(const std::set<dev_t>& devs, const std::set<FileKey>& live) {
  std::vector<dev_t> gone;
  {
    MutexLock l(&mu_);
    std::vector<dev_t> forget;
    for (const auto& [d, fs] : fs_) {
      if (devs.count(d)) continue;
      forget.push_back(d);
      if (fs.mark == FsState::Mark::kMarked) gone.push_back(d);
    }
    for (dev_t d : forget) {
      ForgetDeviceLocked(d);  // its files, its walk
      fs_.erase(d);           // and its record: the scanner's listing cache forgets it at the same point
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

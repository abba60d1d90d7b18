#include "node/snapshot_store.h"

namespace shmkeeper {

void SnapshotStore::Publish(std::shared_ptr<const NodeSnapshot> next) {
  std::shared_ptr<const NodeSnapshot> prev;
  {
    MutexLock l(&mu_);
    prev = snapshot_;
    snapshot_ = next;
  }
  events_->Publish(DiffSnapshots(prev.get(), *next));
  {
    MutexLock l(&mu_);
    scans_completed_++;
  }
  published_.SignalAll();
}

std::shared_ptr<const NodeSnapshot> SnapshotStore::Current() const {
  MutexLock l(&mu_);
  return snapshot_;
}

uint64_t SnapshotStore::scans_completed() const {
  MutexLock l(&mu_);
  return scans_completed_;
}

bool SnapshotStore::WaitForScan(uint64_t after, std::chrono::milliseconds timeout) const {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock l(&mu_);
  while (scans_completed_ <= after) {
    if (!published_.WaitUntil(&mu_, deadline)) return scans_completed_ > after;
  }
  return true;
}

}  // namespace shmkeeper

// The published NodeSnapshot: the one every query reads, replaced whole by
// each scan, and the count of publications tests and callers can wait on.
//
// Ownership: snapshots are immutable and shared; a reader keeps the one it got
// for as long as it holds the pointer. Borrows the EventHub the differences go
// to (it outlives the store).
// Thread-safety: every method may be called from any thread; Publish calls
// must be serialised by the caller (the agent's scan lock) so that each diff
// is between consecutive publications. Current() and scans_completed() block
// only on the store's mutex (held for a pointer copy); Publish also on the
// hub's mutex (never on a subscriber); WaitForScan until a publication or its
// timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "base/mutex.h"
#include "node/event_hub.h"
#include "node/node_scan.h"

namespace shmkeeper {

class SnapshotStore {
 public:
  explicit SnapshotStore(EventHub* events) : events_(events) {}

  // Makes `next` current, publishes the events between the previous snapshot
  // and `next` (DiffSnapshots), then counts the scan and wakes WaitForScan.
  void Publish(std::shared_ptr<const NodeSnapshot> next) SHMK_EXCLUDES(mu_);
  // The current snapshot; null until the first Publish.
  std::shared_ptr<const NodeSnapshot> Current() const SHMK_EXCLUDES(mu_);
  uint64_t scans_completed() const SHMK_EXCLUDES(mu_);
  // Waits until scans_completed() > `after` or `timeout` passed; returns
  // whether it did.
  bool WaitForScan(uint64_t after, std::chrono::milliseconds timeout) const SHMK_EXCLUDES(mu_);

 private:
  EventHub* const events_;
  mutable Mutex mu_;
  mutable CondVar published_;  // signalled after each Publish
  std::shared_ptr<const NodeSnapshot> snapshot_ SHMK_GUARDED_BY(mu_);
  uint64_t scans_completed_ SHMK_GUARDED_BY(mu_) = 0;
};

}  // namespace shmkeeper

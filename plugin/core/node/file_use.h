// One shm file's use as the observer knows it (observer.h): a pure model,
// with no lock, no kernel and no clock of its own. The Observer feeds it the
// kernel's events and its lease probes' results, with the time each happened
// (its injected Clock), under the Observer's mutex; the model says what the
// file's state is and whether a scan must probe it again. Unit-tested by
// synthetic inputs in every order that matters (tests/unit/file_use_test.cc).
//
// States (state()):
//   kUnprobed     no verdict yet: the next Check probes it.
//   kProbing      a lease probe began (ProbeBegan) and nothing happened since.
//   kProbingStale a probe runs, and an event (or a re-check, or the audit)
//                 came after it began: its verdict will be stale at once.
//   kHeld         the last probe said held, and nothing happened since.
//   kUnheld       the last probe said unheld, and nothing happened since.
//   kDirty        the last verdict (held(), kept for the answer) is stale:
//                 an event since, or its probe failed or found the name gone.
// A settled verdict (kHeld, kUnheld) is also stale, without a transition,
// when lost events put a floor at or after the probe's start: state(floor)
// reads it as kDirty (an overflow, or an event of its filesystem that names
// no inode; the floor is the Observer's, per filesystem, so that an overflow
// costs no walk of every file's record).
//
// Transitions (state × input -> state; "-" is no change):
//                  Unprobed  Probing       ProbingStale  Held     Unheld   Dirty
//   OnUse          -         ProbingStale  -             Dirty    Dirty    -
//   OnProberClose* -         ProbingStale  -             Dirty    -        -
//   MarkStale      -         ProbingStale  -             Dirty    Dirty    -
//   WalkFound(none)**  as MarkStale when its holders were pending, else -
//   ProbeBegan     Probing   Probing       Probing       Probing  Probing  Probing
//   ProbeEnded(v)  Dirty     v***          Dirty         Dirty    Dirty    Dirty
//   *   only once per real event (OnUse re-allows it): a prober's close may
//       have ended a probe of ours that overlapped it (ours then said held);
//       two agents never re-probe each other's probes forever.
//   **  the holder walk found no process: probe again, without a walk.
//   *** kHeld, kUnheld; kDirty when the probe failed (taken as held) or
//       found the name gone. From any state but kProbing the verdict is
//       already stale: an event came during the probe, or the record was
//       forgotten (a superblock change, Retain) and made afresh meanwhile.
// Besides the state: the time of the last use event (OnUse), the pids seen
// (at most kMaxPids, newest last), and the holders' search (holders()):
//   kUnasked     no walk is due for it;
//   kPending     held, no known process holds it: waits for the next holder
//                walk (ProbeEnded(.., pending)); WalkFound ends it;
//   kWalkedEmpty the walk found no process since the last use event: a held
//                verdict is not walked for again until OnUse.
//
// Thread-safety: none; the Observer calls it with its mutex held.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <vector>

#include "base/clock.h"

namespace shmkeeper {

class FileUse {
 public:
  using TimePoint = Clock::TimePoint;
  static constexpr size_t kMaxPids = 8;

  enum class State { kUnprobed, kProbing, kProbingStale, kHeld, kUnheld, kDirty };
  enum class Holders { kUnasked, kPending, kWalkedEmpty };
  // What a lease probe said (lease_probe.h), or that it failed.
  enum class Verdict { kHeld, kUnheld, kGone, kFailed };

  // Inputs.
  // An open or close by a process that is not a registered prober, at `now`
  // (`pid` <= 0: unknown).
  void OnUse(TimePoint now, pid_t pid);
  // A close by a registered prober (not use). True when it made the file
  // stale (a re-probe is due).
  bool OnProberClose();
  // The audit probes afresh; also the transition every staleness shares.
  void MarkStale();
  // A probe starts at `now` (the Observer calls it only when NeedsProbe).
  void ProbeBegan(TimePoint now);
  // The probe ended: its verdict, the holders it could name (remembered),
  // and whether the file now waits for the holder walk.
  void ProbeEnded(Verdict v, const std::vector<pid_t>& holders, bool holders_pending);
  // The holder walk's finding for this file (empty: no process holds it).
  void WalkFound(const std::vector<pid_t>& pids);
  // Holders of a file opened before its tmpfs was marked, as if their opens
  // had been seen (older than any an event names); no activity time.
  void Seed(const std::vector<pid_t>& pids);

  // Queries. `floor`: the time before which the file's filesystem lost events.
  State state() const { return state_; }
  State state(std::optional<TimePoint> floor) const;
  // True when a Check must probe (anything but a settled verdict).
  bool NeedsProbe(std::optional<TimePoint> floor) const;
  // The settled verdict (held or not), if any (the audit's "event-derived").
  std::optional<bool> Settled(std::optional<TimePoint> floor) const;
  // "Dirty" as the audit reads it after a drain: a use or staleness since.
  bool stale() const { return state_ == State::kUnprobed || state_ == State::kProbingStale || state_ == State::kDirty; }
  bool held() const { return held_; }  // the last verdict (true before any)
  // The last use event, or `floor` when later ("unheld since"); none when
  // neither.
  std::optional<TimePoint> LastActivity(std::optional<TimePoint> floor) const;
  const std::vector<pid_t>& pids() const { return pids_; }
  Holders holders() const { return holders_; }
  bool prober_closed() const { return prober_closed_; }

 private:
  void Remember(pid_t pid);

  State state_ = State::kUnprobed;
  bool held_ = true;
  TimePoint probed_at_{};              // when the last probe began
  std::optional<TimePoint> last_use_;  // the last OnUse
  std::vector<pid_t> pids_;            // newest last
  Holders holders_ = Holders::kUnasked;
  bool prober_closed_ = false;  // a registered prober closed it since the last probe began
  bool rechecked_ = false;      // made stale by a prober's close since the last use event
};

}  // namespace shmkeeper

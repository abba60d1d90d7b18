// The reclaim protocol (reclaim.h) and the Reclaimer (reclaimer.h) directly
// (issue 35): on real files in a temporary directory of a real tmpfs
// (/dev/shm), with real leases, and time on a FakeClock: the settle is a wait
// on the clock, so a test sees the file in quarantine while the protocol
// waits, acts on it then (opens it, lets the deadline pass) and advances the
// clock to let the protocol decide. No sleeps: each run that must not wait is
// checked to end without an Advance (a real-time guard against a hang only).
#include "node/reclaim.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <functional>
#include <future>
#include <string>
#include <vector>

#include "base/clock.h"
#include "node/event_hub.h"
#include "node/quarantine.h"
#include "node/reclaimer.h"
#include "scan/fs_identity.h"
#include "support/temp_dir.h"

namespace shmkeeper {
namespace {

constexpr auto kSettle = std::chrono::milliseconds(20);  // reclaim.cc's

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

class ReclaimTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(dir_.ok()); }

  // A file of `bytes` in the directory, as a reclaimable leak of a host pod.
  LeakRecord File(const std::string& name, int64_t bytes = 4096) {
    std::string path = dir_ / name;
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    EXPECT_GE(fd, 0) << path;
    EXPECT_EQ(::ftruncate(fd, bytes), 0);
    struct stat st {};
    EXPECT_EQ(::fstat(fd, &st), 0);
    Result<uint64_t> fsid = FilesystemId(fd);
    ::close(fd);
    LeakRecord l;
    l.pod = {PodKind::kHost, "", dir_.path(), "host:" + dir_.path()};
    l.path = path;
    l.rel = name;
    l.host_dir = dir_.path();
    l.bytes = bytes;
    l.key = {st.st_dev, st.st_ino};
    l.fsid = fsid.ok() ? *fsid : 0;
    l.state = LeakState::kLeaked;
    l.reclaimable = true;
    l.creator_source = "record";
    l.creator_dead = true;
    return l;
  }
  std::string Quarantined(const LeakRecord& l) const { return dir_ / QuarantineName(l.rel, l.key.ino); }

  // Runs `reclaim` on its own thread; it must wait on the clock (the
  // settle): `during` runs then, with the claims in quarantine, and the
  // clock is advanced to the settle's end (`during` may advance it part way).
  ReclaimOutcome Settled(std::function<ReclaimOutcome()> reclaim, const std::function<void()>& during) {
    uint64_t waits = clock_.Waits();
    const Clock::TimePoint start = clock_.Now();
    std::future<ReclaimOutcome> run = std::async(std::launch::async, std::move(reclaim));
    if (!clock_.AwaitWaits(waits + 1)) {
      ADD_FAILURE() << "the protocol never waited on the clock";
      return run.get();
    }
    during();
    clock_.Advance(start + kSettle - clock_.Now());
    if (run.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      ADD_FAILURE() << "the protocol waited longer than the settle";
      clock_.Advance(std::chrono::hours(1));
    }
    return run.get();
  }
  ReclaimOutcome ReclaimSettled(
      const std::vector<LeakRecord>& leaks, Deadline deadline = Deadline::max(),
      const std::function<void()>& during = [] {}) {
    return Settled([this, leaks, deadline] { return ReclaimLeaks(leaks, false, "/proc", "", deadline, &clock_); },
                   during);
  }
  // Runs `reclaim`, which must end without waiting on the clock.
  ReclaimOutcome NoWait(std::function<ReclaimOutcome()> reclaim) {
    std::future<ReclaimOutcome> run = std::async(std::launch::async, std::move(reclaim));
    if (run.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      ADD_FAILURE() << "the protocol waited on the clock where it had nothing to settle";
      clock_.Advance(std::chrono::hours(1));
    }
    return run.get();
  }
  ReclaimOutcome ReclaimNoWait(const std::vector<LeakRecord>& leaks, bool dry_run,
                               Deadline deadline = Deadline::max()) {
    return NoWait(
        [this, leaks, dry_run, deadline] { return ReclaimLeaks(leaks, dry_run, "/proc", "", deadline, &clock_); });
  }

  test::TempDir dir_{"/dev/shm/shmk-reclaim-test-"};
  FakeClock clock_;
};

// ---- the protocol (ReclaimLeaks) --------------------------------------------

TEST_F(ReclaimTest, AnUnheldFileIsRemovedOnlyAfterTheSettle) {
  LeakRecord l = File("torch_1_0", 8192);
  bool quarantined_while_waiting = false, present_while_waiting = false;
  ReclaimOutcome out = ReclaimSettled({l}, Deadline::max(), [&] {
    quarantined_while_waiting = Exists(Quarantined(l)) && !Exists(l.path);
    // Not quite the settle: the protocol waits on, the file still there.
    uint64_t waits = clock_.Waits();
    clock_.Advance(kSettle - std::chrono::nanoseconds(1));
    ASSERT_TRUE(clock_.AwaitWaits(waits + 1)) << "the settle ended early";
    present_while_waiting = Exists(Quarantined(l));
  });
  EXPECT_TRUE(quarantined_while_waiting) << "the file was not under its quarantine name during the settle";
  EXPECT_TRUE(present_while_waiting) << "the file went before the settle was over";
  ASSERT_EQ(out.reclaimed.size(), 1u);
  EXPECT_TRUE(out.skipped.empty());
  EXPECT_EQ(out.freed_bytes, 8192);
  EXPECT_EQ(out.raced, 0);
  EXPECT_FALSE(Exists(l.path));
  EXPECT_FALSE(Exists(Quarantined(l)));
}

TEST_F(ReclaimTest, AnOpenDuringTheSettleKeepsTheFileUnderItsName) {
  LeakRecord l = File("torch_2_0");
  int err = 0;
  ReclaimOutcome out = ReclaimSettled({l}, Deadline::max(), [&] {
    // An open that looked the old name up before the rename: it reaches the
    // inode and breaks the lease (non-blocking: it fails, but breaks it).
    int fd = ::open(Quarantined(l).c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    err = fd < 0 ? errno : 0;
    if (fd >= 0) ::close(fd);
  });
  EXPECT_EQ(err, EWOULDBLOCK) << "the claim held no lease";
  EXPECT_TRUE(out.reclaimed.empty());
  ASSERT_EQ(out.skipped.size(), 1u);
  EXPECT_EQ(out.skipped[0].reason, SkipReason::kOpened) << out.skipped[0].message;
  EXPECT_TRUE(Exists(l.path)) << "a kept file was not renamed back";
  EXPECT_FALSE(Exists(Quarantined(l)));
}

TEST_F(ReclaimTest, AFileSomeoneHoldsIsNeverClaimed) {
  LeakRecord held = File("torch_3_0"), free = File("torch_4_0");
  int fd = ::open(held.path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  // The free one is the positive control: the same run removes it.
  ReclaimOutcome out = ReclaimSettled({held, free});
  ::close(fd);
  ASSERT_EQ(out.skipped.size(), 1u);
  EXPECT_EQ(out.skipped[0].leak.path, held.path);
  EXPECT_EQ(out.skipped[0].reason, SkipReason::kHeld);
  EXPECT_TRUE(out.skipped[0].lease_refused) << "a refused lease was not said so (Scanner::NoteLeaseRefused)";
  ASSERT_EQ(out.reclaimed.size(), 1u);
  EXPECT_EQ(out.reclaimed[0].path, free.path);
  EXPECT_TRUE(Exists(held.path));
  EXPECT_FALSE(Exists(free.path));
}

TEST_F(ReclaimTest, NothingToSettleNothingWaitedFor) {
  LeakRecord held = File("torch_5_0");
  int fd = ::open(held.path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  LeakRecord young = File("torch_6_0");
  young.reclaimable = false;
  ReclaimOutcome out = ReclaimNoWait({held, young}, false);
  ::close(fd);
  ASSERT_EQ(out.skipped.size(), 2u);
  EXPECT_EQ(out.skipped[0].reason, SkipReason::kVerdict) << "not a candidate, yet tried";
  EXPECT_EQ(out.skipped[1].reason, SkipReason::kHeld);
  EXPECT_EQ(clock_.Waits(), 0u);
  EXPECT_TRUE(Exists(held.path));
  EXPECT_TRUE(Exists(young.path));
}

TEST_F(ReclaimTest, ADryRunChecksButRenamesAndWaitsForNothing) {
  LeakRecord l = File("torch_7_0", 100);
  ReclaimOutcome out = ReclaimNoWait({l}, /*dry_run=*/true);
  ASSERT_EQ(out.reclaimed.size(), 1u) << "a dry run did not say it would remove the file";
  EXPECT_EQ(out.freed_bytes, 100);
  EXPECT_EQ(clock_.Waits(), 0u);
  EXPECT_TRUE(Exists(l.path));
  EXPECT_FALSE(Exists(Quarantined(l)));
}

TEST_F(ReclaimTest, AnotherInodeOrASecondNameIsKept) {
  LeakRecord changed = File("torch_8_0"), linked = File("torch_9_0");
  changed.key.ino += 1000000;  // the scan saw another file under that name
  ASSERT_EQ(::link(linked.path.c_str(), (dir_ / "second-name").c_str()), 0);
  ReclaimOutcome out = ReclaimNoWait({changed, linked}, false);
  ASSERT_EQ(out.skipped.size(), 2u);
  EXPECT_EQ(out.skipped[0].reason, SkipReason::kChanged);
  EXPECT_EQ(out.skipped[1].reason, SkipReason::kLinked);
  EXPECT_TRUE(Exists(changed.path));
  EXPECT_TRUE(Exists(linked.path));
}

TEST_F(ReclaimTest, ADeadlinePassedBeforeTheClaimQuarantinesNothing) {
  LeakRecord l = File("torch_10_0");
  ReclaimOutcome out = ReclaimNoWait({l}, false, clock_.Now());
  ASSERT_EQ(out.skipped.size(), 1u);
  EXPECT_EQ(out.skipped[0].reason, SkipReason::kDeadline);
  EXPECT_TRUE(Exists(l.path));
  EXPECT_FALSE(Exists(Quarantined(l)));
}

TEST_F(ReclaimTest, ADeadlineThatPassesDuringTheSettleKeepsTheFile) {
  LeakRecord late = File("torch_11_0"), in_time = File("torch_12_0");
  // Passes 1 ns before the settle ends: the removal is refused.
  ReclaimOutcome out = ReclaimSettled({late}, clock_.Now() + kSettle - std::chrono::nanoseconds(1));
  ASSERT_EQ(out.skipped.size(), 1u);
  EXPECT_EQ(out.skipped[0].reason, SkipReason::kDeadline);
  EXPECT_TRUE(Exists(late.path)) << "a file kept for the deadline was not renamed back";
  EXPECT_FALSE(Exists(Quarantined(late)));
  // Positive control: a deadline 1 ns after the settle ends lets it go.
  out = ReclaimSettled({in_time}, clock_.Now() + kSettle + std::chrono::nanoseconds(1));
  ASSERT_EQ(out.reclaimed.size(), 1u);
  EXPECT_FALSE(Exists(in_time.path));
}

// ---- the Reclaimer ----------------------------------------------------------

class ReclaimerTest : public ReclaimTest {
 protected:
  Reporter::Log Log() {
    return [this](LogLevel, const std::string& line) { lines_.push_back(line); };
  }
  EventHub hub_;
  std::vector<std::string> lines_;
};

TEST_F(ReclaimerTest, AutoRemovesWhatIsDueAndSaysSo) {
  Reclaimer r("", false, &hub_, Log(), &clock_);
  std::unique_ptr<EventHub::Subscription> sub = hub_.Subscribe();
  NodeSnapshot snap;
  LeakRecord due = File("torch_20_0", 4096), opted_out = File("torch_21_0"), young = File("torch_22_0");
  opted_out.reclaim_opt_out = true;
  young.reclaimable = false;
  snap.leaks = {due, opted_out, young};
  ReclaimOutcome out = Settled([&] { return r.Auto(snap, LeakReclaim::kAuto); }, [] {});
  ASSERT_EQ(out.reclaimed.size(), 1u);
  EXPECT_EQ(out.reclaimed[0].path, due.path);
  EXPECT_TRUE(out.skipped.empty()) << "what is not due is no candidate";
  EXPECT_FALSE(Exists(due.path));
  EXPECT_TRUE(Exists(opted_out.path)) << "a pod's opt-out was ignored";
  EXPECT_TRUE(Exists(young.path));
  EXPECT_EQ(r.reclaimed_total(), 1);
  EXPECT_EQ(r.reclaimed_bytes_total(), 4096);
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0].rfind("reclaimed " + due.path + " of ", 0), 0u) << lines_[0];
  std::vector<AgentEvent> events = sub->Next(std::chrono::milliseconds(0));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, EventKind::kLeakReclaimed);
  EXPECT_EQ(events[0].path, due.path);
}

TEST_F(ReclaimerTest, AutoDoesNothingWhenTheNodeSaysSoOrIsReadOnly) {
  NodeSnapshot snap;
  LeakRecord l = File("torch_23_0");
  snap.leaks = {l};
  Reclaimer reporting("", false, &hub_, Log(), &clock_);
  EXPECT_TRUE(NoWait([&] { return reporting.Auto(snap, LeakReclaim::kReport); }).reclaimed.empty());
  Reclaimer read_only("", true, &hub_, Log(), &clock_);
  EXPECT_TRUE(NoWait([&] { return read_only.Auto(snap, LeakReclaim::kAuto); }).reclaimed.empty());
  EXPECT_TRUE(Exists(l.path));
  EXPECT_EQ(read_only.reclaimed_total(), 0);
}

TEST_F(ReclaimerTest, RequestTakesTheListedPathsAndCountsWhatItKept) {
  Reclaimer r("", false, &hub_, Log(), &clock_);
  NodeSnapshot snap;
  LeakRecord asked = File("torch_24_0"), other = File("torch_25_0"), held = File("torch_26_0");
  snap.leaks = {asked, other, held};
  int fd = ::open(held.path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  // A dry run: checked, nothing counted, nothing announced.
  ReclaimOutcome dry = NoWait([&] { return r.Request(snap, true, "", "", {asked.path, held.path}); });
  EXPECT_EQ(dry.reclaimed.size(), 1u);
  EXPECT_TRUE(r.counters().kept.empty()) << "a dry run counted";
  ReclaimOutcome out = Settled(
      [&] {
        return r.Request(snap, false, "", "", {asked.path, held.path}, Deadline::max());
      },
      [] {});
  ::close(fd);
  ASSERT_EQ(out.reclaimed.size(), 1u);
  EXPECT_EQ(out.reclaimed[0].path, asked.path);
  EXPECT_TRUE(Exists(other.path)) << "a path not asked for was removed";
  EXPECT_TRUE(Exists(held.path));
  ReclaimCounters c = r.counters();
  EXPECT_EQ(c.kept[SkipReason::kHeld], 1);
  EXPECT_EQ(c.errors, 0);
  EXPECT_EQ(r.reclaimed_total(), 1);
}

}  // namespace
}  // namespace shmkeeper

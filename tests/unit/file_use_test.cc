// The observer's per-file model (node/file_use.h) driven by synthetic inputs,
// without root or a kernel, in the orders that matter: an event during a
// probe, an overflow during a probe, a close during a holder walk, a
// superblock change during a probe, a prober's close of a held file; each
// with its positive control (a quiet file is unheld since its last event).
// Time is a FakeClock's, advanced by the test.
#include "node/file_use.h"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <vector>

#include "base/clock.h"

namespace shmkeeper {
namespace {

using std::chrono::seconds;
using State = FileUse::State;
using Verdict = FileUse::Verdict;
using Holders = FileUse::Holders;
using TimePoint = FileUse::TimePoint;

class FileUseTest : public ::testing::Test {
 protected:
  TimePoint Tick(seconds d = seconds(1)) {
    clock_.Advance(d);
    return clock_.Now();
  }
  // A probe from start to end with nothing in between.
  void Probe(FileUse* f, Verdict v, std::vector<pid_t> holders = {}, bool pending = false) {
    ASSERT_TRUE(f->NeedsProbe(floor_));
    f->ProbeBegan(clock_.Now());
    f->ProbeEnded(v, holders, pending);
  }

  FakeClock clock_;
  std::optional<TimePoint> floor_;  // the filesystem's lost-events floor
};

TEST_F(FileUseTest, AQuietFileIsUnheldSinceItsLastEvent) {
  FileUse f;
  EXPECT_EQ(f.state(), State::kUnprobed);
  EXPECT_TRUE(f.NeedsProbe(floor_));
  TimePoint used = Tick();
  f.OnUse(used, 42);
  EXPECT_EQ(f.state(), State::kUnprobed) << "an event before the first probe changes no verdict";
  Tick();
  Probe(&f, Verdict::kUnheld);
  EXPECT_EQ(f.state(), State::kUnheld);
  EXPECT_FALSE(f.held());
  EXPECT_FALSE(f.NeedsProbe(floor_));
  Tick(seconds(30));
  EXPECT_EQ(f.state(floor_), State::kUnheld) << "nothing happened: the cached verdict stands";
  EXPECT_EQ(f.LastActivity(floor_), used);
  EXPECT_EQ(f.Settled(floor_), false);
  EXPECT_EQ(f.pids(), std::vector<pid_t>{42});
}

TEST_F(FileUseTest, AFileNeverUsedSinceItsProbeHasNoActivityTime) {
  FileUse f;
  Probe(&f, Verdict::kUnheld);
  EXPECT_EQ(f.state(), State::kUnheld);
  EXPECT_FALSE(f.LastActivity(floor_).has_value());
}

TEST_F(FileUseTest, UseAfterASettledVerdictMakesItDirtyAndMovesUnheldSince) {
  FileUse f;
  Probe(&f, Verdict::kUnheld);
  TimePoint used = Tick();
  f.OnUse(used, 7);
  EXPECT_EQ(f.state(), State::kDirty);
  EXPECT_TRUE(f.NeedsProbe(floor_));
  EXPECT_FALSE(f.Settled(floor_).has_value());
  Tick();
  Probe(&f, Verdict::kUnheld);
  EXPECT_EQ(f.state(), State::kUnheld);
  EXPECT_EQ(f.LastActivity(floor_), used);
}

TEST_F(FileUseTest, AnEventDuringAProbeLeavesItsVerdictStale) {
  FileUse f;
  TimePoint began = Tick();
  f.ProbeBegan(began);
  EXPECT_EQ(f.state(), State::kProbing);
  // The file is opened and closed after the lease was tried (the probe
  // said unheld), before the probe's result is recorded.
  TimePoint used = Tick();
  f.OnUse(used, 9);
  EXPECT_EQ(f.state(), State::kProbingStale);
  f.ProbeEnded(Verdict::kUnheld, {}, false);
  EXPECT_EQ(f.state(), State::kDirty) << "the verdict from before the event was taken as settled";
  EXPECT_TRUE(f.NeedsProbe(floor_)) << "a file used during its probe must be probed again";
  EXPECT_FALSE(f.Settled(floor_).has_value());
  EXPECT_EQ(f.LastActivity(floor_), used) << "unheld since the event, never since before it";
  // The re-probe settles it (positive control: a probe with nothing during it).
  Tick();
  Probe(&f, Verdict::kUnheld);
  EXPECT_EQ(f.state(), State::kUnheld);
  EXPECT_EQ(f.LastActivity(floor_), used);
}

TEST_F(FileUseTest, AnOverflowDuringAProbeLeavesItsVerdictStale) {
  FileUse f;
  f.ProbeBegan(Tick());
  floor_ = Tick();  // events lost while the probe ran
  f.ProbeEnded(Verdict::kUnheld, {}, false);
  EXPECT_EQ(f.state(), State::kUnheld) << "the stored state: the floor is applied when read";
  EXPECT_EQ(f.state(floor_), State::kDirty);
  EXPECT_TRUE(f.NeedsProbe(floor_));
  EXPECT_EQ(f.LastActivity(floor_), floor_) << "unheld since the overflow at the earliest";
  // Re-probed after the floor: settled again, still unheld since the floor.
  Tick();
  Probe(&f, Verdict::kUnheld);
  EXPECT_FALSE(f.NeedsProbe(floor_));
  EXPECT_EQ(f.LastActivity(floor_), floor_);
}

TEST_F(FileUseTest, AnOverflowAtTheProbesStartIsStaleToo) {
  // The floor equal to the probe's start (a coarse clock): the safe side.
  FileUse f;
  TimePoint t = Tick();
  f.ProbeBegan(t);
  f.ProbeEnded(Verdict::kUnheld, {}, false);
  EXPECT_FALSE(f.NeedsProbe(floor_));
  floor_ = t;
  EXPECT_TRUE(f.NeedsProbe(floor_));
  // An overflow before the probe began does not make it stale (control).
  floor_ = t - seconds(1);
  EXPECT_FALSE(f.NeedsProbe(floor_));
  EXPECT_EQ(f.LastActivity(floor_), floor_);
}

TEST_F(FileUseTest, ASuperblockChangeDuringAProbeInheritsNothing) {
  // The Observer forgets every record of the device (a new superblock has
  // its number) while a probe of one of its files runs; the probe's result
  // lands on a fresh record.
  FileUse old;
  TimePoint used = Tick();
  old.OnUse(used, 5);
  old.ProbeBegan(Tick());
  FileUse fresh;  // what the Observer makes after the forget
  fresh.ProbeEnded(Verdict::kUnheld, {}, false);
  EXPECT_EQ(fresh.state(), State::kDirty) << "a verdict about the old superblock's file was taken as settled";
  EXPECT_TRUE(fresh.NeedsProbe(floor_));
  EXPECT_FALSE(fresh.LastActivity(floor_).has_value()) << "the old file's activity was inherited";
  EXPECT_TRUE(fresh.pids().empty());
  // Its own first probe settles it.
  Tick();
  Probe(&fresh, Verdict::kUnheld);
  EXPECT_EQ(fresh.state(), State::kUnheld);
}

TEST_F(FileUseTest, AFailedProbeIsHeldAndProbedAgain) {
  FileUse f;
  Probe(&f, Verdict::kFailed);
  EXPECT_EQ(f.state(), State::kDirty);
  EXPECT_TRUE(f.held()) << "a probe that failed is taken as held";
  EXPECT_TRUE(f.NeedsProbe(floor_));
}

TEST_F(FileUseTest, AGoneNameIsUnheldAndProbedAgain) {
  FileUse f;
  Probe(&f, Verdict::kGone);
  EXPECT_EQ(f.state(), State::kDirty);
  EXPECT_FALSE(f.held());
}

TEST_F(FileUseTest, AProbersCloseOfAHeldFileReprobesItOncePerRealEvent) {
  FileUse f;
  Probe(&f, Verdict::kHeld, {11});
  ASSERT_EQ(f.state(), State::kHeld);
  // Another agent's probe overlapped ours: its close makes it stale once.
  EXPECT_TRUE(f.OnProberClose());
  EXPECT_EQ(f.state(), State::kDirty);
  EXPECT_FALSE(f.LastActivity(floor_).has_value()) << "a prober's close is not use";
  Tick();
  Probe(&f, Verdict::kHeld);  // overlapped again
  EXPECT_FALSE(f.OnProberClose()) << "two agents would re-probe each other's probes forever";
  EXPECT_EQ(f.state(), State::kHeld) << "the safe direction: held until the next real event";
  EXPECT_TRUE(f.prober_closed());
  // A real event allows one more re-check.
  TimePoint used = Tick();
  f.OnUse(used, 12);
  Tick();
  Probe(&f, Verdict::kHeld);
  EXPECT_FALSE(f.prober_closed()) << "the probe's start forgets the previous prober close";
  EXPECT_TRUE(f.OnProberClose());
  EXPECT_EQ(f.state(), State::kDirty);
}

TEST_F(FileUseTest, AProbersCloseOfAnUnheldFileChangesNothing) {
  FileUse f;
  Probe(&f, Verdict::kUnheld);
  EXPECT_FALSE(f.OnProberClose());
  EXPECT_EQ(f.state(), State::kUnheld);
}

TEST_F(FileUseTest, AProbersCloseDuringAProbeMakesItsVerdictStale) {
  FileUse f;
  f.ProbeBegan(Tick());
  EXPECT_TRUE(f.OnProberClose());
  EXPECT_EQ(f.state(), State::kProbingStale);
  f.ProbeEnded(Verdict::kHeld, {}, false);
  EXPECT_EQ(f.state(), State::kDirty);
  EXPECT_TRUE(f.NeedsProbe(floor_));
}

TEST_F(FileUseTest, AHeldFileWaitsForTheWalkWhichNamesItsHolder) {
  FileUse f;
  Probe(&f, Verdict::kHeld, {}, /*pending=*/true);
  EXPECT_EQ(f.state(), State::kHeld);
  EXPECT_EQ(f.holders(), Holders::kPending);
  f.WalkFound({77});
  EXPECT_EQ(f.holders(), Holders::kUnasked);
  EXPECT_EQ(f.state(), State::kHeld) << "a walk that names the holder changes no verdict";
  EXPECT_EQ(f.pids(), std::vector<pid_t>{77});
}

TEST_F(FileUseTest, AWalkThatFindsNoHolderReprobesWithoutAWalkUntilTheNextEvent) {
  FileUse f;
  Probe(&f, Verdict::kHeld, {}, /*pending=*/true);
  f.WalkFound({});
  EXPECT_EQ(f.holders(), Holders::kWalkedEmpty);
  EXPECT_EQ(f.state(), State::kDirty) << "probe it again: the scan judges what holds it";
  Tick();
  Probe(&f, Verdict::kHeld);
  EXPECT_EQ(f.holders(), Holders::kWalkedEmpty) << "no walk for it again before an event";
  f.OnUse(Tick(), 3);
  EXPECT_EQ(f.holders(), Holders::kUnasked);
}

TEST_F(FileUseTest, ACloseDuringAHolderWalkIsNotLost) {
  // Held, waiting for the walk; its holder closes it while the walk runs
  // (the event is applied before the walk's finding), and the walk finds
  // no holder.
  FileUse f;
  Probe(&f, Verdict::kHeld, {}, /*pending=*/true);
  TimePoint closed = Tick();
  f.OnUse(closed, 21);
  EXPECT_EQ(f.state(), State::kDirty);
  EXPECT_EQ(f.holders(), Holders::kPending) << "an event does not end the wait for the walk";
  f.WalkFound({});
  EXPECT_EQ(f.state(), State::kDirty) << "the close is still to be probed";
  EXPECT_EQ(f.LastActivity(floor_), closed) << "unheld since the close, not before";
  Tick();
  Probe(&f, Verdict::kUnheld);
  EXPECT_EQ(f.state(), State::kUnheld);
  EXPECT_EQ(f.LastActivity(floor_), closed);
}

TEST_F(FileUseTest, TheAuditProbesAfresh) {
  FileUse f;
  Probe(&f, Verdict::kHeld);
  EXPECT_EQ(f.Settled(floor_), true);
  f.MarkStale();
  EXPECT_EQ(f.state(), State::kDirty);
  EXPECT_TRUE(f.stale());
  EXPECT_TRUE(f.held()) << "the stale verdict is kept for the answer";
}

TEST_F(FileUseTest, SeededHoldersAreOlderThanEventsAndBounded) {
  FileUse f;
  f.OnUse(Tick(), 100);
  f.Seed({1, 2, 100});
  EXPECT_EQ(f.pids(), (std::vector<pid_t>{2, 1, 100}));
  EXPECT_EQ(f.state(), State::kUnprobed) << "a seed is no activity and no probe";
  for (pid_t p = 200; p < 220; ++p) f.OnUse(Tick(), p);
  EXPECT_EQ(f.pids().size(), FileUse::kMaxPids);
  EXPECT_EQ(f.pids().back(), 219);
}

}  // namespace
}  // namespace shmkeeper

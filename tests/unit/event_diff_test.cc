// DiffSnapshots: the events between two published snapshots, without an agent.
#include <gtest/gtest.h>

#include "node/event_hub.h"

namespace shmkeeper {
namespace {

PodRecord Pod(const std::string& uid, int64_t size, int64_t used) {
  PodRecord p;
  p.key.kind = PodKind::kKubernetes;
  p.key.ns = "ml";
  p.key.name = "pod-" + uid;
  p.key.uid = uid;
  p.size_bytes = size;
  p.used_bytes = used;
  return p;
}

LeakRecord Leak(const std::string& uid, const std::string& path, LeakState state) {
  LeakRecord l;
  l.pod = Pod(uid, 0, 0).key;
  l.path = path;
  l.state = state;
  l.bytes = 4096;
  return l;
}

std::vector<EventKind> Kinds(const std::vector<AgentEvent>& events) {
  std::vector<EventKind> out;
  for (const AgentEvent& e : events) out.push_back(e.kind);
  return out;
}

TEST(DiffSnapshotsTest, TheFirstScanAnnouncesNoPodButItsUsageAndLeaks) {
  NodeSnapshot first;
  first.pods = {Pod("a", 100, 10), Pod("b", 100, 96)};
  first.leaks = {Leak("a", "/dev/shm/x", LeakState::kLeaked), Leak("a", "/dev/shm/y", LeakState::kUnheld)};
  std::vector<AgentEvent> events = DiffSnapshots(nullptr, first);
  // b is over 80% and 95% at first sight; only the leaked verdict is news.
  EXPECT_EQ(Kinds(events),
            (std::vector<EventKind>{EventKind::kUsageHigh, EventKind::kUsageHigh, EventKind::kLeakFound}));
  EXPECT_EQ(events[0].threshold_percent, 80);
  EXPECT_EQ(events[1].threshold_percent, 95);
  EXPECT_EQ(events[2].path, "/dev/shm/x");
  EXPECT_EQ(events[2].pod.uid, "a");
}

TEST(DiffSnapshotsTest, StartsStopsResizesAndCrossings) {
  NodeSnapshot prev, next;
  prev.pods = {Pod("a", 100, 10), Pod("gone", 100, 0), Pod("hot", 100, 85)};
  next.pods = {Pod("a", 200, 10), Pod("new", 100, 0), Pod("hot", 100, 85)};
  std::vector<AgentEvent> events = DiffSnapshots(&prev, next);
  EXPECT_EQ(Kinds(events),
            (std::vector<EventKind>{EventKind::kResizeApplied, EventKind::kPodStarted, EventKind::kPodStopped}));
  EXPECT_EQ(events[0].bytes, 200);
  EXPECT_EQ(events[1].message, "ml/pod-new started");
  EXPECT_EQ(events[2].message, "ml/pod-gone stopped");
  // Still over 80% is no news; crossing 95% is.
  next.pods = {Pod("hot", 100, 99)};
  prev.pods = {Pod("hot", 100, 85)};
  events = DiffSnapshots(&prev, next);
  ASSERT_EQ(Kinds(events), (std::vector<EventKind>{EventKind::kUsageHigh}));
  EXPECT_EQ(events[0].threshold_percent, 95);
}

TEST(DiffSnapshotsTest, ALeakIsAnnouncedOnceAndAnUnsizedPodNeverCrosses) {
  NodeSnapshot prev, next;
  prev.pods = next.pods = {Pod("a", 0, 1 << 20)};  // size unknown: no percentage
  next.leaks = {Leak("a", "/dev/shm/x", LeakState::kLeaked)};
  EXPECT_EQ(Kinds(DiffSnapshots(&prev, next)), (std::vector<EventKind>{EventKind::kLeakFound}));
  prev.leaks = next.leaks;
  EXPECT_TRUE(DiffSnapshots(&prev, next).empty());
  // A held segment becoming leaked again later is news again.
  prev.leaks = {Leak("a", "/dev/shm/x", LeakState::kHeld)};
  EXPECT_EQ(Kinds(DiffSnapshots(&prev, next)), (std::vector<EventKind>{EventKind::kLeakFound}));
}

TEST(DiffSnapshotsTest, APodGoingOverTheFilesLimitIsAnnouncedOnce) {
  PodRecord under = Pod("a", 100, 0), over = Pod("a", 100, 0);
  over.files_over_limit = true;
  over.files_limit = 10000;
  over.files = 600001;
  NodeSnapshot prev, next;
  prev.pods = {under};
  next.pods = {over};
  std::vector<AgentEvent> events = DiffSnapshots(&prev, next);
  ASSERT_EQ(Kinds(events), (std::vector<EventKind>{EventKind::kFilesOverLimit}));
  EXPECT_EQ(events[0].pod.uid, "a");
  EXPECT_NE(events[0].message.find("more than 10000 files (agent.maxFilesPerPod)"), std::string::npos)
      << events[0].message;
  EXPECT_STREQ(EventKindName(EventKind::kFilesOverLimit), "files_over_limit");
  // Still over: no news; over at first sight: news.
  prev.pods = {over};
  EXPECT_TRUE(DiffSnapshots(&prev, next).empty());
  EXPECT_EQ(Kinds(DiffSnapshots(nullptr, next)), (std::vector<EventKind>{EventKind::kFilesOverLimit}));
  // Back under and over again: news again.
  prev.pods = {under};
  EXPECT_EQ(Kinds(DiffSnapshots(&prev, next)), (std::vector<EventKind>{EventKind::kFilesOverLimit}));
}

}  // namespace
}  // namespace shmkeeper

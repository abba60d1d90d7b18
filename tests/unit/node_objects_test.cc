// Direct tests of the engine's objects through their public headers (issue
// 35: SnapshotStore, pod_query, Reclaimer's choice of what is due), no
// kernel, no agent, no sleeping: each fails if the behaviour it names breaks.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "node/event_hub.h"
#include "node/pod_query.h"
#include "node/reclaimer.h"
#include "node/snapshot_store.h"

namespace shmkeeper {
namespace {

PodRecord Pod(const std::string& ns, const std::string& name, const std::string& uid,
              const std::vector<std::string>& container_ids = {}) {
  PodRecord p;
  p.key = {PodKind::kKubernetes, ns, name, uid};
  for (const std::string& id : container_ids) {
    ContainerRecord c;
    c.id = id;
    p.containers.push_back(c);
  }
  return p;
}

LeakRecord Leak(const PodKey& pod, const std::string& path, LeakState state) {
  LeakRecord l;
  l.pod = pod;
  l.path = path;
  l.state = state;
  l.reclaimable = state == LeakState::kLeaked;
  return l;
}

// ---- SnapshotStore ----------------------------------------------------------

TEST(SnapshotStoreTest, NothingIsCurrentBeforeTheFirstPublish) {
  EventHub hub;
  SnapshotStore store(&hub);
  EXPECT_EQ(store.Current(), nullptr);
  EXPECT_EQ(store.scans_completed(), 0u);
  EXPECT_FALSE(store.WaitForScan(0, std::chrono::milliseconds(0)));
}

TEST(SnapshotStoreTest, PublishReplacesTheSnapshotWholeAndCountsIt) {
  EventHub hub;
  SnapshotStore store(&hub);
  auto first = std::make_shared<NodeSnapshot>();
  first->pods.push_back(Pod("ns", "a", "uid-a"));
  store.Publish(first);
  std::shared_ptr<const NodeSnapshot> held = store.Current();
  auto second = std::make_shared<NodeSnapshot>();
  store.Publish(second);
  EXPECT_EQ(store.Current(), second);
  EXPECT_EQ(store.scans_completed(), 2u);
  ASSERT_EQ(held->pods.size(), 1u) << "a reader's snapshot changed under it";
  EXPECT_TRUE(store.WaitForScan(1, std::chrono::milliseconds(0)));
  EXPECT_FALSE(store.WaitForScan(2, std::chrono::milliseconds(0)));
}

TEST(SnapshotStoreTest, APublishWakesAWaiter) {
  EventHub hub;
  SnapshotStore store(&hub);
  bool woke = false;
  std::thread waiter([&] { woke = store.WaitForScan(0, std::chrono::hours(1)); });
  store.Publish(std::make_shared<NodeSnapshot>());
  waiter.join();  // an hour's timeout: only the publication ends it in time
  EXPECT_TRUE(woke);
}

TEST(SnapshotStoreTest, PublishSendsTheDifferenceToSubscribers) {
  EventHub hub;
  SnapshotStore store(&hub);
  store.Publish(std::make_shared<NodeSnapshot>());
  std::unique_ptr<EventHub::Subscription> sub = hub.Subscribe();
  auto next = std::make_shared<NodeSnapshot>();
  next->pods.push_back(Pod("ns", "a", "uid-a"));
  store.Publish(next);
  std::vector<AgentEvent> events = sub->Next(std::chrono::milliseconds(0));
  ASSERT_FALSE(events.empty()) << "a pod that appeared was not announced";
  EXPECT_EQ(events.front().kind, EventKind::kPodStarted);
  EXPECT_TRUE(sub->Next(std::chrono::milliseconds(0)).empty());
}

// ---- pod_query --------------------------------------------------------------

TEST(PodQueryTest, NoSnapshotIsAPreconditionNotAnEmptyList) {
  Result<std::vector<PodRecord>> pods = QueryPods(nullptr, {});
  ASSERT_FALSE(pods.ok());
  EXPECT_EQ(pods.status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(QueryPod(nullptr, "uid", "", "").status().code(), Code::kFailedPrecondition);
  EXPECT_TRUE(QueryLeaks(nullptr, "", "").empty());
}

TEST(PodQueryTest, PodsByNamespaceAndByLeaks) {
  NodeSnapshot snap;
  snap.pods = {Pod("a", "x", "1"), Pod("b", "y", "2"), Pod("a", "z", "3")};
  snap.pods[2].leaked_bytes = 10;
  Result<std::vector<PodRecord>> in_a = QueryPods(&snap, {"a", "", false});
  ASSERT_TRUE(in_a.ok());
  ASSERT_EQ(in_a->size(), 2u);
  EXPECT_EQ((*in_a)[0].key.name, "x");
  Result<std::vector<PodRecord>> leaking = QueryPods(&snap, {"", "", true});
  ASSERT_TRUE(leaking.ok());
  ASSERT_EQ(leaking->size(), 1u);
  EXPECT_EQ(leaking->front().key.uid, "3");
  EXPECT_FALSE(QueryPods(&snap, {"", "a in (", false}).ok()) << "a bad selector was accepted";
}

TEST(PodQueryTest, OnePodByUidNameOrContainerPrefix) {
  NodeSnapshot snap;
  snap.pods = {Pod("a", "x", "uid-1", {"abcdef0123"}), Pod("", "plain", "uid-2", {"abcd9999"})};
  EXPECT_EQ(QueryPod(&snap, "uid-2", "", "")->key.name, "plain");
  EXPECT_EQ(QueryPod(&snap, "", "a/x", "")->key.uid, "uid-1");
  EXPECT_EQ(QueryPod(&snap, "", "plain", "")->key.uid, "uid-2") << "a pod without a namespace is its name";
  EXPECT_EQ(QueryPod(&snap, "", "", "abcdef")->key.uid, "uid-1");
  Result<PodRecord> both = QueryPod(&snap, "", "", "abcd");
  EXPECT_FALSE(both.ok()) << "an ambiguous prefix chose a pod";
  EXPECT_EQ(QueryPod(&snap, "", "", "abc").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(QueryPod(&snap, "nope", "", "").status().code(), Code::kNotFound);
  EXPECT_EQ(QueryPod(&snap, "", "", "").status().code(), Code::kInvalidArgument);
}

TEST(PodQueryTest, LeaksByNamespaceAndPodNameOrUid) {
  NodeSnapshot snap;
  PodKey a{PodKind::kKubernetes, "a", "x", "uid-1"}, b{PodKind::kKubernetes, "b", "x", "uid-2"};
  snap.leaks = {Leak(a, "/dev/shm/1", LeakState::kLeaked), Leak(b, "/dev/shm/2", LeakState::kUnheld)};
  EXPECT_EQ(QueryLeaks(&snap, "", "").size(), 2u);
  EXPECT_EQ(QueryLeaks(&snap, "", "x").size(), 2u);
  ASSERT_EQ(QueryLeaks(&snap, "b", "x").size(), 1u);
  EXPECT_EQ(QueryLeaks(&snap, "b", "x").front().path, "/dev/shm/2");
  EXPECT_EQ(QueryLeaks(&snap, "", "uid-1").size(), 1u);
  EXPECT_TRUE(QueryLeaks(&snap, "c", "").empty());
}

}  // namespace
}  // namespace shmkeeper

// Agent-only mode and the agent's view of Kubernetes pods: the pod memory
// limit from the CRI, CRI labels, runtime-root warnings, and the inotify
// watcher that wakes the agent for a new container.
#include "node/reconcile.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "base/fileutil.h"
#include "node/node_events.h"
#include "support/temp_dir.h"

namespace shmkeeper {
namespace {

namespace fs = std::filesystem;

TEST(MemoryLimitFromSandboxInfo, ContainerdKubeletConfig) {
  // containerd's verbose PodSandboxStatus info["info"] (abridged): the
  // kubelet's PodSandboxConfig in Go's JSON, and the sandbox's OCI spec.
  std::optional<MemoryLimit> l = MemoryLimitFromSandboxInfo(
      R"({"pid":1,"config":{"metadata":{"name":"p"},"linux":{"resources":{"cpu_period":100000,)"
      R"("memory_limit_in_bytes":1073741824}}},"runtimeSpec":{"annotations":{}}})");
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->bytes, int64_t{1} << 30);
  EXPECT_EQ(l->source, "cri:PodSandboxStatus");
}

TEST(MemoryLimitFromSandboxInfo, RuntimeSpecAnnotations) {
  std::optional<MemoryLimit> l = MemoryLimitFromSandboxInfo(
      R"({"config":{"linux":{}},"runtimeSpec":{"annotations":{"io.kubernetes.cri.sandbox-memory":"536870912"}}})");
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->bytes, int64_t{512} << 20);
  EXPECT_EQ(l->source, "cri:PodSandboxStatus");
  // CRI-O: the pod resources annotation on the infra container's spec.
  l = MemoryLimitFromSandboxInfo(
      R"({"runtimeSpec":{"annotations":{"io.kubernetes.cri-o.PodLinuxResources":"{\"memory_limit_in_bytes\":2147483648}"}}})");
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->bytes, int64_t{2} << 30);
}

TEST(MemoryLimitFromSandboxInfo, AbsentOrHostileIsNone) {
  for (const char* text :
       {"", "not json", "[]", "{}", R"({"config":{"linux":{"resources":{"memory_limit_in_bytes":0}}}})",
        R"({"config":{"linux":{"resources":{"memory_limit_in_bytes":-5}}}})",
        R"({"config":{"linux":{"resources":{"memory_limit_in_bytes":"1Gi"}}}})", R"({"config":{"linux":7}})",
        R"({"config":"x","runtimeSpec":[1]})",
        R"({"runtimeSpec":{"annotations":{"io.kubernetes.cri.sandbox-memory":"0"}}})"}) {
    EXPECT_FALSE(MemoryLimitFromSandboxInfo(text).has_value()) << text;
  }
}

TEST(LabelPodsFromCri, ByUidThenByName) {
  std::vector<PodRecord> pods(3);
  pods[0].key = {PodKind::kKubernetes, "ml", "trainer", "uid-1"};
  pods[1].key = {PodKind::kKubernetes, "ml", "other", ""};
  pods[2].key = {PodKind::kContainer, "", "plain", "abc"};
  pods[0].labels["keep"] = "mine";
  CriSandbox a;
  a.uid = "uid-1";
  a.ns = "ml";
  a.name = "trainer";
  a.ready = true;
  a.labels = {{"app", "trainer"}, {"keep", "cri"}};
  CriSandbox b;
  b.ns = "ml";
  b.name = "other";
  b.ready = true;
  b.labels = {{"app", "other"}};
  CriSandbox c;
  c.uid = "abc";
  c.labels = {{"app", "plain"}};
  LabelPodsFromCri({a, b, c}, &pods);
  EXPECT_EQ(pods[0].labels.at("app"), "trainer");
  EXPECT_EQ(pods[0].labels.at("keep"), "mine");
  EXPECT_EQ(pods[1].labels.at("app"), "other");
  EXPECT_TRUE(pods[2].labels.empty());  // not a Kubernetes pod
}

class InTempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    dir_ = tmp_.path();
  }
  void Touch(const std::string& path) {
    fs::create_directories(fs::path(path).parent_path());
    ASSERT_TRUE(WriteFileAtomic(path, "{}", 0644, false).ok());
  }
  test::TempDir tmp_{"/tmp/shmk-reconcile-"};
  std::string dir_;
};

using RuntimeRootWarningsTest = InTempDir;

TEST_F(RuntimeRootWarningsTest, NamesNamespaceDirectoriesAndUnknownLayoutsWithTheFix) {
  std::string good = dir_ + "/good", ns = dir_ + "/runc", odd = dir_ + "/odd", empty = dir_ + "/empty";
  Touch(good + "/c1/state.json");
  Touch(ns + "/k8s.io/c2/state.json");
  Touch(odd + "/readme.txt");
  fs::create_directories(empty);
  std::vector<std::string> w = RuntimeRootWarnings({good, ns, odd, empty, dir_ + "/missing"});
  ASSERT_EQ(w.size(), 2u) << ::testing::PrintToString(w);
  EXPECT_NE(w[0].find("runtime root " + ns + " holds namespace directories"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find(ns + "/k8s.io"), std::string::npos) << w[0];
  EXPECT_NE(w[1].find("runtime root " + odd + " holds no container state"), std::string::npos) << w[1];
  EXPECT_NE(w[1].find("agent.runtimeRoots"), std::string::npos) << w[1];
}

// crun keeps <root>/<id>/status, not runc's state.json: its root (podman's
// /run/crun) and a namespace directory above crun containers are known.
TEST_F(RuntimeRootWarningsTest, CrunStatusIsContainerState) {
  std::string crun = dir_ + "/crun", ns = dir_ + "/crun-ns";
  Touch(crun + "/c1/status");
  Touch(ns + "/k8s.io/c2/status");
  std::vector<std::string> w = RuntimeRootWarnings({crun, ns});
  ASSERT_EQ(w.size(), 1u) << ::testing::PrintToString(w);
  EXPECT_NE(w[0].find("runtime root " + ns + " holds namespace directories"), std::string::npos) << w[0];
}

using ChangeWatcherTest = InTempDir;

// The first container after the runtime root is created wakes the agent:
// the root appears, the container's directory appears, then its state.json.
TEST_F(ChangeWatcherTest, SeesTheFirstContainerOfARootCreatedLater) {
  std::atomic<int> changes{0};
  ChangeWatcher w([&] { ++changes; });
  ASSERT_TRUE(w.Start().ok());
  std::string root = dir_ + "/runc/k8s.io";
  w.SetPaths({}, {root});
  auto wait_change = [&](int from) {
    for (int i = 0; i < 200 && changes.load() == from; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return changes.load() > from;
  };
  int n = changes;
  fs::create_directories(dir_ + "/runc");
  ASSERT_TRUE(wait_change(n)) << "parent of the root";
  n = changes;
  fs::create_directories(root);
  ASSERT_TRUE(wait_change(n)) << "the root itself";
  n = changes;
  fs::create_directories(root + "/c1");
  ASSERT_TRUE(wait_change(n)) << "the container directory";
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  n = changes;
  Touch(root + "/c1/state.json");  // runc: a temp file renamed into place
  EXPECT_TRUE(wait_change(n)) << "state.json inside the container directory";
}

}  // namespace
}  // namespace shmkeeper

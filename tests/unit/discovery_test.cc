#include "node/discovery.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/json.h"
#include "support/temp_dir.h"

namespace shmkeeper {
namespace {

namespace fs = std::filesystem;

const std::string kId(64, 'a');
const std::string kPod(64, 'b');

void Write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

class DiscoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    dir_ = tmp_.path();
  }
  test::TempDir tmp_{"/tmp/shmk-discovery-"};
  fs::path dir_;
};

// A live podman pod's infra container as crun keeps it: <root>/<id>/status,
// the bundle in podman's storage, the name in containers.json.
TEST_F(DiscoveryTest, CrunStatusAndPodmanNamesAndPods) {
  fs::path bundle = dir_ / "storage" / "overlay-containers" / kId / "userdata";
  Write(dir_ / "crun" / kId / "status", DumpJson(Json{{"pid", ::getpid()}, {"bundle", bundle.string()}}));
  Json spec = {{"ociVersion", "1.0.2"},
               {"hostname", "train"},
               {"annotations", {{"io.container.manager", "libpod"}, {"shmkeeper.io/shm-size", "1Gi"}}},
               {"linux", {{"cgroupsPath", "/libpod_parent/" + kPod + "/libpod-" + kId}}},
               {"mounts", Json::array({{{"destination", "/dev/shm"},
                                        {"type", "bind"},
                                        {"source", (bundle / "shm").string()},
                                        {"options", Json::array({"bind"})}}})}};
  Write(bundle / "config.json", DumpJson(spec));
  Write(dir_ / "storage" / "overlay-containers" / "containers.json",
        DumpJson(Json::array({{{"id", kId}, {"names", Json::array({"bbbbbbbbbbbb-infra"})}}})));
  std::vector<ContainerRecord> found = DiscoverContainers({(dir_ / "crun").string()});
  ASSERT_EQ(found.size(), 1u);
  const ContainerRecord& c = found[0];
  EXPECT_EQ(c.id, kId);
  EXPECT_EQ(c.pid, ::getpid());
  EXPECT_EQ(c.name, "bbbbbbbbbbbb-infra");
  EXPECT_EQ(c.pod_id, kPod);
  EXPECT_EQ(c.pod_name, "train");
  EXPECT_TRUE(c.owns_shm);
  EXPECT_EQ(c.requested_bytes, int64_t{1} << 30);
  // A member binds the infra's tmpfs: no pod name, and its own request is not the pod's.
  std::string member(64, 'c');
  fs::path mbundle = dir_ / "storage" / "overlay-containers" / member / "userdata";
  Write(dir_ / "crun" / member / "status", DumpJson(Json{{"pid", ::getpid()}, {"bundle", mbundle.string()}}));
  spec["linux"]["cgroupsPath"] = "/libpod_parent/" + kPod + "/libpod-" + member;
  Write(mbundle / "config.json", DumpJson(spec));
  found = DiscoverContainers({(dir_ / "crun").string()});
  ASSERT_EQ(found.size(), 2u);
  const ContainerRecord& m = found[0].id == member ? found[0] : found[1];
  EXPECT_EQ(m.pod_id, kPod);
  EXPECT_EQ(m.pod_name, "");
  EXPECT_FALSE(m.owns_shm);
  EXPECT_EQ(m.requested_bytes, 0);
}

// The agent's discovery reuses what it parsed only while the files are the
// same: a rewritten config.json or sizing record is read again, a rename in
// podman's storage shows, a gone container is forgotten.
TEST_F(DiscoveryTest, CachedDiscoveryRereadsWhatChanged) {
  fs::path bundle = dir_ / "storage" / "overlay-containers" / kId / "userdata";
  Write(dir_ / "crun" / kId / "status", DumpJson(Json{{"pid", ::getpid()}, {"bundle", bundle.string()}}));
  Json spec = {{"ociVersion", "1.0.2"},
               {"annotations", {{"io.container.manager", "libpod"}, {"shmkeeper.io/shm-size", "1Gi"}}}};
  Write(bundle / "config.json", DumpJson(spec));
  fs::path storage = dir_ / "storage" / "overlay-containers" / "containers.json";
  Write(storage, DumpJson(Json::array({{{"id", kId}, {"names", Json::array({"first"})}}})));
  ContainerDiscovery d;
  std::vector<std::string> roots = {(dir_ / "crun").string()};
  std::vector<ContainerRecord> found = d.Discover(roots);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].requested_bytes, int64_t{1} << 30);
  EXPECT_EQ(found[0].name, "first");
  EXPECT_EQ(d.Discover(roots)[0].requested_bytes, int64_t{1} << 30);  // from the cache: same answer
  // A new config.json (another size; runtimes replace it: a new inode).
  spec["annotations"]["shmkeeper.io/shm-size"] = "2Gi";
  fs::remove(bundle / "config.json");
  Write(bundle / "config.json", DumpJson(spec));
  found = d.Discover(roots);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].requested_bytes, int64_t{2} << 30);
  // A rename in podman's storage, written in place.
  Write(storage, DumpJson(Json::array({{{"id", kId}, {"names", Json::array({"second-name"})}}})));
  EXPECT_EQ(d.Discover(roots)[0].name, "second-name");
  // The container's init process is another one now (start time): skipped, cached or not.
  Write(dir_ / "crun" / kId / "status",
        DumpJson(Json{{"pid", ::getpid()}, {"bundle", bundle.string()}, {"process-start-time", 1}}));
  EXPECT_TRUE(d.Discover(roots).empty());
  fs::remove_all(dir_ / "crun" / kId);
  EXPECT_TRUE(d.Discover(roots).empty());
}

TEST(Podman, PodIdAndStorageFile) {
  EXPECT_EQ(PodmanPodId("/libpod_parent/" + kPod + "/libpod-" + kId), kPod);
  EXPECT_EQ(PodmanPodId("machine.slice:machine-libpod_pod_" + kPod + ".slice:libpod:" + kId), kPod);
  EXPECT_EQ(PodmanPodId("/libpod_parent/libpod-" + kId), "");
  EXPECT_EQ(PodmanPodId("/libpod_parent/NOTHEX/libpod-x"), "");
  EXPECT_EQ(PodmanPodId(""), "");
  EXPECT_EQ(PodmanStorageFile("/s/vfs-containers/" + kId + "/userdata", kId), "/s/vfs-containers/containers.json");
  EXPECT_EQ(PodmanStorageFile("/run/containerd/x/" + kId, kId), "");
  EXPECT_EQ(PodmanStorageFile("/userdata", ""), "");
}

}  // namespace
}  // namespace shmkeeper

#include "shmkeeper/shm_plan.h"

#include <gtest/gtest.h>

#include <functional>

#include "fake_os.h"
#include "shmkeeper/size.h"

namespace shmkeeper {
namespace {

constexpr const char* kId = "abc123";

// Builds a spec with a Docker-private tmpfs (size option given) plus extras.
Json PrivateSpec(const std::string& size_opt = "size=67108864") {
  Json opts = Json::array({"nosuid", "noexec", "nodev", "mode=1777"});
  if (!size_opt.empty()) opts.push_back(size_opt);
  return Json{
      {"process", {{"env", Json::array({"PATH=/bin"})}}},
      {"mounts",
       Json::array({Json{{"destination", "/dev/shm"}, {"type", "tmpfs"}, {"source", "shm"}, {"options", opts}}})},
      {"linux", {{"namespaces", Json::array({Json{{"type", "ipc"}}})}}}};
}

Json BindSpec(const std::string& source) {
  Json s = PrivateSpec();
  s["mounts"][0] = Json{{"destination", "/dev/shm"},
                        {"type", "bind"},
                        {"source", source},
                        {"options", Json::array({"rbind", "rprivate"})}};
  return s;
}

Spec Make(const Json& j) { return std::move(Spec::Parse(j.dump(), "/b/config.json")).value(); }

struct Case {
  const char* name;
  std::function<void(Json&)> edit;
  Config config;
  ShmAction action;
  int64_t new_bytes;
  const char* source;
};

Config WithPolicy(std::optional<int64_t> def, std::optional<int64_t> max, OverMax over = OverMax::kReject) {
  Config c;
  c.shm.default_bytes = def;
  c.shm.max_bytes = max;
  c.shm.over_max = over;
  return c;
}

void Ann(Json& j, const char* k, const char* v) { j["annotations"][k] = v; }
void Env(Json& j, const std::string& kv) { j["process"]["env"].push_back(kv); }

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class PlanPrecedence : public ::testing::TestWithParam<Case> {};

TEST_P(PlanPrecedence, Decides) {
  const Case& c = GetParam();
  Json j = PrivateSpec();
  c.edit(j);
  FakeOs os;  // 16 GiB host
  Result<ShmPlan> plan = PlanShm(Make(j), c.config, kId, os);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->action, c.action);
  EXPECT_EQ(plan->new_bytes, c.new_bytes);
  EXPECT_EQ(plan->source, c.source);
  EXPECT_EQ(plan->old_bytes, Make(j).MountSizeOption(0));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PlanPrecedence,
    ::testing::Values(
        Case{"auto_is_half_of_host_ram", [](Json&) {}, Config(), ShmAction::kResize, 8 * kGiB, "policy"},
        Case{"auto_is_memory_limit", [](Json& j) { j["linux"]["resources"]["memory"]["limit"] = 3 * kGiB; }, Config(),
             ShmAction::kResize, 3 * kGiB, "policy"},
        Case{"policy_default", [](Json&) {}, WithPolicy(kGiB, std::nullopt), ShmAction::kResize, kGiB, "policy"},
        Case{"policy_default_equal_to_engine_keeps", [](Json&) {}, WithPolicy(64 * kMiB, std::nullopt),
             ShmAction::kKeep, 64 * kMiB, "policy"},
        Case{"auto_clamped_to_max", [](Json&) {}, WithPolicy(std::nullopt, 2 * kGiB), ShmAction::kResize, 2 * kGiB,
             "policy"},
        Case{"env", [](Json& j) { Env(j, "SHMKEEPER_SHM_SIZE=512m"); }, Config(), ShmAction::kResize, 512 * kMiB,
             "env:SHMKEEPER_SHM_SIZE"},
        Case{"crio_legacy_over_env",
             [](Json& j) {
               Env(j, "SHMKEEPER_SHM_SIZE=512m");
               Ann(j, "io.kubernetes.cri-o.ShmSize", "256Mi");
             },
             Config(), ShmAction::kResize, 256 * kMiB, "annotation:io.kubernetes.cri-o.ShmSize"},
        Case{"crio_over_crio_legacy",
             [](Json& j) {
               Ann(j, "io.kubernetes.cri-o.ShmSize", "256Mi");
               Ann(j, "shm-size.crio.io", "1Gi");
             },
             Config(), ShmAction::kResize, kGiB, "annotation:shm-size.crio.io"},
        Case{"shmkeeper_annotation_first",
             [](Json& j) {
               Ann(j, "shm-size.crio.io", "1Gi");
               Ann(j, "shmkeeper.io/shm-size", "2Gi");
               Env(j, "SHMKEEPER_SHM_SIZE=512m");
               j["mounts"][0]["options"][4] = "size=4294967296";
             },
             Config(), ShmAction::kResize, 2 * kGiB, "annotation:shmkeeper.io/shm-size"},
        Case{"explicit_engine_size_respected", [](Json& j) { j["mounts"][0]["options"][4] = "size=67108865"; },
             Config(), ShmAction::kKeep, 67108865, "engine"},
        Case{"over_max_clamped", [](Json& j) { Ann(j, "shmkeeper.io/shm-size", "4Gi"); },
             WithPolicy(std::nullopt, kGiB, OverMax::kClamp), ShmAction::kResize, kGiB,
             "annotation:shmkeeper.io/shm-size"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Plan, UserErrorsNameKeyValueAndLimit) {
  FakeOs os;
  struct Bad {
    std::function<void(Json&)> edit;
    Config config;
    const char* expect;
  } cases[] = {
      {[](Json& j) { Ann(j, "shmkeeper.io/shm-size", "lots"); }, Config(),
       "annotation shmkeeper.io/shm-size: invalid size \"lots\""},
      {[](Json& j) { Ann(j, "shm-size.crio.io", "1Gix"); }, Config(),
       "annotation shm-size.crio.io: invalid size \"1Gix\""},
      {[](Json& j) { Env(j, "SHMKEEPER_SHM_SIZE=-5"); }, Config(), "env SHMKEEPER_SHM_SIZE: invalid size \"-5\""},
      {[](Json& j) { Ann(j, "shmkeeper.io/shm-size", "4Gi"); }, WithPolicy(std::nullopt, kGiB),
       "shm size annotation shmkeeper.io/shm-size=\"4Gi\" (4GiB) is over the node's shm.max 1GiB (shm.overMax: "
       "reject)"},
      {[](Json& j) { j["mounts"][0]["options"][4] = "size=4294967296"; }, WithPolicy(std::nullopt, kGiB),
       "shm size engine=\"4GiB\" (4GiB) is over the node's shm.max 1GiB"},
      {[](Json& j) { Ann(j, "shmkeeper.io/shm-size", "64Gi"); }, Config(), "over the node's shm.max 16GiB"},
  };
  for (const Bad& b : cases) {
    Json j = PrivateSpec();
    b.edit(j);
    Result<ShmPlan> plan = PlanShm(Make(j), b.config, kId, os);
    ASSERT_FALSE(plan.ok()) << b.expect;
    EXPECT_TRUE(plan.status().IsUserError());
    EXPECT_NE(plan.status().message().find(b.expect), std::string::npos) << plan.status().message();
  }
}

TEST(Plan, UnmanagedShapesAreSkippedWithReason) {
  FakeOs os;
  struct Shape {
    std::function<void(Json&)> edit;
    const char* why;
  } cases[] = {
      {[](Json& j) { j["linux"]["namespaces"] = Json::array(); }, "host IPC namespace"},
      {[](Json& j) { j["mounts"] = Json::array(); }, "no /dev/shm mount"},
      {[](Json& j) { j["mounts"][0]["source"] = "tmpfs"; }, "user-supplied tmpfs"},
      {[](Json& j) { j = BindSpec("/dev/shm"); }, "host's"},
      {[](Json& j) { j = BindSpec("/var/lib/docker/containers/OTHER/mounts/shm"); }, "does not own"},
      {[](Json& j) { j = BindSpec("/data/shm"); }, "does not own"},
      {[](Json& j) { j["mounts"][0]["type"] = "proc"; }, "mount type proc"},
  };
  for (const Shape& s : cases) {
    Json j = PrivateSpec();
    s.edit(j);
    Ann(j, "shmkeeper.io/shm-size", "lots");  // never parsed when unmanaged
    Result<ShmPlan> plan = PlanShm(Make(j), Config(), kId, os);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    EXPECT_EQ(plan->action, ShmAction::kSkip);
    EXPECT_NE(plan->reason.find(s.why), std::string::npos) << plan->reason;
  }
}

TEST(Plan, DockerShareableRemountsOwnTmpfs) {
  FakeOs os;
  std::string src = std::string("/var/lib/docker/containers/") + kId + "/mounts/shm";
  os.fs[src] = FsInfo{true, true, 64 * kMiB, kMiB, 0};
  Json j = BindSpec(src);
  Env(j, "SHMKEEPER_SHM_SIZE=1g");
  Spec spec = Make(j);
  Result<ShmPlan> plan = PlanShm(spec, Config(), kId, os);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->target.shape, ShmShape::kHostTmpfs);
  EXPECT_EQ(plan->action, ShmAction::kResize);
  ASSERT_TRUE(ApplyShm(*plan, &spec, os).ok());
  EXPECT_EQ(os.remounted[src], kGiB);
}

TEST(Plan, ContainerdSandboxRemountsPodTmpfs) {
  FakeOs os;
  std::string src = "/run/containerd/io.containerd.grpc.v1.cri/sandboxes/sb1/shm";
  os.fs[src] = FsInfo{true, true, 64 * kMiB, 0, 0};
  Json j = BindSpec(src);
  Ann(j, "io.kubernetes.cri.container-type", "sandbox");
  Ann(j, "io.kubernetes.cri.sandbox-id", "sb1");
  Ann(j, "shmkeeper.io/shm-size", "2Gi");
  Result<ShmPlan> plan = PlanShm(Make(j), Config(), "sb1", os);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->target.shape, ShmShape::kHostTmpfs);
  EXPECT_EQ(plan->new_bytes, 2 * kGiB);
  // A workload container of the same pod binds the same tmpfs but does not own it.
  j["annotations"]["io.kubernetes.cri.container-type"] = "container";
  plan = PlanShm(Make(j), Config(), "ctr1", os);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->action, ShmAction::kSkip);
}

// podman's own default (65536k) is "asked for nothing"; Docker's 64 MiB under
// podman is a user's --shm-size=64m and is kept, and the other way round.
TEST(Plan, EachEngineDefaultLetsThePolicyDecide) {
  std::string src = std::string("/var/lib/containers/storage/overlay-containers/") + kId + "/userdata/shm";
  struct {
    const char* manager;
    int64_t engine_bytes;
    ShmAction action;
    const char* source;
  } cases[] = {{"libpod", kPodmanDefaultShmBytes, ShmAction::kResize, "policy"},
               {"libpod", 64 * kMiB, ShmAction::kKeep, "engine"},
               {"", 64 * kMiB, ShmAction::kResize, "policy"},
               {"", kPodmanDefaultShmBytes, ShmAction::kKeep, "engine"}};
  for (const auto& c : cases) {
    FakeOs os;
    os.fs[src] = FsInfo{true, true, c.engine_bytes, 0, 0};
    Json j = BindSpec(src);
    if (*c.manager) Ann(j, "io.container.manager", c.manager);
    Result<ShmPlan> plan = PlanShm(Make(j), WithPolicy(kGiB, std::nullopt), kId, os);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    EXPECT_EQ(plan->action, c.action) << c.manager << " " << c.engine_bytes;
    EXPECT_EQ(plan->source, c.source) << c.manager << " " << c.engine_bytes;
  }
}

TEST(Plan, HostTmpfsSafetyChecks) {
  FakeOs os;
  std::string src = std::string("/var/lib/docker/containers/") + kId + "/mounts/shm";
  Json j = BindSpec(src);
  // Not a mount root (a plain directory on some tmpfs): left alone.
  os.fs[src] = FsInfo{true, false, 64 * kMiB, 0, 0};
  Result<ShmPlan> plan = PlanShm(Make(j), Config(), kId, os);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->action, ShmAction::kSkip);
  // Through a symlink: left alone.
  os.fs[src] = FsInfo{true, true, 64 * kMiB, 0, 0};
  os.links[src] = "/etc";
  plan = PlanShm(Make(j), Config(), kId, os);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->action, ShmAction::kSkip);
  EXPECT_NE(plan->reason.find("symlink"), std::string::npos);
  // Shrinking below what is used: a user error.
  os.links.clear();
  os.fs[src] = FsInfo{true, true, 64 * kMiB, 40 * kMiB, 0};
  Env(j, "SHMKEEPER_SHM_SIZE=32m");
  plan = PlanShm(Make(j), Config(), kId, os);
  ASSERT_FALSE(plan.ok());
  EXPECT_TRUE(plan.status().IsUserError());
  EXPECT_NE(plan.status().message().find("smaller than the 40MiB already used"), std::string::npos);
  // statfs failure: an internal error.
  os.fs.clear();
  plan = PlanShm(Make(j), Config(), kId, os);
  ASSERT_FALSE(plan.ok());
  EXPECT_FALSE(plan.status().IsUserError());
}

TEST(Plan, NoSizeOptionIsTheKernelDefault) {
  FakeOs os;
  Result<ShmPlan> plan = PlanShm(Make(PrivateSpec("")), WithPolicy(kGiB, std::nullopt), kId, os);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->old_bytes, 8 * kGiB);
  EXPECT_EQ(plan->source, "engine");
  EXPECT_EQ(plan->action, ShmAction::kKeep);
}

TEST(Plan, ApplyEditsSpecTmpfs) {
  FakeOs os;
  Spec spec = Make(PrivateSpec());
  Result<ShmPlan> plan = PlanShm(spec, WithPolicy(kGiB, std::nullopt), kId, os);
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(ApplyShm(*plan, &spec, os).ok());
  EXPECT_EQ(spec.MountSizeOption(0), kGiB);
  EXPECT_TRUE(os.remounted.empty());
}

TEST(Plan, RemountFailureIsInternal) {
  FakeOs os;
  std::string src = std::string("/x/containers/") + kId + "/mounts/shm";
  os.fs[src] = FsInfo{true, true, 64 * kMiB, 0, 0};
  os.remount_error = Status::FromErrno(EPERM, "remount");
  Spec spec = Make(BindSpec(src));
  Result<ShmPlan> plan = PlanShm(spec, Config(), kId, os);
  ASSERT_TRUE(plan.ok());
  Status s = ApplyShm(*plan, &spec, os);
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(s.IsUserError());
}

// A mount's members come from anyone's spec: a wrong type is not a crash.
TEST(ClassifyShm, PlansAroundMountMembersOfTheWrongType) {
  Result<Spec> s = Spec::Parse(
      R"({"mounts":[{"destination":"/dev/shm","type":["rbind"],"source":7}],"linux":{"namespaces":[{"type":"ipc"}]}})",
      "x");
  ASSERT_TRUE(s.ok());
  FakeOs os;
  Result<ShmTarget> t = ClassifyShm(*s, "id", os);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->why, "/dev/shm has mount type ?");
}

}  // namespace
}  // namespace shmkeeper

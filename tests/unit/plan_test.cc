#include "decide/plan.h"

#include <gtest/gtest.h>

#include <functional>
#include <limits>

#include "base/bytes.h"
#include "base/fileutil.h"
#include "decide/decision_log.h"
#include "fake_os.h"
#include "support/temp_dir.h"

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
  EXPECT_EQ(plan->old_bytes, RoundUpToPage(*Make(j).MountSizeOption(0)));
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
             Config(), ShmAction::kKeep, RoundUpToPage(67108865), "engine"},
        // docs/configuration.md#precedence: --shm-size / shm_size beats SHMKEEPER_SHM_SIZE (an image's ENV).
        Case{"explicit_engine_size_over_env",
             [](Json& j) {
               Env(j, "SHMKEEPER_SHM_SIZE=96m");
               j["mounts"][0]["options"][4] = "size=2147483648";
             },
             Config(), ShmAction::kKeep, 2 * kGiB, "engine"},
        Case{"env_over_policy", [](Json& j) { Env(j, "SHMKEEPER_SHM_SIZE=96m"); }, WithPolicy(kGiB, std::nullopt),
             ShmAction::kResize, 96 * kMiB, "env:SHMKEEPER_SHM_SIZE"},
        Case{"bad_env_ignored_under_explicit_size",
             [](Json& j) {
               Env(j, "SHMKEEPER_SHM_SIZE=lots");
               j["mounts"][0]["options"][4] = "size=2147483648";
             },
             Config(), ShmAction::kKeep, 2 * kGiB, "engine"},
        Case{"over_max_clamped", [](Json& j) { Ann(j, "shmkeeper.io/shm-size", "4Gi"); },
             WithPolicy(std::nullopt, kGiB, OverMax::kClamp), ShmAction::kResize, kGiB,
             "annotation:shmkeeper.io/shm-size"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Plan, ReasonNamesTheIgnoredEnv) {
  FakeOs os;
  Json j = PrivateSpec();
  Env(j, "SHMKEEPER_SHM_SIZE=96m");
  j["mounts"][0]["options"][4] = "size=2147483648";
  Result<ShmPlan> plan = PlanShm(Make(j), Config(), kId, os);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->reason, "SHMKEEPER_SHM_SIZE=\"96m\" ignored: --shm-size/shm_size is explicit");
}

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

// ---- sizes as the kernel stores them (whole pages) -----------------------------

std::string SandboxShm() { return "/run/containerd/io.containerd.grpc.v1.cri/sandboxes/sb1/shm"; }

// A containerd pod sandbox whose shm tmpfs is `current` bytes (already whole pages).
Json SandboxSpec(FakeOs& os, int64_t current) {
  os.fs[SandboxShm()] = FsInfo{true, true, current, 0, 0};
  Json j = BindSpec(SandboxShm());
  Ann(j, "io.kubernetes.cri.container-type", "sandbox");
  Ann(j, "io.kubernetes.cri.sandbox-id", "sb1");
  return j;
}

TEST(PlanRounding, DecimalQuantitiesAreRequestedInWholePagesAndKeptOnceApplied) {
  for (const char* q : {"1G", "500M", "100000001", "1", "4095", "4097"}) {
    FakeOs os;
    Json j = SandboxSpec(os, 64 * kMiB);
    Ann(j, "shmkeeper.io/shm-size", q);
    int64_t want = RoundUpToPage(*ParseSize(q), os.PageSize());
    Spec spec = Make(j);
    Result<ShmPlan> plan = PlanShm(spec, Config(), "sb1", os);
    ASSERT_TRUE(plan.ok()) << q << ": " << plan.status().message();
    EXPECT_EQ(plan->action, ShmAction::kResize) << q;
    EXPECT_EQ(plan->new_bytes, want) << q;
    EXPECT_EQ(plan->requested, q);
    ASSERT_TRUE(ApplyShm(*plan, &spec, os).ok());
    EXPECT_EQ(os.remounted[SandboxShm()], want) << q;  // remounted with whole pages
    // The kernel reports the rounded size: the next scan must keep it.
    os.fs[SandboxShm()].size_bytes = want;
    plan = PlanShm(spec, Config(), "sb1", os);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->action, ShmAction::kKeep) << q << " would be remounted on every scan";
  }
}

TEST(PlanRounding, TinySizesRoundToOnePage) {
  for (const char* q : {"1", "4095"}) {
    FakeOs os;
    Json j = PrivateSpec();
    Ann(j, "shmkeeper.io/shm-size", q);
    Result<ShmPlan> plan = PlanShm(Make(j), Config(), kId, os);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->new_bytes, os.PageSize()) << q;
  }
}

TEST(PlanRounding, SpecTmpfsSizeIsComparedInWholePages) {
  FakeOs os;
  Json j = PrivateSpec("size=1000000000");  // what the wrapper wrote before, or an engine's decimal size
  Ann(j, "shmkeeper.io/shm-size", "1G");
  Result<ShmPlan> plan = PlanShm(Make(j), Config(), kId, os);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->old_bytes, RoundUpToPage(1000000000));
  EXPECT_EQ(plan->action, ShmAction::kKeep);
}

TEST(PlanRounding, HalfOfRamThatIsNotWholePages) {
  FakeOs os;
  os.host_memory = 16 * kGiB + 2;  // half is 8 GiB + 1 byte
  Json j = SandboxSpec(os, RoundUpToPage(8 * kGiB + 1));
  Result<ShmPlan> plan = PlanShm(Make(j), Config(), "sb1", os);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->new_bytes, RoundUpToPage(8 * kGiB + 1));
  EXPECT_EQ(plan->action, ShmAction::kKeep);
}

TEST(PlanRounding, ShmMaxIsCheckedOnTheRequestAsWritten) {
  FakeOs os;
  Json j = PrivateSpec();
  Ann(j, "shmkeeper.io/shm-size", "1G");
  // shm.max: 1G exactly: allowed (the kernel then rounds up to whole pages).
  Result<ShmPlan> plan = PlanShm(Make(j), WithPolicy(std::nullopt, 1000000000), kId, os);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->new_bytes, RoundUpToPage(1000000000));
  // One byte less: over it.
  plan = PlanShm(Make(j), WithPolicy(std::nullopt, 999999999), kId, os);
  EXPECT_FALSE(plan.ok());
  // Clamped to a huge shm.max near INT64_MAX: whole pages, no overflow.
  constexpr int64_t kHuge = std::numeric_limits<int64_t>::max() - 1;
  os.host_memory = kHuge;
  j = PrivateSpec();
  Ann(j, "shmkeeper.io/shm-size", "8Ei");  // unparseable (over int64): a user error, not a crash
  EXPECT_FALSE(PlanShm(Make(j), WithPolicy(std::nullopt, kHuge, OverMax::kClamp), kId, os).ok());
  j = PrivateSpec();
  Ann(j, "shmkeeper.io/shm-size", "7Ei");
  plan = PlanShm(Make(j), WithPolicy(std::nullopt, 6 * (int64_t{1} << 60) + 1, OverMax::kClamp), kId, os);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->clamped);
  EXPECT_EQ(plan->new_bytes, RoundUpToPage(6 * (int64_t{1} << 60) + 1));
  EXPECT_EQ(plan->new_bytes % os.PageSize(), 0);
}

// ---- shm.default: auto follows the pod's memory limit ----------------------------

struct LimitCase {
  const char* name;
  std::function<void(Json&)> edit;
  std::optional<MemoryLimit> cri;
  int64_t new_bytes;
  const char* limit_source;  // "" = none: half of RAM
};

class AutoLimit : public ::testing::TestWithParam<LimitCase> {};

TEST_P(AutoLimit, UsesTheFirstLimitTheRuntimeShows) {
  const LimitCase& c = GetParam();
  FakeOs os;  // 16 GiB host
  Json j = SandboxSpec(os, 64 * kMiB);
  c.edit(j);
  Result<ShmPlan> plan = PlanShm(Make(j), Config(), "sb1", os, c.cri);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->new_bytes, c.new_bytes);
  EXPECT_EQ(plan->source, "policy");
  EXPECT_EQ(plan->requested, "auto");
  EXPECT_EQ(plan->limit.source, c.limit_source);
  Json record = DecisionRecord("sb1", *plan);
  if (*c.limit_source) {
    EXPECT_EQ(record["memory_limit"]["source"], c.limit_source);
    EXPECT_EQ(record["memory_limit"]["bytes"], plan->limit.bytes);
  } else {  // every key on every line (decision_log.h): no limit is bytes 0, source ""
    EXPECT_EQ(record["memory_limit"], Json({{"bytes", 0}, {"source", ""}}));
  }
}

TEST(DecisionLog, SuccessAndFailureLinesHaveTheSameKeys) {
  FakeOs os;
  Result<ShmPlan> plan = PlanShm(Make(PrivateSpec()), Config(), kId, os);
  ASSERT_TRUE(plan.ok());
  Json ok = DecisionRecord("c1", *plan, "hook");
  Json failed = DecisionFailureRecord("c1", "warning", "runtime", "passthrough", Status::Invalid("x.yaml:3:1: bad"),
                                      "policy file invalid");
  std::vector<std::string> a, b;
  for (const auto& [k, v] : ok.items()) a.push_back(k);
  for (const auto& [k, v] : failed.items()) b.push_back(k);
  EXPECT_EQ(a, b);
  EXPECT_EQ(ok["by"], "hook");
  EXPECT_EQ(ok["error"], "");
  EXPECT_EQ(failed["action"], "passthrough");
  EXPECT_EQ(failed["error"], "x.yaml:3:1: bad");
  EXPECT_EQ(failed["policy"], "policy file invalid");
}

void CrioResources(Json& j, const char* key, const std::string& json) { j["annotations"][key] = json; }

INSTANTIATE_TEST_SUITE_P(
    Sources, AutoLimit,
    ::testing::Values(
        LimitCase{"none_half_of_ram", [](Json&) {}, std::nullopt, 8 * kGiB, ""},
        LimitCase{"spec", [](Json& j) { j["linux"]["resources"]["memory"]["limit"] = 3 * kGiB; }, std::nullopt,
                  3 * kGiB, "spec:linux.resources.memory.limit"},
        LimitCase{"containerd_sandbox_memory",
                  [](Json& j) { Ann(j, "io.kubernetes.cri.sandbox-memory", "1073741824"); }, std::nullopt, kGiB,
                  "annotation:io.kubernetes.cri.sandbox-memory"},
        LimitCase{"containerd_decimal_limit_in_whole_pages",
                  [](Json& j) { Ann(j, "io.kubernetes.cri.sandbox-memory", "1000000000"); }, std::nullopt,
                  RoundUpToPage(1000000000), "annotation:io.kubernetes.cri.sandbox-memory"},
        LimitCase{"containerd_zero_is_no_limit", [](Json& j) { Ann(j, "io.kubernetes.cri.sandbox-memory", "0"); },
                  std::nullopt, 8 * kGiB, ""},
        LimitCase{"containerd_malformed_is_skipped",
                  [](Json& j) { Ann(j, "io.kubernetes.cri.sandbox-memory", "1Gi; rm -rf"); }, std::nullopt, 8 * kGiB,
                  ""},
        LimitCase{"crio_pod_resources",
                  [](Json& j) {
                    CrioResources(j, "io.kubernetes.cri-o.PodLinuxResources",
                                  R"({"cpu_period":100000,"memory_limit_in_bytes":2147483648})");
                  },
                  std::nullopt, 2 * kGiB, "annotation:io.kubernetes.cri-o.PodLinuxResources"},
        LimitCase{"crio_new_key_first",
                  [](Json& j) {
                    CrioResources(j, "io.kubernetes.cri-o.PodLinuxResources", R"({"memory_limit_in_bytes":1})");
                    CrioResources(j, "pod-linux-resources.crio.io", R"({"memory_limit_in_bytes":536870912})");
                  },
                  std::nullopt, 512 * kMiB, "annotation:pod-linux-resources.crio.io"},
        LimitCase{"crio_malformed_is_skipped",
                  [](Json& j) {
                    CrioResources(j, "io.kubernetes.cri-o.PodLinuxResources", R"({"memory_limit_in_bytes":"1Gi"})");
                  },
                  std::nullopt, 8 * kGiB, ""},
        LimitCase{"spec_before_annotations",
                  [](Json& j) {
                    j["linux"]["resources"]["memory"]["limit"] = 3 * kGiB;
                    Ann(j, "io.kubernetes.cri.sandbox-memory", "1073741824");
                  },
                  std::nullopt, 3 * kGiB, "spec:linux.resources.memory.limit"},
        LimitCase{"cri_status_when_the_spec_shows_none", [](Json&) {}, MemoryLimit{kGiB, "cri:PodSandboxStatus"}, kGiB,
                  "cri:PodSandboxStatus"},
        LimitCase{"spec_annotation_before_cri_status",
                  [](Json& j) { Ann(j, "io.kubernetes.cri.sandbox-memory", "536870912"); },
                  MemoryLimit{kGiB, "cri:PodSandboxStatus"}, 512 * kMiB, "annotation:io.kubernetes.cri.sandbox-memory"},
        LimitCase{"limit_over_ram_is_clamped",
                  [](Json& j) { Ann(j, "io.kubernetes.cri.sandbox-memory", "68719476736"); }, std::nullopt, 16 * kGiB,
                  "annotation:io.kubernetes.cri.sandbox-memory"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(AutoLimit, AnExplicitDefaultOrAnnotationIgnoresTheLimit) {
  FakeOs os;
  Json j = SandboxSpec(os, 64 * kMiB);
  Ann(j, "io.kubernetes.cri.sandbox-memory", "1073741824");
  Result<ShmPlan> plan = PlanShm(Make(j), WithPolicy(256 * kMiB, std::nullopt), "sb1", os);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->new_bytes, 256 * kMiB);
  EXPECT_EQ(plan->limit.bytes, 0);
  Ann(j, "shmkeeper.io/shm-size", "2Gi");
  plan = PlanShm(Make(j), Config(), "sb1", os);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->new_bytes, 2 * kGiB);
  EXPECT_EQ(plan->limit.bytes, 0);
}

TEST(AutoLimit, SizingRecordCarriesTheLimitToThePodsView) {
  FakeOs os;
  Json j = SandboxSpec(os, 64 * kMiB);
  Ann(j, "io.kubernetes.cri.sandbox-memory", "1073741824");
  Result<ShmPlan> plan = PlanShm(Make(j), Config(), "sb1", os);
  ASSERT_TRUE(plan.ok());
  test::TempDir tmp("/tmp/shmk-plan-");
  ASSERT_TRUE(tmp.ok());
  std::string dir = tmp / "sizing-record";
  ASSERT_TRUE(MakeDirs(dir).ok());
  ASSERT_TRUE(WriteSizingRecord(dir, SizingRecordOf(*plan, "runtime")).ok());
  std::optional<SizingRecord> back = ReadSizingRecord(dir);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->bytes, kGiB);
  EXPECT_EQ(back->limit.bytes, kGiB);
  EXPECT_EQ(back->limit.source, "annotation:io.kubernetes.cri.sandbox-memory");
}

}  // namespace
}  // namespace shmkeeper

// CUDA IPC device access (decide/cuda_ipc.h) against fake NVIDIA device nodes
// made with mknod(2) and a fake /proc/devices, as test_inject.py does for
// real runc: only the node's policy and the container's own GPUs decide.
#include "decide/cuda_ipc.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "support/temp_dir.h"

namespace shmkeeper {
namespace {

using test::TempDir;

struct FakeNode {
  const char* name;
  unsigned major, minor;
};

// Two GPUs, the control node, the UVM nodes and a MIG capability node.
constexpr FakeNode kNodes[] = {{"nvidia0", 195, 0},          {"nvidia1", 195, 1},
                               {"nvidiactl", 195, 255},      {"nvidia-uvm", 511, 0},
                               {"nvidia-uvm-tools", 511, 1}, {"nvidia-caps/nvidia-cap1", 510, 1}};

class CudaIpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    ASSERT_EQ(::mkdir((dir_ / "dev").c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((dir_ / "dev/nvidia-caps").c_str(), 0755), 0);
    for (const FakeNode& n : kNodes) {
      if (::mknod((dir_ / "dev/" + n.name).c_str(), S_IFCHR | 0666, ::makedev(n.major, n.minor)) != 0) {
        if (errno == EPERM) GTEST_SKIP() << "mknod needs CAP_MKNOD (run as root)";
        FAIL() << "mknod " << n.name << ": " << errno;
      }
    }
    std::ofstream(dir_ / "proc-devices") << "Character devices:\n  1 mem\n195 nvidia-frontend\n510 nvidia-caps\n"
                                            "511 nvidia-uvm\n\nBlock devices:\n  8 sd\n";
  }

  // The node policy: cuda.devDir and cuda.procDevices point at the fakes, and
  // `ipc` is cuda.ipc ("" = not set: the default).
  Config Policy(const std::string& ipc) {
    std::string yaml = "cuda:\n  devDir: " + (dir_ / "dev") + "\n  procDevices: " + (dir_ / "proc-devices") + "\n";
    if (!ipc.empty()) yaml += "  ipc: " + ipc + "\n";
    Result<Config> c = ParseConfig(yaml, "policy.yaml");
    EXPECT_TRUE(c.ok()) << c.status().message();
    return c.ok() ? *c : Config();
  }

  // A container spec with its own PID namespace; `gpus` are linux.devices
  // entries as the engine, the device plugin or CDI put them (with their
  // cgroup rules).
  static Spec Container(const std::vector<std::string>& env, bool annotation, const std::vector<unsigned>& gpus) {
    Json doc = {{"ociVersion", "1.0.2"},
                {"process", {{"args", {"sh"}}, {"env", Json::array()}}},
                {"root", {{"path", "rootfs"}}},
                {"linux",
                 {{"namespaces", Json::array({{{"type", "pid"}}, {{"type", "mount"}}})},
                  {"resources", {{"devices", Json::array({{{"allow", false}, {"access", "rwm"}}})}}}}}};
    for (const std::string& e : env) doc["process"]["env"].push_back(e);
    if (annotation) doc["annotations"] = {{"shmkeeper.io/cuda-ipc", "true"}};
    for (unsigned minor : gpus) {
      doc["linux"]["devices"].push_back({{"path", "/dev/nvidia" + std::to_string(minor)},
                                         {"type", "c"},
                                         {"major", 195},
                                         {"minor", minor},
                                         {"fileMode", 0666}});
      doc["linux"]["resources"]["devices"].push_back(
          {{"allow", true}, {"type", "c"}, {"major", 195}, {"minor", minor}, {"access", "rwm"}});
    }
    Result<Spec> s = Spec::Parse(doc.dump(), "/b/config.json");
    EXPECT_TRUE(s.ok()) << s.status().message();
    return std::move(s).value();
  }

  static std::set<std::string> DevicePaths(const Spec& s) {
    std::set<std::string> out;
    for (const Json& d : s.doc()["linux"].value("devices", Json::array())) out.insert(d.value("path", ""));
    return out;
  }

  // "major:minor" of every allow rule of the device cgroup.
  static std::set<std::string> Allowed(const Spec& s) {
    std::set<std::string> out;
    for (const Json& r : s.doc()["linux"]["resources"]["devices"]) {
      if (!r.value("allow", false)) continue;
      out.insert((r.contains("major") ? std::to_string(r["major"].get<int64_t>()) : "*") + ":" +
                 (r.contains("minor") ? std::to_string(r["minor"].get<int64_t>()) : "*"));
    }
    return out;
  }

  static bool HasMemlock(const Spec& s) {
    for (const Json& r : s.doc()["process"].value("rlimits", Json::array())) {
      if (r.value("type", "") == "RLIMIT_MEMLOCK") return true;
    }
    return false;
  }

  // Asserts `spec` comes out of InjectCudaIpc unchanged; returns the decision.
  static InjectResult ExpectNothingAdded(Spec* spec, const Config& config, std::vector<std::string>* notes) {
    std::string before = spec->Dump();
    InjectResult r = InjectCudaIpc(spec, config, notes);
    EXPECT_FALSE(r.changed) << r.what;
    EXPECT_EQ(spec->Dump(), before);
    return r;
  }

  TempDir dir_{"/tmp/shmk-cuda-ipc-"};
};

TEST_F(CudaIpcTest, TheEnvAloneAddsNothingOnADefaultNodeAndSaysItWasIgnored) {
  Spec spec = Container({"SHMKEEPER_CUDA_IPC=1"}, /*annotation=*/false, {1});
  std::vector<std::string> notes;
  InjectResult r = ExpectNothingAdded(&spec, Policy(""), &notes);
  EXPECT_EQ(r.what, "cuda-ipc: env ignored");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("SHMKEEPER_CUDA_IPC in the container's env is ignored"), std::string::npos) << notes[0];
}

TEST_F(CudaIpcTest, TheEnvAloneAddsNothingEvenWhereTheNodeAllowsIt) {
  Spec spec = Container({"SHMKEEPER_CUDA_IPC=1"}, /*annotation=*/false, {1});
  std::vector<std::string> notes;
  EXPECT_EQ(ExpectNothingAdded(&spec, Policy("allocated"), &notes).what, "cuda-ipc: env ignored");
}

TEST_F(CudaIpcTest, TheAnnotationOnADefaultNodeAddsNothingAndSaysWhy) {
  Spec spec = Container({}, /*annotation=*/true, {1});
  std::vector<std::string> notes;
  InjectResult r = ExpectNothingAdded(&spec, Policy(""), &notes);
  EXPECT_EQ(r.what, "cuda-ipc: off on this node");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("cuda.ipc: off"), std::string::npos) << notes[0];
  // The same with the policy's off spelt out.
  Spec again = Container({}, /*annotation=*/true, {1});
  EXPECT_EQ(ExpectNothingAdded(&again, Policy("off"), &notes).what, "cuda-ipc: off on this node");
}

TEST_F(CudaIpcTest, AllocatedWithNoGpuInTheSpecAddsNothing) {
  Spec spec = Container({}, /*annotation=*/true, {});
  std::vector<std::string> notes;
  InjectResult r = ExpectNothingAdded(&spec, Policy("allocated"), &notes);
  EXPECT_EQ(r.what, "cuda-ipc: no GPU in the spec");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("holds no NVIDIA GPU"), std::string::npos) << notes[0];
}

TEST_F(CudaIpcTest, AllocatedWithAGpuButNoAnnotationAddsNothing) {
  Spec spec = Container({}, /*annotation=*/false, {1});
  std::vector<std::string> notes;
  EXPECT_EQ(ExpectNothingAdded(&spec, Policy("allocated"), &notes).what, "");
  EXPECT_TRUE(notes.empty());
}

// The positive control: the node allows it, the pod asks, the container holds
// a GPU: the control and UVM nodes, their cgroup rules and memlock.
TEST_F(CudaIpcTest, AllocatedWithTheAnnotationAndAGpuAddsTheControlNodesAndMemlock) {
  Spec spec = Container({}, /*annotation=*/true, {1});
  std::vector<std::string> notes;
  InjectResult r = InjectCudaIpc(&spec, Policy("allocated"), &notes);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(r.what, "cuda-ipc");
  EXPECT_EQ(DevicePaths(spec),
            (std::set<std::string>{"/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}));
  EXPECT_EQ(Allowed(spec), (std::set<std::string>{"195:1", "195:255", "511:0", "511:1"}));
  EXPECT_TRUE(HasMemlock(spec));
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes[0].find("for the container's GPUs /dev/nvidia1: added /dev/nvidiactl,/dev/nvidia-uvm"),
            std::string::npos)
      << notes[0];
}

TEST_F(CudaIpcTest, AllocatedWithOneGpuNeverAddsAnotherGpuOrAMigCapability) {
  Spec spec = Container({}, /*annotation=*/true, {1});
  std::vector<std::string> notes;
  ASSERT_TRUE(InjectCudaIpc(&spec, Policy("allocated"), &notes).changed);
  std::set<std::string> paths = DevicePaths(spec);
  EXPECT_FALSE(paths.count("/dev/nvidia0"));
  EXPECT_FALSE(paths.count("/dev/nvidia-caps/nvidia-cap1"));
  std::set<std::string> allowed = Allowed(spec);
  EXPECT_FALSE(allowed.count("195:0"));
  EXPECT_FALSE(allowed.count("510:1"));
  EXPECT_FALSE(allowed.count("195:*") || allowed.count("*:*"));
}

TEST_F(CudaIpcTest, TheHookDecidesTheSameAndAddsNothing) {
  Spec spec = Container({}, /*annotation=*/true, {1});
  std::string before = spec.Dump();
  std::vector<std::string> notes;
  InjectResult r = ExplainCudaIpc(spec, Policy("allocated"), &notes);
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(r.what, "cuda-ipc: not applied by the hook");
  EXPECT_EQ(spec.Dump(), before);
  Spec off = Container({}, /*annotation=*/true, {1});
  EXPECT_EQ(ExplainCudaIpc(off, Policy(""), &notes).what, "cuda-ipc: off on this node");
}

}  // namespace
}  // namespace shmkeeper

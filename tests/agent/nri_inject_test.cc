// The wrapper's injection answered to NRI (agent/nri_inject.h): the preload
// against a fake image root (a glibc loader or none, the image's symlinks)
// and CUDA IPC against fake NVIDIA device nodes (mknod(2) and a fake
// /proc/devices, as tests/unit/cuda_ipc_test.cc does for the wrapper), each
// through InjectForNri, the function CreateContainer answers with. The real
// containerd drives it in tests/engines/test_nri_inject.py.
#include "nri_inject.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <map>
#include <set>

#include "support/temp_dir.h"

// sysmacros' major()/minor() would rewrite LinuxDevice's accessors.
#undef major
#undef minor

namespace shmkeeper::agent {
namespace {
namespace api = ::nri::pkg::api::v1alpha1;
using test::TempDir;

std::map<std::string, std::string> Env(const api::ContainerAdjustment& a) {
  std::map<std::string, std::string> out;
  for (const api::KeyValue& kv : a.env()) out[kv.key()] = kv.value();
  return out;
}

std::set<std::string> Devices(const api::ContainerAdjustment& a) {
  std::set<std::string> out;
  for (const api::LinuxDevice& d : a.linux().devices()) out.insert(d.path());
  return out;
}

class NriInjectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    ASSERT_EQ(::mkdir((dir_ / "dev").c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((dir_ / "dev/nvidia-caps").c_str(), 0755), 0);
    struct Node {
      const char* name;
      unsigned major, minor;
    };
    for (const Node& n :
         {Node{"nvidia0", 195, 0}, Node{"nvidia1", 195, 1}, Node{"nvidiactl", 195, 255}, Node{"nvidia-uvm", 511, 0},
          Node{"nvidia-uvm-tools", 511, 1}, Node{"nvidia-caps/nvidia-cap1", 510, 1}}) {
      if (::mknod((dir_ / "dev/" + n.name).c_str(), S_IFCHR | 0666, makedev(n.major, n.minor)) != 0) {
        if (errno == EPERM) GTEST_SKIP() << "mknod needs CAP_MKNOD (run as root)";
        FAIL() << "mknod " << n.name << ": " << errno;
      }
    }
    std::ofstream(dir_ / "proc-devices") << "Character devices:\n  1 mem\n195 nvidia-frontend\n510 nvidia-caps\n"
                                            "511 nvidia-uvm\n\nBlock devices:\n  8 sd\n";
    std::ofstream(dir_ / "libshmkeeper-preload.so") << "ELF";
    ASSERT_EQ(::mkdir((dir_ / "events").c_str(), 0755), 0);
  }

  // The node policy: fake devices, the library and the event socket's directory under dir_.
  Config Policy(const std::string& ipc) {
    std::string yaml = "cuda:\n  devDir: " + (dir_ / "dev") + "\n  procDevices: " + (dir_ / "proc-devices") +
                       "\n  ipc: " + ipc + "\ninject:\n  library: " + (dir_ / "libshmkeeper-preload.so") +
                       "\nagent:\n  eventSocket: " + (dir_ / "events/events.sock") + "\nlog:\n  path: \"\"\n";
    Result<Config> c = ParseConfig(yaml, "policy.yaml");
    EXPECT_TRUE(c.ok()) << c.status().message();
    return c.ok() ? *c : Config();
  }

  // An image root under dir_: a glibc one (its loader where Debian's is,
  // through merged-usr's /lib64 -> usr/lib64 symlink), or a musl one.
  std::string Image(const std::string& name, bool glibc) {
    std::string root = dir_ / name;
    EXPECT_EQ(::mkdir(root.c_str(), 0755), 0);
    EXPECT_EQ(::mkdir((root + "/usr").c_str(), 0755), 0);
    EXPECT_EQ(::mkdir((root + "/usr/lib64").c_str(), 0755), 0);
    EXPECT_EQ(::symlink("usr/lib64", (root + "/lib64").c_str()), 0);
    std::ofstream(root + (glibc ? "/usr/lib64/ld-linux-x86-64.so.2" : "/usr/lib64/ld-musl-x86_64.so.1")) << "ELF";
    return root;
  }

  // A CreateContainer's pod and container: `env`, the pod's `annotations`,
  // and the GPUs the device plugin gave it.
  static api::CreateContainerRequest Request(const std::vector<std::string>& env,
                                             const std::map<std::string, std::string>& annotations,
                                             const std::vector<unsigned>& gpus) {
    api::CreateContainerRequest req;
    req.mutable_pod()->set_id("pod1");
    req.mutable_container()->set_id("c1");
    for (const auto& [k, v] : annotations) (*req.mutable_pod()->mutable_annotations())[k] = v;
    for (const std::string& e : env) req.mutable_container()->add_env(e);
    req.mutable_container()->mutable_linux()->add_namespaces()->set_type("pid");
    for (unsigned minor : gpus) {
      api::LinuxDevice* d = req.mutable_container()->mutable_linux()->add_devices();
      d->set_path("/dev/nvidia" + std::to_string(minor));
      d->set_type("c");
      d->set_major(195);
      d->set_minor(minor);
    }
    return req;
  }

  NriInjection Inject(const api::CreateContainerRequest& req, const Config& config, const std::string& rootfs) {
    return InjectForNri(req.pod(), req.container(), config, rootfs, "the image cannot be read: (test)", "/nonexistent");
  }

  TempDir dir_{"/tmp/shmk-nri-inject-"};
};

TEST_F(NriInjectTest, AGlibcImageGetsTheLibraryReadOnlyLdPreloadAndTheEventDirectoryAndTheImageIsNotWritten) {
  std::string root = Image("glibc", true);
  NriInjection inj = Inject(Request({"PATH=/bin"}, {}, {}), Policy("off"), root);
  EXPECT_EQ(inj.preload, "preload");
  std::map<std::string, const api::Mount*> mounts;
  for (const api::Mount& m : inj.adjust.mounts()) mounts[m.destination()] = &m;
  ASSERT_EQ(mounts.size(), 2u) << inj.adjust.DebugString();
  const api::Mount* lib = mounts["/run/shmkeeper/libshmkeeper-preload.so"];
  ASSERT_NE(lib, nullptr);
  EXPECT_EQ(lib->source(), dir_ / "libshmkeeper-preload.so");
  EXPECT_EQ(std::set<std::string>(lib->options().begin(), lib->options().end()),
            (std::set<std::string>{"bind", "ro", "nosuid", "nodev"}));
  ASSERT_NE(mounts["/run/shmkeeper/events"], nullptr);
  EXPECT_EQ(mounts["/run/shmkeeper/events"]->source(), dir_ / "events");
  std::map<std::string, std::string> env = Env(inj.adjust);
  EXPECT_EQ(env["LD_PRELOAD"], "/run/shmkeeper/libshmkeeper-preload.so");
  EXPECT_EQ(env["SHMKEEPER_EVENT_SOCKET"], "/run/shmkeeper/events/events.sock");
  EXPECT_EQ(env.count("PATH"), 0u) << "an unchanged variable is not adjusted";
  EXPECT_TRUE(Devices(inj.adjust).empty());
  EXPECT_EQ(inj.adjust.rlimits_size(), 0);
  struct stat st;
  EXPECT_NE(::lstat((root + "/run").c_str(), &st), 0) << "the runtime makes the mount points, not the agent";
}

TEST_F(NriInjectTest, AMuslImageTheOptOutsAndAnUnreadableImageGetNothing) {
  std::string musl = Image("musl", false), glibc = Image("glibc", true);
  NriInjection inj = Inject(Request({}, {}, {}), Policy("off"), musl);
  EXPECT_EQ(inj.preload, "skip: the image has no glibc dynamic loader (static or musl)");
  EXPECT_EQ(inj.adjust.ByteSizeLong(), 0u) << inj.adjust.DebugString();
  inj = Inject(Request({}, {{"shmkeeper.io/inject", "false"}}, {}), Policy("off"), glibc);
  EXPECT_EQ(inj.preload, "skip: annotation shmkeeper.io/inject is false");
  EXPECT_EQ(inj.adjust.ByteSizeLong(), 0u);
  inj = Inject(Request({"SHMKEEPER_INJECT=0"}, {}, {}), Policy("off"), glibc);
  EXPECT_EQ(inj.preload, "skip: SHMKEEPER_INJECT=0");
  EXPECT_EQ(inj.adjust.ByteSizeLong(), 0u);
  // No image: skipped with the reason, counted apart (undecided); an opt-out still wins.
  inj = Inject(Request({}, {}, {}), Policy("off"), "");
  EXPECT_EQ(inj.preload, "skip: the image cannot be read: (test)");
  EXPECT_EQ(PreloadOutcome(inj.preload), "undecided");
  EXPECT_EQ(inj.adjust.ByteSizeLong(), 0u);
  inj = Inject(Request({}, {{"shmkeeper.io/inject", "false"}}, {}), Policy("off"), "");
  EXPECT_EQ(PreloadOutcome(inj.preload), "skipped") << inj.preload;
}

TEST_F(NriInjectTest, AnImageSymlinkWhereTheMountPointsGoRefusesTheInjection) {
  std::string root = Image("glibc", true);
  ASSERT_EQ(::symlink("/etc", (root + "/run").c_str()), 0);  // the image's /run -> /etc
  NriInjection inj = Inject(Request({}, {}, {}), Policy("off"), root);
  EXPECT_EQ(inj.preload, "skip: refused: /run is not a plain directory");
  EXPECT_EQ(inj.adjust.ByteSizeLong(), 0u);
  // Positive control: the same image with /run a directory.
  ASSERT_EQ(::unlink((root + "/run").c_str()), 0);
  ASSERT_EQ(::mkdir((root + "/run").c_str(), 0755), 0);
  EXPECT_EQ(Inject(Request({}, {}, {}), Policy("off"), root).preload, "preload");
}

TEST_F(NriInjectTest, CudaIpcGivesTheControlNodesAndMemlockOnlyForTheContainersOwnGpu) {
  NriInjection inj = Inject(Request({}, {{"shmkeeper.io/cuda-ipc", "true"}}, {1}), Policy("allocated"), "");
  EXPECT_EQ(inj.cuda, "cuda-ipc");
  EXPECT_EQ(Devices(inj.adjust), (std::set<std::string>{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}));
  for (const api::LinuxDevice& d : inj.adjust.linux().devices()) {
    EXPECT_EQ(d.type(), "c");
    if (d.path() == "/dev/nvidiactl") {
      EXPECT_EQ(d.major() * 1000 + d.minor(), 195255);
    }
  }
  ASSERT_EQ(inj.adjust.rlimits_size(), 1);
  EXPECT_EQ(inj.adjust.rlimits(0).type(), "RLIMIT_MEMLOCK");
}

TEST_F(NriInjectTest, TheEnvSHMKEEPER_CUDA_IPCInTheContainerGetsNothingEvenWhereTheNodeAllowsIt) {
  // The attack: the container's own env asks, on a node with cuda.ipc: allocated, holding a GPU.
  NriInjection inj = Inject(Request({"SHMKEEPER_CUDA_IPC=1"}, {}, {1}), Policy("allocated"), "");
  EXPECT_EQ(inj.cuda, "cuda-ipc: env ignored");
  EXPECT_TRUE(Devices(inj.adjust).empty()) << inj.adjust.DebugString();
  EXPECT_EQ(inj.adjust.rlimits_size(), 0);
  // The annotation on a node whose policy is off, and without a GPU of its own: nothing either.
  inj = Inject(Request({}, {{"shmkeeper.io/cuda-ipc", "true"}}, {1}), Policy("off"), "");
  EXPECT_EQ(inj.cuda, "cuda-ipc: off on this node");
  EXPECT_TRUE(Devices(inj.adjust).empty());
  inj = Inject(Request({}, {{"shmkeeper.io/cuda-ipc", "true"}}, {}), Policy("allocated"), "");
  EXPECT_EQ(inj.cuda, "cuda-ipc: no GPU in the spec");
  EXPECT_TRUE(Devices(inj.adjust).empty());
  EXPECT_EQ(inj.adjust.rlimits_size(), 0);
}

}  // namespace
}  // namespace shmkeeper::agent

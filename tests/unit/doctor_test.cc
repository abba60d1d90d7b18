// doctor (core/doctor) on a real tmpfs, with a /proc whose namespace links
// are made to order (symlinks that read as the kernel's "pid:[N]"): where it
// says it runs, and that it prescribes only fixes that change what it found.
#include "doctor/doctor.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "base/bytes.h"
#include "support/temp_dir.h"

namespace shmkeeper {
namespace {

using test::TempDir;

// The kernel's inodes of the initial namespaces, and other ones.
constexpr unsigned long kInitPid = 0xEFFFFFFCUL, kInitUts = 0xEFFFFFFEUL, kInitCgroup = 0xEFFFFFFBUL,
                        kInitIpc = 0xEFFFFFFFUL, kHostMnt = 4026531840UL, kOther = 4026532777UL;

class DoctorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    for (const char* d : {"proc", "proc/self", "proc/self/ns", "proc/1", "proc/1/ns", "root", "shm"}) {
      ASSERT_EQ(::mkdir((dir_ / d).c_str(), 0755), 0) << d;
    }
  }
  void TearDown() override {
    if (mounted_) ::umount2((dir_ / "shm").c_str(), MNT_DETACH);
  }

  void Ns(const std::string& pid, const std::string& ns, unsigned long inode) {
    std::string link = dir_ / ("proc/" + pid + "/ns/" + ns);
    ::unlink(link.c_str());
    ASSERT_EQ(::symlink((ns + ":[" + std::to_string(inode) + "]").c_str(), link.c_str()), 0) << link;
  }
  void Write(const std::string& path, const std::string& text) { std::ofstream(dir_ / path) << text; }

  // This process in the host's namespaces (pid 1 in the same mount
  // namespace), or in a container's (its own PID, UTS, IPC and mount ones).
  void Host() {
    Ns("self", "pid", kInitPid);
    Ns("self", "uts", kInitUts);
    Ns("self", "cgroup", kInitCgroup);
    Ns("self", "ipc", kInitIpc);
    Ns("self", "mnt", kHostMnt);
    Ns("1", "mnt", kHostMnt);
    Write("proc/self/cgroup", "11:memory:/shmk-doctor-test\n0::/user.slice/session-1.scope\n");
  }
  void Container() {
    Host();
    Ns("self", "pid", kOther);
    Ns("self", "uts", kOther + 1);
    Ns("self", "ipc", kOther + 2);
    Ns("self", "mnt", kOther + 3);
    Ns("1", "mnt", kOther + 3);
  }

  // A real tmpfs of `size` at /dev/shm's place; false (the test skips) where
  // this process may not mount.
  bool Tmpfs(const std::string& size) {
    std::string opts = "size=" + size;
    if (::mount("shmk-doctor-test", (dir_ / "shm").c_str(), "tmpfs", 0, opts.c_str()) != 0) {
      EXPECT_EQ(errno, EPERM) << std::strerror(errno);
      return false;
    }
    mounted_ = true;
    return true;
  }

  DoctorReport Run() {
    DoctorOptions o;
    o.shm_path = dir_ / "shm";
    o.proc = dir_ / "proc";
    o.root = dir_ / "root/";
    o.policy_path = dir_ / "no-policy.yaml";
    Result<DoctorReport> r = RunDoctor(o);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? *r : DoctorReport();
  }

  static bool AnyFixHas(const DoctorReport& r, const std::string& text) {
    for (const std::string& f : r.fixes) {
      if (f.find(text) != std::string::npos) return true;
    }
    return false;
  }

  TempDir dir_{"/tmp/shmk-doctor-"};
  bool mounted_ = false;
};

TEST_F(DoctorTest, AStrayDockerenvOnAHostDoesNotMakeItAContainer) {
  Host();
  Write("root/.dockerenv", "");
  DoctorReport r = Run();
  EXPECT_FALSE(r.in_container);
  EXPECT_EQ(r.engine, "host");
  // pid 1's namespaces hidden (no CAP_SYS_PTRACE): pid 2, kthreadd, is asked.
  ASSERT_EQ(::unlink((dir_ / "proc/1/ns/mnt").c_str()), 0);
  ASSERT_EQ(::mkdir((dir_ / "proc/2").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((dir_ / "proc/2/ns").c_str(), 0755), 0);
  Ns("2", "mnt", kHostMnt);
  EXPECT_FALSE(Run().in_container);
}

TEST_F(DoctorTest, TheNamespacesSayItIsAContainerAndTheMarkerNamesTheEngine) {
  Container();
  Write("root/.dockerenv", "");
  DoctorReport r = Run();
  EXPECT_TRUE(r.in_container);
  EXPECT_EQ(r.container_evidence, "its own PID namespace");
  EXPECT_EQ(r.engine, "docker");
  // --pid=host --uts=host: still a mount namespace of its own.
  Host();
  Ns("self", "mnt", kOther);
  r = Run();
  EXPECT_TRUE(r.in_container);
  EXPECT_EQ(r.container_evidence, "a mount namespace other than pid 1's");
}

TEST_F(DoctorTest, LeakedFilesInA2GiBShmGetReclaimAndNoSizeAdvice) {
  Container();
  Write("root/.dockerenv", "");
  if (!Tmpfs("2g")) GTEST_SKIP() << "mounting a tmpfs needs CAP_SYS_ADMIN";
  std::ofstream(dir_ / "shm/torch_99_0") << std::string(3 << 20, 'x');  // closed: no process holds it
  DoctorReport r = Run();
  if (r.memcg_limit_bytes && r.memcg_limit_bytes < 2 * kGiB) GTEST_SKIP() << "this test's own memory limit";
  ASSERT_EQ(r.size_bytes, 2 * kGiB);
  ASSERT_EQ(r.leaked.size(), 1u);
  ASSERT_EQ(r.findings.size(), 1u) << ::testing::PrintToString(r.findings);
  EXPECT_NE(r.findings[0].find("held by no process"), std::string::npos);
  EXPECT_TRUE(AnyFixHas(r, "shmkeeper leaks"));
  EXPECT_TRUE(AnyFixHas(r, "shmkeeper reclaim"));
  EXPECT_TRUE(AnyFixHas(r, "rm " + (dir_ / "shm/torch_99_0")));
  EXPECT_FALSE(AnyFixHas(r, "--shm-size"));
  EXPECT_FALSE(AnyFixHas(r, "shm_size"));
  EXPECT_FALSE(AnyFixHas(r, "install docker"));
}

// Inside a container doctor cannot read the node's default runtime; what it
// sees is whether shmkeeper-runtime ran this container (its preload mount).
// Without it: a bypass (--runtime runc) is named next to the install.
TEST_F(DoctorTest, AContainerShmkeeperDidNotRunIsToldHowABypassDiffersFromNoInstall) {
  Container();
  Write("root/.dockerenv", "");
  if (!Tmpfs("64m")) GTEST_SKIP() << "mounting a tmpfs needs CAP_SYS_ADMIN";
  DoctorReport r = Run();
  EXPECT_TRUE(r.size_problem);
  EXPECT_TRUE(AnyFixHas(r, "docker run --shm-size=2g"));
  EXPECT_TRUE(AnyFixHas(r, "started with another one (--runtime runc): start it without --runtime"));
  for (const std::string& f : r.fixes) EXPECT_FALSE(f.starts_with("node-wide, once: shmkeeper install")) << f;
  // shmkeeper-runtime ran it: never told to install shmkeeper.
  Write("proc/self/mountinfo",
        "900 800 0:5 /usr/local/bin/libshmkeeper-preload.so "
        "/run/shmkeeper/libshmkeeper-preload.so ro,nosuid,nodev - ext4 /dev/vda1 rw\n");
  r = Run();
  EXPECT_TRUE(r.shmkeeper_ran);
  EXPECT_TRUE(AnyFixHas(r, "docker run --shm-size=2g"));
  EXPECT_FALSE(AnyFixHas(r, "install"));
}

TEST_F(DoctorTest, AHostWhereShmkeeperIsDockersDefaultIsToldSo) {
  Host();
  if (!Tmpfs("64m")) GTEST_SKIP() << "mounting a tmpfs needs CAP_SYS_ADMIN";
  ASSERT_EQ(::mkdir((dir_ / "root/etc").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((dir_ / "root/etc/docker").c_str(), 0755), 0);
  Write("root/etc/docker/daemon.json",
        R"({"default-runtime": "shmkeeper", "runtimes": {"shmkeeper": {"path": "/usr/local/bin/shmkeeper-runtime"}}})");
  DoctorReport r = Run();
  EXPECT_FALSE(r.in_container);
  EXPECT_TRUE(AnyFixHas(r, "mount -o remount,size=2g"));
  EXPECT_TRUE(AnyFixHas(r, "already Docker's default runtime"));
  EXPECT_FALSE(AnyFixHas(r, "install"));
  // The positive control: another default runtime gets the install.
  Write("root/etc/docker/daemon.json", R"({"default-runtime": "runc"})");
  EXPECT_TRUE(AnyFixHas(Run(), "shmkeeper install docker --set-as-default"));
}

}  // namespace
}  // namespace shmkeeper

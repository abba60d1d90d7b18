// The lease probe never makes an application wait for the agent (issue 23):
// an agent stopped while it holds a probe's lease is resumed by the open that
// breaks it. Real kernel, real processes (needs root: leases on files the
// test does not own are fine as root).
#include "scan/lease_probe.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace shmkeeper {
namespace {

class LeaseProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/dev/shm/shmk-lease-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/f";
    std::ofstream(path_) << "x";
    struct stat st;
    ASSERT_EQ(::stat(path_.c_str(), &st), 0);
    key_ = FileKey{st.st_dev, st.st_ino};
  }
  void TearDown() override {
    if (child_ > 0) {
      ::kill(child_, SIGKILL);
      ::waitpid(child_, nullptr, 0);
    }
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  // Forks a child that runs `fn` and exits with its result; returns once the
  // child has stopped itself (inside the lease window).
  template <typename Fn>
  void ChildStoppedInWindow(Fn fn) {
    child_ = ::fork();
    ASSERT_GE(child_, 0);
    if (child_ == 0) _exit(fn());
    int status = 0;
    ASSERT_EQ(::waitpid(child_, &status, WUNTRACED), child_);
    ASSERT_TRUE(WIFSTOPPED(status)) << status;
  }
  bool ChildHoldsLease() const {
    std::ifstream locks("/proc/locks");
    for (std::string line; std::getline(locks, line);) {
      std::istringstream f(line);
      std::string n, kind, state, mode, pid;
      f >> n >> kind >> state >> mode >> pid;
      if (kind == "LEASE" && pid == std::to_string(child_)) return true;
    }
    return false;
  }
  char ChildState() const {
    std::ifstream stat("/proc/" + std::to_string(child_) + "/stat");
    std::string all((std::istreambuf_iterator<char>(stat)), {});
    size_t paren = all.rfind(')');
    return paren == std::string::npos || paren + 2 >= all.size() ? '?' : all[paren + 2];
  }
  std::string dir_, path_;
  FileKey key_;
  pid_t child_ = -1;
};

TEST_F(LeaseProbeTest, AnAgentStoppedInsideTheWindowIsResumedByTheOpenThatBreaksIt) {
  ChildStoppedInWindow([&] {
    int dir = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    Result<ProbeVerdict> v = ProbeLease(dir, "f", key_, [] { ::raise(SIGSTOP); });
    return v.ok() && *v == ProbeVerdict::kUnheld ? 0 : 1;
  });
  // Positive control: the stop caught the probe holding its lease.
  ASSERT_TRUE(ChildHoldsLease());
  auto t0 = std::chrono::steady_clock::now();
  int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);  // blocks until the lease is released
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_GE(fd, 0);
  ::close(fd);
  EXPECT_LT(waited, 5.0) << "the open waited for the stopped prober (fs.lease-break-time)";
  int status = 0;
  ASSERT_EQ(::waitpid(child_, &status, 0), child_);
  child_ = -1;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST_F(LeaseProbeTest, WithoutTheBreakSignalTheStoppedHolderStaysStoppedAndTheOpenWouldWait) {
  // The control: the same lease taken with the default break signal (SIGIO,
  // ignored) by a process that stops inside the window.
  ChildStoppedInWindow([&] {
    ::signal(SIGIO, SIG_IGN);
    int fd = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 || ::fcntl(fd, F_SETLEASE, F_WRLCK) != 0) return 1;
    ::raise(SIGSTOP);
    (void)::fcntl(fd, F_SETLEASE, F_UNLCK);
    return 0;
  });
  ASSERT_TRUE(ChildHoldsLease());
  // A non-blocking open breaks the lease as a blocking one would, and says it would wait.
  int fd = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  EXPECT_LT(fd, 0);
  EXPECT_EQ(errno, EWOULDBLOCK);
  if (fd >= 0) ::close(fd);
  ::usleep(200 * 1000);
  EXPECT_EQ(ChildState(), 'T') << "the holder was resumed without the probe's break signal";
  EXPECT_TRUE(ChildHoldsLease());
  ::kill(child_, SIGCONT);
  int status = 0;
  ASSERT_EQ(::waitpid(child_, &status, 0), child_);
  child_ = -1;
}

}  // namespace
}  // namespace shmkeeper

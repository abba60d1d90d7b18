// The agent tests' shared fixture pieces (tests/agent):
//  - PrivateTmpfs: the test process moves into a mount namespace of its own
//    (unshare(CLONE_NEWNS), every mount private) and mounts a tmpfs on a
//    temporary directory; it is detached when the object goes. Needs root.
//  - Children: child processes used as holders (a child holding a file open
//    until killed) and as dead creators (a pid that ran and is reaped); every
//    child still running is killed and reaped when the object goes.
// Use from a fixture's SetUp with ASSERT_NO_FATAL_FAILURE(shm_.Mount()).
// Not thread-safe: one per test or fixture.
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "support/temp_dir.h"

namespace shmkeeper::test {

class PrivateTmpfs {
 public:
  // `prefix`: the temporary directory's (TempDir); `options`: the tmpfs's
  // mount options; `subdir`: the tmpfs is mounted on <tmp>/<subdir> (""
  // = the temporary directory itself), leaving <tmp> for other files.
  explicit PrivateTmpfs(const std::string& prefix, std::string options = "size=64m", std::string subdir = "")
      : tmp_(prefix), options_(std::move(options)), subdir_(std::move(subdir)) {}
  ~PrivateTmpfs() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  PrivateTmpfs(const PrivateTmpfs&) = delete;
  PrivateTmpfs& operator=(const PrivateTmpfs&) = delete;

  void Mount() {
    ASSERT_TRUE(tmp_.ok());
    ASSERT_EQ(::unshare(CLONE_NEWNS), 0) << "needs root: " << ::strerror(errno);
    ASSERT_EQ(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0) << ::strerror(errno);
    dir_ = subdir_.empty() ? tmp_.path() : tmp_ / subdir_;
    if (!subdir_.empty()) {
      ASSERT_EQ(::mkdir(dir_.c_str(), 0755), 0) << ::strerror(errno);
    }
    ASSERT_EQ(::mount("shmk-test-tmpfs", dir_.c_str(), "tmpfs", 0, options_.c_str()), 0) << ::strerror(errno);
    mounted_ = true;
    struct stat st {};
    ASSERT_EQ(::stat(dir_.c_str(), &st), 0);
    dev_ = st.st_dev;
  }

  const std::string& dir() const { return dir_; }
  dev_t dev() const { return dev_; }
  std::string operator/(const std::string& name) const { return dir_ + "/" + name; }
  const TempDir& tmp() const { return tmp_; }

 private:
  TempDir tmp_;
  std::string options_, subdir_, dir_;
  bool mounted_ = false;
  dev_t dev_ = 0;
};

class Children {
 public:
  Children() = default;
  ~Children() {
    for (pid_t p : pids_) {
      ::kill(p, SIGKILL);
      ::waitpid(p, nullptr, 0);
    }
  }
  Children(const Children&) = delete;
  Children& operator=(const Children&) = delete;

  // A child holding each of `paths` open (`flags`) until killed; returns its
  // pid once every open is done (0 with a test failure when one failed).
  pid_t Hold(const std::vector<std::string>& paths, int flags = O_RDONLY) {
    int p[2];
    if (::pipe(p) != 0) {
      ADD_FAILURE() << "pipe: " << ::strerror(errno);
      return 0;
    }
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      char ok = 'r';
      for (const std::string& path : paths) {
        if (::open(path.c_str(), flags) < 0) ok = 'e';
      }
      (void)!::write(p[1], &ok, 1);
      for (;;) ::pause();
    }
    ::close(p[1]);
    char c = 0;
    ssize_t n = ::read(p[0], &c, 1);
    ::close(p[0]);
    pids_.push_back(pid);
    EXPECT_EQ(n, 1);
    EXPECT_EQ(c, 'r') << "a child could not open what it holds";
    return c == 'r' ? pid : 0;
  }
  pid_t Hold(const std::string& path, int flags = O_RDONLY) { return Hold(std::vector<std::string>{path}, flags); }

  // Kills and reaps one child of Hold.
  void Kill(pid_t pid) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    std::erase(pids_, pid);
  }

  // A pid that ran and is gone (reaped).
  static pid_t DeadPid() {
    pid_t pid = ::fork();
    if (pid == 0) ::_exit(0);
    ::waitpid(pid, nullptr, 0);
    return pid;
  }

 private:
  std::vector<pid_t> pids_;
};

}  // namespace shmkeeper::test

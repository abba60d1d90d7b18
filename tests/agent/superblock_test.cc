// The agent's facts are keyed by what the kernel never reuses (issue 35),
// through a started agent watching a private tmpfs in a private mount
// namespace, on the real kernel:
// - a new tmpfs that gets the device number of one that just went (the
//   kernel hands out the lowest free number; the test takes the numbers
//   below it until it gets the same one, then moves that tmpfs into place),
//   with a file at the same inode number:
//   * held by a process on the new tmpfs: held, not the old file's "unheld"
//     (the observer's cached verdict, the scan's "unheld since" and the
//     listing are the old superblock's); the positive control is the old
//     file, leaked before the swap;
//   * with no evidence of its own: unheld, not leaked by the old file's
//     verified creator record (control: the old file, leaked by it);
// - a reclaim of the old tmpfs's leak (the same path, device and inode
//   numbers on the new tmpfs) removes nothing (control: before the swap, the
//   same record removes the old file);
// - a filesystem mark that fails once (ENOSPC, through the observer's seam:
//   fs.fanotify.max_user_marks is node-wide): the tmpfs's files are kept
//   (unobserved) while it is unmarked, the next scan marks it and judges
//   them; the control, with no failure, judges the same file at once.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/event_send.h"
#include "node/engine.h"
#include "node/reclaim.h"
#include "support/private_tmpfs.h"
#include "support/temp_dir.h"

namespace shmkeeper {
namespace {

class SuperblockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(shm_.Mount());
    dir_ = shm_.dir();
    dev_ = shm_.dev();
  }
  void TearDown() override {
    if (agent_) agent_->Stop();
    agent_.reset();
  }

  static dev_t DevOf(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
    return st.st_dev;
  }
  static ino_t InoOf(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
    return st.st_ino;
  }

  // Unmounts the tmpfs at dir_ and mounts a new one there with the same
  // device number: tmpfs are mounted on scratch directories (each takes the
  // lowest free number) until one has dev_, which is moved onto dir_.
  void NewTmpfsOnTheSameNumber() {
    ASSERT_EQ(::umount2(dir_.c_str(), 0), 0) << ::strerror(errno);
    std::vector<std::string> scratch;
    bool moved = false;
    for (int i = 0; i < 256 && !moved; ++i) {
      std::string s = tmp_.path() + "/scratch" + std::to_string(i);
      ASSERT_EQ(::mkdir(s.c_str(), 0755), 0);
      ASSERT_EQ(::mount("shmk-sb-test", s.c_str(), "tmpfs", 0, "size=64m"), 0) << ::strerror(errno);
      if (DevOf(s) == dev_) {
        ASSERT_EQ(::mount(s.c_str(), dir_.c_str(), nullptr, MS_MOVE, nullptr), 0) << ::strerror(errno);
        moved = true;
      } else {
        scratch.push_back(s);
      }
    }
    for (const std::string& s : scratch) ::umount2(s.c_str(), MNT_DETACH);
    ASSERT_TRUE(moved) << "device number " << dev_ << " never came back";
    ASSERT_EQ(DevOf(dir_), dev_);
  }

  void Make(const std::string& name) {
    int fd = ::open((dir_ + "/" + name).c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0) << name;
    ASSERT_EQ(::write(fd, "data", 4), 4);
    ::close(fd);
  }
  // A child holding `name` open until killed.
  pid_t Hold(const std::string& name) {
    pid_t pid = children_.Hold(dir_ + "/" + name);
    EXPECT_GT(pid, 0) << name;
    return pid;
  }
  static pid_t DeadPid() { return test::Children::DeadPid(); }

  void StartAgent(ObserverOptions opts = {}) {
    config_.agent.event_socket = tmp_.path() + "/events.sock";
    config_.agent.observe = true;
    config_.agent.scan_interval = std::chrono::hours(1);  // scans only on demand
    config_.leaks.grace = std::chrono::seconds(0);
    ScanOptions scan;
    scan.runtime_roots = {};
    scan.docker_socket = "";
    scan.host_shm_dirs = {dir_};
    scan.grace = config_.leaks.grace;
    agent_ = std::make_unique<Agent>(config_, scan);
    agent_->SetObserverOptions(std::move(opts));
    Status s = agent_->Start();
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_STREQ(agent_->observer_mode(), "fanotify");
  }
  std::optional<LeakRecord> LeakOf(const std::string& name) {
    for (const LeakRecord& l : agent_->Snapshot()->leaks) {
      if (l.path == dir_ + "/" + name) return l;
    }
    return std::nullopt;
  }
  int64_t Kept(const std::string& reason) {
    auto snap = agent_->Snapshot();
    auto it = snap->kept_by_reason.find(reason);
    return it == snap->kept_by_reason.end() ? 0 : it->second;
  }

  // A child that, with dir_ as its /dev/shm (its own mount namespace),
  // creates `name`, sends the creator record while holding it, waits until
  // the agent has recorded it, and exits (its creator is then dead).
  void CreateWithRecord(const std::string& name) {
    size_t before = agent_->creators().size();
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(p[1]);
      if (::unshare(CLONE_NEWNS) != 0 || ::mount(dir_.c_str(), "/dev/shm", nullptr, MS_BIND, nullptr) != 0) ::_exit(2);
      int fd = ::open(("/dev/shm/" + name).c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd < 0 || ::write(fd, "data", 4) != 4) ::_exit(3);
      std::string msg = R"({"type":"create","path":"/dev/shm/)" + name + R"(","fd":)" + std::to_string(fd) + "}";
      if (!SendEvent(config_.agent.event_socket, msg).ok()) ::_exit(4);
      char c;
      (void)!::read(p[0], &c, 1);  // until the parent saw the record
      ::_exit(0);
    }
    ::close(p[0]);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (agent_->creators().size() == before && std::chrono::steady_clock::now() < deadline) {
      ::sched_yield();  // the receiver thread records it as it reads the datagram
    }
    EXPECT_GT(agent_->creators().size(), before) << "the creator record was not taken";
    ::close(p[1]);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }

  test::PrivateTmpfs shm_{"/tmp/shmk-superblock-", "size=64m", "shm"};
  const test::TempDir& tmp_ = shm_.tmp();
  test::Children children_;
  std::string dir_;
  dev_t dev_ = 0;
  Config config_;
  std::unique_ptr<Agent> agent_;
};

TEST_F(SuperblockTest, AHeldFileOnANewTmpfsWithAReusedNumberIsHeld) {
  std::string name = "torch_" + std::to_string(DeadPid()) + "_0";
  Make(name);
  ino_t ino = InoOf(dir_ + "/" + name);
  StartAgent();
  agent_->ScanNow();
  std::optional<LeakRecord> old = LeakOf(name);
  ASSERT_TRUE(old && old->state == LeakState::kLeaked) << "control: the old tmpfs's file, unheld, is leaked";

  NewTmpfsOnTheSameNumber();
  Make(name);
  ASSERT_EQ(InoOf(dir_ + "/" + name), ino) << "tmpfs numbers each superblock's inodes alike";
  pid_t holder = Hold(name);
  agent_->ScanNow();
  EXPECT_FALSE(LeakOf(name)) << "a file held on the new tmpfs inherited the old file's verdict";
  EXPECT_EQ(agent_->observer_counters().superblock_changes, 1);
  // The new tmpfs is observed: the holder's close is seen.
  children_.Kill(holder);
  agent_->ScanNow();
  std::optional<LeakRecord> now = LeakOf(name);
  ASSERT_TRUE(now);
  EXPECT_EQ(now->state, LeakState::kLeaked) << "unheld after its holder went (the new tmpfs is marked)";
}

TEST_F(SuperblockTest, ACreatorRecordOfTheOldTmpfsIsNoEvidenceOnTheNewOne) {
  StartAgent();
  CreateWithRecord("plain");
  ino_t ino = InoOf(dir_ + "/plain");
  agent_->ScanNow();
  std::optional<LeakRecord> old = LeakOf("plain");
  ASSERT_TRUE(old);
  ASSERT_EQ(old->creator_source, "record");
  ASSERT_EQ(old->state, LeakState::kLeaked) << "control: the record makes the old file leaked";

  NewTmpfsOnTheSameNumber();
  Make("plain");
  ASSERT_EQ(InoOf(dir_ + "/plain"), ino);
  agent_->ScanNow();
  std::optional<LeakRecord> now = LeakOf("plain");
  ASSERT_TRUE(now) << "an unheld file is listed";
  EXPECT_EQ(now->state, LeakState::kUnheld) << "the old file's creator record made the new one leaked";
  EXPECT_EQ(now->creator_source, "");
}

TEST_F(SuperblockTest, AReclaimOfTheOldTmpfsLeakRemovesNothingOnTheNewOne) {
  std::string name = "torch_" + std::to_string(DeadPid()) + "_0";
  std::string control_name = name.substr(0, name.size() - 1) + "1";  // torch_<pid>_1
  Make(name);
  Make(control_name);
  StartAgent();
  agent_->ScanNow();
  std::optional<LeakRecord> old = LeakOf(name), control = LeakOf(control_name);
  ASSERT_TRUE(old && control && old->reclaimable && control->reclaimable);
  ReclaimOutcome first = ReclaimLeaks({*control}, /*dry_run=*/false);
  ASSERT_EQ(first.reclaimed.size(), 1u) << "control: the record removes the file of the tmpfs it was made on";

  NewTmpfsOnTheSameNumber();
  Make(name);
  ASSERT_EQ(InoOf(dir_ + "/" + name), old->key.ino);
  ReclaimOutcome out = ReclaimLeaks({*old}, /*dry_run=*/false);
  EXPECT_TRUE(out.reclaimed.empty()) << "the new tmpfs's file was removed on the old one's verdict";
  ASSERT_EQ(out.skipped.size(), 1u);
  EXPECT_EQ(out.skipped[0].reason, SkipReason::kChanged);
  struct stat st {};
  EXPECT_EQ(::stat((dir_ + "/" + name).c_str(), &st), 0);
}

TEST_F(SuperblockTest, AFilesystemMarkThatFailsOnceIsRetriedAndItsFilesKeptMeanwhile) {
  std::string name = "torch_" + std::to_string(DeadPid()) + "_0";
  Make(name);
  int faults = 1;
  ObserverOptions opts;
  opts.mark_fault = [&faults](dev_t) {
    return faults-- > 0 ? Status::FromErrno(ENOSPC, "fanotify_mark(FAN_MARK_FILESYSTEM)") : Status::Ok();
  };
  StartAgent(opts);  // its first scan's mark fails
  std::optional<LeakRecord> kept = LeakOf(name);
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->state, LeakState::kUnheld) << "judged by sampling /proc while its tmpfs was unmarked";
  EXPECT_FALSE(kept->reclaimable);
  EXPECT_EQ(Kept("unobserved"), 1);
  ObserverCounters c = agent_->observer_counters();
  EXPECT_EQ(c.mark_failures, 1);
  EXPECT_EQ(c.unmarked, 1);

  agent_->ScanNow();  // tries again
  c = agent_->observer_counters();
  EXPECT_EQ(c.mark_retries, 1);
  EXPECT_EQ(c.unmarked, 0);
  EXPECT_EQ(Kept("unobserved"), 0);
  std::optional<LeakRecord> judged = LeakOf(name);
  ASSERT_TRUE(judged);
  EXPECT_EQ(judged->state, LeakState::kLeaked) << "marked now: judged as any observed file";
}

TEST_F(SuperblockTest, ControlWithoutAMarkFailureTheSameFileIsJudgedAtOnce) {
  std::string name = "torch_" + std::to_string(DeadPid()) + "_0";
  Make(name);
  StartAgent();
  std::optional<LeakRecord> l = LeakOf(name);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->state, LeakState::kLeaked);
  EXPECT_EQ(Kept("unobserved"), 0);
  EXPECT_EQ(agent_->observer_counters().mark_failures, 0);
}

}  // namespace
}  // namespace shmkeeper

// Bounded per pod (issue 35, item 3; docs/agent.md#bounded-per-pod): the
// scanner lists at most ScanOptions::max_files_per_pod entries of a tmpfs.
// - MeasureShmDir stops after the limit (subdirectories count), keeps
//   nothing of what it met, and stat's no entry past it;
// - on a real tmpfs watched by a real observer, with a scanner of limit 5:
//   under the limit a true leak (torch_<dead pid>_…) is leaked (the positive
//   control); over it the pod is reported (files from statfs), no file of it
//   is judged (kept_by_reason files_over_limit), no probe is made there, a
//   light scan lists nothing (the bounded result is reused while statfs shows
//   more inodes than the limit) and a walk lists no more than the limit;
//   back under the limit, a light scan lists it again and the leak is leaked
//   again.
// Each test runs on a private tmpfs in a private mount namespace.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "node/node_scan.h"
#include "node/observer.h"
#include "node/reporter.h"
#include "scan/shm_dir.h"
#include "support/private_tmpfs.h"
#include "support/temp_dir.h"

namespace shmkeeper {
namespace {

constexpr size_t kLimit = 5;

void Touch(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << path << ": " << ::strerror(errno);
  ::close(fd);
}

// Runs `fn` in a child (another process than the agent's: its creates are
// events) and reaps it.
void InChild(const std::function<void()>& fn) {
  pid_t pid = ::fork();
  if (pid == 0) {
    fn();
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(MeasureShmDirBound, StopsAfterTheLimitAndKeepsNothingItMet) {
  test::TempDir tmp;
  ASSERT_TRUE(tmp.ok());
  for (const char* f : {"a", "b", "c"}) Touch(tmp / f);
  ASSERT_EQ(::mkdir((tmp / "sub").c_str(), 0755), 0);
  for (const char* f : {"x", "y", "z"}) Touch(tmp / "sub" + "/" + f);
  // A fresh descriptor per walk, as each scan opens one (a walk reads its
  // duplicate to the end: the offset is shared).
  auto open_dir = [&] { return UniqueFd(::open(tmp.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); };
  UniqueFd fd = open_dir();
  ASSERT_TRUE(fd.valid());
  // 7 entries: a, b, c, sub and sub's three.
  Result<ShmDir> whole = MeasureShmDir(fd.get(), 8, 7);
  ASSERT_TRUE(whole.ok());
  EXPECT_FALSE(whole->over_limit);
  EXPECT_EQ(whole->files.size(), 6u);
  EXPECT_EQ(whole->entries, 7);
  for (size_t limit : {1u, 4u, 6u}) {
    UniqueFd again = open_dir();
    Result<ShmDir> over = MeasureShmDir(again.get(), 8, limit);
    ASSERT_TRUE(over.ok());
    EXPECT_TRUE(over->over_limit) << limit;
    EXPECT_TRUE(over->files.empty()) << limit;
    EXPECT_EQ(over->linked_bytes, 0);
    EXPECT_EQ(over->entries, static_cast<int64_t>(limit)) << "stat'ed past the limit";
  }
  Result<ShmDir> fs = MeasureShmFs(fd.get());
  ASSERT_TRUE(fs.ok());
  EXPECT_EQ(fs->entries, 0);
  EXPECT_TRUE(fs->files.empty());
}

class PodBoundTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(shm_.Mount());
    dir_ = shm_.dir();
    observer_ = std::make_unique<Observer>([] {}, [] {}, &reporter_);
    Status s = observer_->Start();
    ASSERT_TRUE(s.ok()) << s.message();
    ScanOptions opts;
    opts.runtime_roots = {};
    opts.docker_socket = "";
    opts.host_shm_dirs = {dir_};
    opts.grace = std::chrono::seconds(0);
    opts.max_files_per_pod = kLimit;
    opts.observer = observer_.get();
    scanner_ = std::make_unique<Scanner>(opts);
  }
  void TearDown() override {
    scanner_.reset();
    observer_.reset();
  }
  static const PodRecord* Pod(const NodeSnapshot& snap, const std::string& dir) {
    for (const PodRecord& p : snap.pods) {
      if (p.host_dir == dir) return &p;
    }
    return nullptr;
  }
  static const LeakRecord* Leak(const NodeSnapshot& snap, const std::string& path) {
    for (const LeakRecord& l : snap.leaks) {
      if (l.path == path) return &l;
    }
    return nullptr;
  }
  // Creates `names` in a child process.
  void Create(const std::vector<std::string>& names) {
    InChild([&] {
      for (const std::string& n : names) {
        int fd = ::open((dir_ + "/" + n).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0) ::_exit(1);
        ::close(fd);
      }
    });
  }

  test::PrivateTmpfs shm_{"/tmp/shmk-bound-", "size=16m,nr_inodes=1000"};
  std::string dir_;
  Reporter reporter_;
  std::unique_ptr<Observer> observer_;
  std::unique_ptr<Scanner> scanner_;
};

TEST_F(PodBoundTest, OverTheLimitIsReportedKeptAndNeverRelistedByALightScan) {
  std::string leak = "torch_" + std::to_string(test::Children::DeadPid()) + "_0";
  Create({leak, "a", "b", "c"});
  // Under the limit: judged as ever (the positive control).
  NodeSnapshot snap = scanner_->Scan(ScanDepth::kWalk);
  const PodRecord* pod = Pod(snap, dir_);
  ASSERT_NE(pod, nullptr);
  EXPECT_FALSE(pod->files_over_limit);
  EXPECT_EQ(pod->files, 4);
  const LeakRecord* l = Leak(snap, dir_ + "/" + leak);
  ASSERT_NE(l, nullptr) << "the true leak was not judged under the limit";
  EXPECT_EQ(l->state, LeakState::kLeaked);
  snap = scanner_->Scan(ScanDepth::kObserve);
  ASSERT_NE(Leak(snap, dir_ + "/" + leak), nullptr);
  EXPECT_EQ(Leak(snap, dir_ + "/" + leak)->state, LeakState::kLeaked);

  // Over it (6 entries, limit 5): reported, nothing judged.
  Create({"d", "e"});
  snap = scanner_->Scan(ScanDepth::kObserve);
  pod = Pod(snap, dir_);
  ASSERT_NE(pod, nullptr);
  EXPECT_TRUE(pod->files_over_limit);
  EXPECT_EQ(pod->files_limit, static_cast<int32_t>(kLimit));
  EXPECT_EQ(pod->files, 6) << "statfs: inodes in use but the root";
  EXPECT_TRUE(pod->top_segments.empty());
  EXPECT_EQ(Leak(snap, dir_ + "/" + leak), nullptr) << "a file of a tmpfs over the limit was judged";
  EXPECT_EQ(snap.leaked_bytes, 0);
  EXPECT_EQ(snap.kept_by_reason["files_over_limit"], 6);
  EXPECT_LE(snap.listed_entries, static_cast<int64_t>(kLimit));
  int64_t probes = observer_->counters().probes;

  // More files: light scans list nothing, statfs counts them, no probe.
  std::vector<std::string> more;
  for (int i = 0; i < 20; ++i) more.push_back("m" + std::to_string(i));
  Create(more);
  for (int i = 0; i < 2; ++i) {
    snap = scanner_->Scan(ScanDepth::kObserve);
    pod = Pod(snap, dir_);
    ASSERT_NE(pod, nullptr);
    EXPECT_TRUE(pod->files_over_limit);
    EXPECT_EQ(pod->files, 26);
    EXPECT_EQ(snap.listed_entries, 0) << "a light scan relisted a tmpfs over the limit";
    EXPECT_EQ(snap.kept_by_reason["files_over_limit"], 26);
  }
  // A walk lists it again, bounded.
  snap = scanner_->Scan(ScanDepth::kWalk);
  EXPECT_TRUE(Pod(snap, dir_)->files_over_limit);
  EXPECT_EQ(snap.listed_entries, static_cast<int64_t>(kLimit));
  EXPECT_EQ(Leak(snap, dir_ + "/" + leak), nullptr);
  EXPECT_EQ(observer_->counters().probes, probes) << "a file over the limit was probed";

  // Back under the limit: the next light scan lists and judges it again.
  InChild([&] {
    for (const std::string& n : more) ::unlink((dir_ + "/" + n).c_str());
    for (const char* n : {"d", "e"}) ::unlink((dir_ + "/" + n).c_str());
  });
  snap = scanner_->Scan(ScanDepth::kObserve);
  pod = Pod(snap, dir_);
  ASSERT_NE(pod, nullptr);
  EXPECT_FALSE(pod->files_over_limit);
  EXPECT_EQ(pod->files, 4);
  EXPECT_EQ(snap.kept_by_reason.count("files_over_limit"), 0u);
  l = Leak(snap, dir_ + "/" + leak);
  ASSERT_NE(l, nullptr) << "back under the limit, the true leak is not judged";
  EXPECT_EQ(l->state, LeakState::kLeaked);
}

}  // namespace
}  // namespace shmkeeper

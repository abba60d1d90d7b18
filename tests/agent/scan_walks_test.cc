// Cost that follows events (issue 35): a scan that does not walk reads /proc
// wholesale (every process, every mount namespace's mountinfo, a holder's
// whole fd table) only for a new candidate, never on every scan.
// NodeSnapshot::proc_walks (shmkeeper_scan_proc_walks_total) counts those
// reads; on a real tmpfs watched by a real observer, with idle scans:
// - a leaked torch_<dead pid>_0 reads its evidence when it becomes a
//   candidate, then costs no read across idle scans and stays leaked; the
//   positive control: a second such file, new, is read (the counter moves);
// - 200 files held by one process (the top segments show their holder)
//   cost no read across idle scans; the control: the holder's exit shows
//   (the files become unheld) at the next scan.
// Without the evidence kept per file, the leaked file's every scan read the
// node's references (ReadNodeRefs over ScanProcesses); without the holders
// kept per top segment, every scan re-read the holder's fd table once per
// top file (ProcessHolds).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "node/node_scan.h"
#include "node/observer.h"
#include "node/reporter.h"
#include "support/private_tmpfs.h"

namespace shmkeeper {
namespace {

class ScanWalksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(shm_.Mount());
    observer_ = std::make_unique<Observer>([] {}, [] {}, &reporter_);
    Status s = observer_->Start();
    ASSERT_TRUE(s.ok()) << s.message();
    ScanOptions opts;
    opts.runtime_roots = {};
    opts.docker_socket = "";
    opts.host_shm_dirs = {shm_.dir()};
    opts.grace = std::chrono::seconds(0);
    opts.observer = observer_.get();
    scanner_ = std::make_unique<Scanner>(opts);
  }
  void TearDown() override {
    scanner_.reset();
    observer_.reset();
  }

  // Files created and written by a child (another process than the
  // agent's: its creates and closes are events), which then exits.
  void Create(const std::vector<std::string>& names) {
    pid_t pid = ::fork();
    if (pid == 0) {
      for (const std::string& n : names) {
        int fd = ::open((shm_ / n).c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 || ::write(fd, "data", 4) != 4) ::_exit(1);
        ::close(fd);
      }
      ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  static int64_t Walks(const NodeSnapshot& snap) {
    return std::accumulate(snap.proc_walks.begin(), snap.proc_walks.end(), int64_t{0},
                           [](int64_t n, const auto& kv) { return n + kv.second; });
  }
  static std::string Describe(const NodeSnapshot& snap) {
    std::string out;
    for (const auto& [what, n] : snap.proc_walks) out += what + "=" + std::to_string(n) + " ";
    return out;
  }
  const LeakRecord* Leak(const NodeSnapshot& snap, const std::string& name) const {
    for (const LeakRecord& l : snap.leaks) {
      if (l.path == shm_ / name) return &l;
    }
    return nullptr;
  }

  test::PrivateTmpfs shm_{"/tmp/shmk-scan-walks-"};
  test::Children children_;
  Reporter reporter_;
  std::unique_ptr<Observer> observer_;
  std::unique_ptr<Scanner> scanner_;
};

TEST_F(ScanWalksTest, ALeakedTorchFileCostsNoWalkAcrossIdleScans) {
  const std::string leak = "torch_" + std::to_string(test::Children::DeadPid()) + "_0";
  Create({leak});
  NodeSnapshot snap = scanner_->Scan(ScanDepth::kWalk);  // start-up
  snap = scanner_->Scan(ScanDepth::kObserve);
  ASSERT_NE(Leak(snap, leak), nullptr);
  EXPECT_EQ(Leak(snap, leak)->state, LeakState::kLeaked);
  const int64_t settled = Walks(snap);
  for (int i = 0; i < 5; ++i) {
    snap = scanner_->Scan(ScanDepth::kObserve);
    ASSERT_NE(Leak(snap, leak), nullptr);
    EXPECT_EQ(Leak(snap, leak)->state, LeakState::kLeaked) << "scan " << i;
    EXPECT_EQ(Walks(snap), settled) << "an idle scan read /proc wholesale: " << Describe(snap);
  }
  EXPECT_GT(snap.proc_walks["references"], 0) << "the evidence was never read: " << Describe(snap);

  // Control: a new candidate is read, and judged on what was read.
  const std::string second = "torch_" + std::to_string(test::Children::DeadPid()) + "_0";
  Create({second});
  snap = scanner_->Scan(ScanDepth::kObserve);
  ASSERT_NE(Leak(snap, second), nullptr);
  EXPECT_EQ(Leak(snap, second)->state, LeakState::kLeaked);
  EXPECT_GT(Walks(snap), settled) << "a new candidate was judged without reading its evidence";
}

TEST_F(ScanWalksTest, TwoHundredHeldFilesCostNoWalkAcrossIdleScans) {
  std::vector<std::string> names, paths;
  for (int i = 0; i < 200; ++i) {
    names.push_back("held" + std::to_string(i));
    paths.push_back(shm_ / names.back());
  }
  Create(names);
  pid_t holder = children_.Hold(paths);
  ASSERT_GT(holder, 0);
  NodeSnapshot snap = scanner_->Scan(ScanDepth::kWalk);  // start-up: the walk seeds the observer
  snap = scanner_->Scan(ScanDepth::kObserve);
  snap = scanner_->Scan(ScanDepth::kObserve);
  const int64_t settled = Walks(snap);
  for (int i = 0; i < 5; ++i) {
    snap = scanner_->Scan(ScanDepth::kObserve);
    EXPECT_EQ(snap.unheld_bytes, 0) << "scan " << i;
    EXPECT_EQ(Walks(snap), settled) << "an idle scan read /proc wholesale: " << Describe(snap);
  }
  ASSERT_EQ(snap.pods.size(), 1u);
  ASSERT_FALSE(snap.pods[0].top_segments.empty());
  for (const SegmentRecord& seg : snap.pods[0].top_segments) {
    EXPECT_EQ(seg.state, LeakState::kHeld) << seg.path;
    ASSERT_FALSE(seg.holders.empty()) << seg.path << ": its holder is not shown";
    EXPECT_EQ(seg.holders.front().pid, holder) << seg.path;
  }

  // Control: the holder goes; the next scan sees every file unheld.
  children_.Kill(holder);
  snap = scanner_->Scan(ScanDepth::kObserve);
  EXPECT_EQ(snap.leaks.size(), 200u) << "the holder's exit was not seen";
  EXPECT_GT(snap.unheld_bytes, 0);
}

}  // namespace
}  // namespace shmkeeper

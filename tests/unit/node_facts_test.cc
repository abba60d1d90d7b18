// NodeFacts' invalidation rule (node/node_facts.h) against a FakeClock and an
// empty /proc: a signal reads the facts again, no signal reuses them, and the
// maximum age is checked by advancing the clock, never by waiting. The mount
// signal (poll on a namespace's mountinfo) is the real kernel's: it is tested
// with a real agent in tests/integration/test_leak_facts.py.
#include "node/node_facts.h"

#include <errno.h>
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "base/clock.h"
#include "support/temp_dir.h"

namespace shmkeeper {
namespace {

using std::chrono::seconds;

class NodeFactsTest : public ::testing::Test {
 protected:
  NodeFacts::Options Opts() {
    NodeFacts::Options o;
    o.proc = dir_.path();  // no process: a read is cheap and counted all the same
    o.sys = dir_.path();
    o.dev = dir_.path();
    o.max_age = seconds(300);
    o.clock = &clock_;
    o.mount_namespaces = [this]() -> Result<std::vector<uint64_t>> {
      if (!answers_) return Status::FromErrno(ENOTTY, "NS_MNT_GET_INFO");  // a kernel before 6.12
      return namespaces_;
    };
    return o;
  }
  // One scan that uses the facts; the reads it made.
  int64_t ScanUsing(NodeFacts* f, std::set<dev_t> devices = {1}, NodeFacts::PodProcesses pods = {{10, 100}}) {
    int64_t before = f->reads();
    f->BeginScan(std::move(devices), std::move(pods));
    (void)f->Refs();
    (void)f->Procs();
    (void)f->Refs();
    f->EndScan();
    return f->reads() - before;
  }

  test::TempDir dir_;
  FakeClock clock_;
  // The mount namespace ids on the "node", sorted, and whether asking works.
  std::vector<uint64_t> namespaces_{4, 17734, 21818};
  bool answers_ = true;
};

TEST_F(NodeFactsTest, NoSignalReusesTheFacts) {
  ASSERT_TRUE(dir_.ok());
  NodeFacts f(Opts());
  EXPECT_EQ(ScanUsing(&f), 1);
  EXPECT_EQ(f.last_reason(), "never");
  for (int i = 0; i < 20; ++i) {
    clock_.Advance(seconds(10));
    EXPECT_EQ(ScanUsing(&f), 0) << "scan " << i;
  }
  EXPECT_EQ(f.reads(), 1);
}

TEST_F(NodeFactsTest, MaximumAgeReadsAgain) {
  ASSERT_TRUE(dir_.ok());
  NodeFacts f(Opts());
  EXPECT_EQ(ScanUsing(&f), 1);
  clock_.Advance(seconds(299));
  EXPECT_EQ(ScanUsing(&f), 0);
  clock_.Advance(seconds(1));
  EXPECT_EQ(ScanUsing(&f), 1);
  EXPECT_EQ(f.last_reason(), "age");
  clock_.Advance(seconds(10));
  EXPECT_EQ(ScanUsing(&f), 0);  // the age counts from the last read
}

TEST_F(NodeFactsTest, EachSignalReadsAgainOnce) {
  ASSERT_TRUE(dir_.ok());
  NodeFacts f(Opts());
  EXPECT_EQ(ScanUsing(&f), 1);
  EXPECT_EQ(ScanUsing(&f, {1, 2}), 1);  // a new tmpfs
  EXPECT_EQ(f.last_reason(), "devices");
  EXPECT_EQ(ScanUsing(&f, {1, 2}), 0);
  EXPECT_EQ(ScanUsing(&f, {1, 2}, {{10, 100}, {11, 200}}), 1);  // a new container
  EXPECT_EQ(f.last_reason(), "pods");
  EXPECT_EQ(ScanUsing(&f, {1, 2}, {{10, 100}, {11, 300}}), 1);  // the same pid, another process
  EXPECT_EQ(ScanUsing(&f, {1, 2}, {{10, 100}, {11, 300}}), 0);
  f.Invalidate();
  EXPECT_EQ(ScanUsing(&f, {1, 2}, {{10, 100}, {11, 300}}), 1);
  EXPECT_EQ(f.last_reason(), "invalidated");
  EXPECT_EQ(ScanUsing(&f, {1, 2}, {{10, 100}, {11, 300}}), 0);
}

TEST_F(NodeFactsTest, RefreshReadsOncePerScan) {
  ASSERT_TRUE(dir_.ok());
  NodeFacts f(Opts());
  EXPECT_EQ(ScanUsing(&f), 1);
  f.BeginScan({1}, {{10, 100}});
  (void)f.Refs();
  EXPECT_EQ(f.reads(), 1);  // still good
  EXPECT_FALSE(f.ReadThisScan());
  f.Refresh();  // a verdict that may remove a file: facts of this scan
  EXPECT_TRUE(f.ReadThisScan());
  f.Refresh();
  EXPECT_EQ(f.reads(), 2);
  EXPECT_EQ(f.last_reason(), "refresh");
  f.EndScan();
}

TEST_F(NodeFactsTest, AScanThatDoesNotUseThemForgetsThem) {
  ASSERT_TRUE(dir_.ok());
  NodeFacts f(Opts());
  EXPECT_EQ(ScanUsing(&f), 1);
  f.BeginScan({1}, {{10, 100}});
  f.EndScan();  // no candidate any more
  EXPECT_EQ(ScanUsing(&f), 1);
  EXPECT_EQ(f.last_reason(), "never");
}

TEST_F(NodeFactsTest, AWalkIsAdoptedNotCounted) {
  ASSERT_TRUE(dir_.ok());
  NodeFacts f(Opts());
  f.BeginScan({1}, {{10, 100}});
  ProcTable walked;
  walked.proc = dir_.path();
  f.Adopt(walked);
  (void)f.Refs();
  EXPECT_TRUE(f.ReadThisScan());
  f.EndScan();
  EXPECT_EQ(f.reads(), 0);
  // The walk was made before the newest namespace was asked: one that was
  // made during it may be missing, so the next scan reads once...
  EXPECT_EQ(ScanUsing(&f), 1);
  EXPECT_EQ(f.last_reason(), "namespaces_unknown");
  EXPECT_EQ(ScanUsing(&f), 0);  // ...and then they are reused
}

TEST_F(NodeFactsTest, ANewMountNamespaceReadsAgainOnceWhereverItsIdSorts) {
  ASSERT_TRUE(dir_.ok());
  NodeFacts f(Opts());
  EXPECT_EQ(ScanUsing(&f), 1);
  EXPECT_EQ(ScanUsing(&f), 0);  // control: nothing made
  // `unshare -m` on another CPU: an id below the highest known (Linux 6.18
  // hands ids out in per-CPU batches).
  namespaces_ = {4, 17734, 17735, 21818};
  EXPECT_EQ(ScanUsing(&f), 1);
  EXPECT_EQ(f.last_reason(), "namespace_made");
  EXPECT_EQ(ScanUsing(&f), 0);
  namespaces_ = {4, 17734, 17735, 21818, 21819};  // and above it
  EXPECT_EQ(ScanUsing(&f), 1);
  EXPECT_EQ(f.last_reason(), "namespace_made");
  EXPECT_EQ(ScanUsing(&f), 0);
}

TEST_F(NodeFactsTest, ANamespaceGoneReadsNothingButAnotherMadeInItsPlaceDoes) {
  ASSERT_TRUE(dir_.ok());
  NodeFacts f(Opts());
  EXPECT_EQ(ScanUsing(&f), 1);
  namespaces_ = {4, 21818};  // 17734 went (rule 8 drops its watch)
  EXPECT_EQ(ScanUsing(&f), 0);
  namespaces_ = {4, 17740, 21818};  // the same count as at the read, one id new
  EXPECT_EQ(ScanUsing(&f), 1);
  EXPECT_EQ(f.last_reason(), "namespace_made");
}

TEST_F(NodeFactsTest, NamespacesThatCannotBeToldAreRetriedAndNeverReusedMeanwhile) {
  ASSERT_TRUE(dir_.ok());
  NodeFacts f(Opts());
  EXPECT_EQ(ScanUsing(&f), 1);
  answers_ = false;  // the ask fails (an old kernel, an error)
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(ScanUsing(&f), 1) << "scan " << i;
    EXPECT_EQ(f.last_reason(), "namespaces_unknown");
  }
  answers_ = true;              // answered again: not remembered as a mode
  EXPECT_EQ(ScanUsing(&f), 1);  // the last read could not ask
  EXPECT_EQ(ScanUsing(&f), 0);
  EXPECT_EQ(ScanUsing(&f), 0);
}

}  // namespace
}  // namespace shmkeeper

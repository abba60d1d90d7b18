// The Scanner directly (issue 35): a watched host directory on a real tmpfs
// (a temporary directory in /dev/shm), real files, the real /proc walked for
// holders (the test itself holds one), creator records in a CreatorBook, and
// time on a FakeClock: leaks.grace is checked by advancing the clock between
// scans, never by waiting. No containers: no runtime roots, no Docker.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "base/clock.h"
#include "node/creator_book.h"
#include "node/node_scan.h"
#include "node/quarantine.h"
#include "scan/fs_identity.h"
#include "scan/proc_table.h"
#include "support/temp_dir.h"

namespace shmkeeper {
namespace {

constexpr std::chrono::seconds kGrace{60};

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// A process that has exited and been reaped: its pid runs no more.
CreatorRecord DeadCreator() {
  CreatorRecord rec;
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  if (child > 0) {
    (void)ReadProcStat(child, nullptr, &rec.start_ticks);
    ::waitpid(child, nullptr, 0);
  }
  rec.host_pid = child;
  rec.ns_pid = child;
  rec.command = "exited";
  return rec;
}

// The test process itself: a creator that runs.
CreatorRecord LiveCreator() {
  CreatorRecord rec;
  rec.host_pid = ::getpid();
  rec.ns_pid = ::getpid();
  (void)ReadProcStat(rec.host_pid, nullptr, &rec.start_ticks);
  rec.command = "test";
  return rec;
}

class ScannerTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(dir_.ok()); }

  ScanOptions Options(bool read_only = false) {
    ScanOptions o;
    o.runtime_roots = {};
    o.docker_socket = "";
    o.host_shm_dirs = {dir_.path()};
    o.grace = kGrace;
    o.creators = book_;
    o.read_only = read_only;
    o.clock = &clock_;
    return o;
  }
  // A file of the pod; with `creator`, the book's record of who made it.
  FileKey File(const std::string& name, const CreatorRecord* creator = nullptr) {
    std::string path = dir_ / name;
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    EXPECT_GE(fd, 0) << path;
    const std::string page(4096, 'x');  // written: a scan counts the pages a file holds
    EXPECT_EQ(::write(fd, page.data(), page.size()), 4096);
    struct stat st {};
    EXPECT_EQ(::fstat(fd, &st), 0);
    FileKey key{st.st_dev, st.st_ino};
    if (creator) {
      CreatorRecord rec = *creator;
      Result<uint64_t> fsid = FilesystemId(fd);
      rec.fsid = fsid.ok() ? *fsid : 0;
      EXPECT_TRUE(book_->Record(key, rec).ok());
    }
    ::close(fd);
    return key;
  }
  static const LeakRecord* Find(const NodeSnapshot& snap, const std::string& path) {
    for (const LeakRecord& l : snap.leaks) {
      if (l.path == path) return &l;
    }
    return nullptr;
  }

  test::TempDir dir_{"/dev/shm/shmk-scanner-test-"};
  FakeClock clock_;
  std::shared_ptr<CreatorBook> book_ = std::make_shared<CreatorBook>();
};

TEST_F(ScannerTest, TheWatchedDirectoryIsAPodWithItsFiles) {
  File("a");
  File("b");
  Scanner scanner(Options());
  NodeSnapshot snap = scanner.Scan(ScanDepth::kWalk);
  ASSERT_EQ(snap.pods.size(), 1u) << "a pod beside the watched directory (no runtime roots were given)";
  const PodRecord& p = snap.pods[0];
  EXPECT_EQ(p.key.kind, PodKind::kHost);
  EXPECT_EQ(p.host_dir, dir_.path());
  EXPECT_EQ(p.files, 2);
  EXPECT_GE(p.used_bytes, 2 * 4096);
  EXPECT_NE(p.shm_fsid, 0u);
  EXPECT_TRUE(snap.walked) << "kObserve without an observer walks";
  EXPECT_EQ(snap.scans, 1);
  EXPECT_EQ(snap.time, clock_.WallNow()) << "the snapshot's time is not the injected clock's";
}

TEST_F(ScannerTest, ALeakIsLeakedOnlyOnceGraceHasPassedByTheClock) {
  CreatorRecord dead = DeadCreator(), alive = LiveCreator();
  ASSERT_GT(dead.host_pid, 0);
  File("leaky", &dead);
  File("running", &alive);  // positive control: its creator runs, never leaked
  File("scratch");          // no evidence: never leaked
  Scanner scanner(Options());
  NodeSnapshot first = scanner.Scan();
  const LeakRecord* leaky = Find(first, dir_ / "leaky");
  ASSERT_NE(leaky, nullptr) << "an unheld file was not listed";
  EXPECT_EQ(leaky->state, LeakState::kUnheld);
  EXPECT_FALSE(leaky->reclaimable);
  EXPECT_EQ(leaky->creator_source, "record");
  EXPECT_TRUE(leaky->creator_dead);
  EXPECT_EQ(leaky->unheld_for_sec, 0);

  clock_.Advance(kGrace - std::chrono::seconds(1));
  NodeSnapshot before = scanner.Scan();
  leaky = Find(before, dir_ / "leaky");
  ASSERT_NE(leaky, nullptr);
  EXPECT_EQ(leaky->state, LeakState::kUnheld) << "leaked before leaks.grace was over";
  EXPECT_EQ(leaky->unheld_for_sec, 59);

  clock_.Advance(std::chrono::seconds(1));
  NodeSnapshot after = scanner.Scan();
  leaky = Find(after, dir_ / "leaky");
  ASSERT_NE(leaky, nullptr);
  EXPECT_EQ(leaky->state, LeakState::kLeaked) << "not leaked once leaks.grace was over";
  EXPECT_TRUE(leaky->reclaimable);
  EXPECT_EQ(leaky->unheld_for_sec, 60);
  EXPECT_GE(leaky->age_sec, 55) << "the file's age does not follow the clock's calendar";
  EXPECT_LE(leaky->age_sec, 60);
  const LeakRecord* running = Find(after, dir_ / "running");
  ASSERT_NE(running, nullptr);
  EXPECT_EQ(running->state, LeakState::kUnheld) << "a file whose creator runs was called leaked";
  EXPECT_FALSE(running->creator_dead);
  const LeakRecord* scratch = Find(after, dir_ / "scratch");
  ASSERT_NE(scratch, nullptr);
  EXPECT_EQ(scratch->state, LeakState::kUnheld);
  EXPECT_TRUE(scratch->creator_source.empty());
  EXPECT_EQ(after.pods[0].leaked_bytes, 4096);
  EXPECT_EQ(after.leaked_bytes, 4096);
}

TEST_F(ScannerTest, AHeldFileIsNeverALeakAndItsUnheldTimeStartsAtItsClose) {
  CreatorRecord dead = DeadCreator();
  File("held", &dead);
  int fd = ::open((dir_ / "held").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  Scanner scanner(Options());
  EXPECT_EQ(Find(scanner.Scan(), dir_ / "held"), nullptr) << "a file this process holds was listed unheld";
  clock_.Advance(kGrace * 2);
  NodeSnapshot held = scanner.Scan();
  EXPECT_EQ(Find(held, dir_ / "held"), nullptr) << "held past leaks.grace, yet listed";
  ASSERT_EQ(held.pods.size(), 1u);
  ASSERT_FALSE(held.pods[0].top_segments.empty());
  EXPECT_EQ(held.pods[0].top_segments[0].state, LeakState::kHeld);
  // Positive control: closed, it is unheld from this scan on, and leaked a
  // grace later (not at once for having existed that long).
  ::close(fd);
  NodeSnapshot closed = scanner.Scan();
  const LeakRecord* l = Find(closed, dir_ / "held");
  ASSERT_NE(l, nullptr) << "the walk never saw the holder go: the held verdict above proves nothing";
  EXPECT_EQ(l->state, LeakState::kUnheld);
  EXPECT_EQ(l->unheld_for_sec, 0);
  clock_.Advance(kGrace);
  NodeSnapshot later = scanner.Scan();  // kept: l points into it
  l = Find(later, dir_ / "held");
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(l->state, LeakState::kLeaked);
}

TEST_F(ScannerTest, AFileGoneBetweenScansTakesItsHistoryWithIt) {
  CreatorRecord dead = DeadCreator();
  File("again", &dead);
  Scanner scanner(Options());
  (void)scanner.Scan();
  clock_.Advance(kGrace);
  ASSERT_EQ(::unlink((dir_ / "again").c_str()), 0);
  EXPECT_EQ(Find(scanner.Scan(), dir_ / "again"), nullptr);
  // A new file under the same name (and maybe the same inode number): its
  // own "unheld since", not the old one's.
  File("again", &dead);
  const LeakRecord* l = nullptr;
  NodeSnapshot snap = scanner.Scan();
  l = Find(snap, dir_ / "again");
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(l->state, LeakState::kUnheld) << "a new file inherited the grace of a removed one";
  EXPECT_EQ(l->unheld_for_sec, 0);
}

TEST_F(ScannerTest, AScanRenamesBackWhatAReclaimLeftInQuarantine) {
  FileKey key = File("orig");
  std::string hidden = dir_ / QuarantineName("orig", key.ino);
  ASSERT_EQ(::rename((dir_ / "orig").c_str(), hidden.c_str()), 0);
  // A read-only agent leaves it (another agent owns reclaim).
  Scanner read_only(Options(/*read_only=*/true));
  EXPECT_EQ(read_only.Scan().restored_from_quarantine, 0);
  EXPECT_TRUE(Exists(hidden));
  Scanner scanner(Options());
  NodeSnapshot snap = scanner.Scan();
  EXPECT_EQ(snap.restored_from_quarantine, 1);
  EXPECT_TRUE(Exists(dir_ / "orig"));
  EXPECT_FALSE(Exists(hidden));
  ASSERT_EQ(snap.pods.size(), 1u);
  EXPECT_EQ(snap.pods[0].files, 1) << "the listing was not redone after the rename";
  EXPECT_NE(Find(snap, dir_ / "orig"), nullptr) << "the restored file was not judged under its name";
}

TEST_F(ScannerTest, AnotherAgentsQuarantineNameWaitsItsAgeByTheCalendar) {
  FileKey key = File("theirs");
  std::string hidden = dir_ / QuarantineName("theirs", key.ino, "0badf00d");
  ASSERT_EQ(::rename((dir_ / "theirs").c_str(), hidden.c_str()), 0);
  struct stat st {};
  ASSERT_EQ(::lstat(hidden.c_str(), &st), 0);
  // Its claim may still run: kept until it is kForeignQuarantineAgeSec old
  // (by its ctime, against the clock's calendar).
  const auto renamed = std::chrono::system_clock::from_time_t(st.st_ctime);
  const auto almost = renamed + std::chrono::seconds(kForeignQuarantineAgeSec - 1);
  ASSERT_LT(clock_.WallNow(), almost);
  clock_.Advance(almost - clock_.WallNow());
  Scanner scanner(Options());
  EXPECT_EQ(scanner.Scan().restored_from_quarantine, 0) << "another agent's claim was undone while it may run";
  EXPECT_TRUE(Exists(hidden));
  clock_.Advance(std::chrono::seconds(1));
  EXPECT_EQ(scanner.Scan().restored_from_quarantine, 1) << "a stale quarantine name was never restored";
  EXPECT_TRUE(Exists(dir_ / "theirs"));
}

}  // namespace
}  // namespace shmkeeper

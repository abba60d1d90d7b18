// The prober registry (node/probers.h) against the real kernel: forked
// children take POSIX locks on a registry file in a private directory, and
// the enumeration must name exactly the processes holding write locks now —
// not a child that exited, not a grandchild of a registered process, not a
// reader, not the caller — whatever the order and shape of the locked ranges.
#include "node/probers.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "support/temp_dir.h"

namespace shmkeeper {
namespace {

// A forked child that runs `setup` (which may take locks and write up to a
// few pids for the parent), then waits to be killed. The parent reads what
// it wrote; SIGKILL and waitpid end it (its locks go with it).
class Child {
 public:
  explicit Child(const std::function<std::vector<pid_t>()>& setup) {
    int ready[2];
    if (::pipe2(ready, O_CLOEXEC) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(ready[0]);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      std::vector<pid_t> out = setup();
      int32_t n = static_cast<int32_t>(out.size());
      (void)!::write(ready[1], &n, sizeof n);
      if (n > 0) (void)!::write(ready[1], out.data(), out.size() * sizeof(pid_t));
      ::close(ready[1]);
      for (;;) ::pause();
    }
    ::close(ready[1]);
    int32_t n = -1;
    if (pid_ > 0 && ::read(ready[0], &n, sizeof n) == sizeof n && n >= 0) {
      out_.resize(static_cast<size_t>(n));
      ok_ = n == 0 || ::read(ready[0], out_.data(), out_.size() * sizeof(pid_t)) ==
                          static_cast<ssize_t>(out_.size() * sizeof(pid_t));
    }
    ::close(ready[0]);
  }
  ~Child() { Stop(); }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  void Stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  pid_t pid() const { return pid_; }
  bool ok() const { return ok_; }
  const std::vector<pid_t>& out() const { return out_; }

 private:
  pid_t pid_ = -1;
  bool ok_ = false;
  std::vector<pid_t> out_;
};

// In a child: joins `dir` (and reports nothing: a failure is ok() false).
std::vector<pid_t> JoinAndStay(const std::string& dir) {
  static std::unique_ptr<ProberRegistry> kept;  // the child's; it never returns to destroy it
  Result<std::unique_ptr<ProberRegistry>> r = ProberRegistry::Join(dir);
  if (!r.ok()) ::_exit(3);
  kept = std::move(*r);
  return {};
}

// The processes registered in `dir`'s file as a fresh process sees them (the
// caller cannot open the file itself: a close would drop its own locks).
std::set<pid_t> SeenFromAChild(const std::string& dir, int max_calls = 257) {
  Child viewer([&] {
    std::vector<pid_t> out;
    int fd = ::open((dir + "/" + kProbersFile).c_str(), O_RDONLY | O_CLOEXEC);
    Result<std::set<pid_t>> holders = fd >= 0 ? WriteLockHolders(fd, max_calls) : Status::Internal("open");
    if (!holders.ok()) ::_exit(3);
    out.assign(holders->begin(), holders->end());
    return out;
  });
  EXPECT_TRUE(viewer.ok());
  return std::set<pid_t>(viewer.out().begin(), viewer.out().end());
}

// Locks [start, start + len) (len 0: to the end) of `path` in a child.
std::vector<pid_t> LockRanges(const std::string& path, std::vector<std::pair<off_t, off_t>> ranges, short type) {
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) ::_exit(3);
  for (auto [start, len] : ranges) {
    struct flock fl = {};
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = start;
    fl.l_len = len;
    if (::fcntl(fd, F_SETLK, &fl) != 0) ::_exit(4);
  }
  return {};
}

std::set<pid_t> Others(const ProberRegistry& reg) {
  Result<std::set<pid_t>> others = reg.Others();
  EXPECT_TRUE(others.ok()) << others.status().message();
  return others.ok() ? *others : std::set<pid_t>{};
}

class ProbersTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(tmp_.ok()); }
  std::string Dir() const { return tmp_.path(); }
  std::string File() const { return tmp_ / kProbersFile; }
  test::TempDir tmp_{"/tmp/shmk-probers-"};
};

TEST_F(ProbersTest, NoOtherAgentsAndNeverOurselves) {
  Result<std::unique_ptr<ProberRegistry>> reg = ProberRegistry::Join(Dir());
  ASSERT_TRUE(reg.ok()) << reg.status().message();
  EXPECT_EQ((*reg)->slot(), ::getpid());
  EXPECT_TRUE(Others(**reg).empty());
  struct stat st = {};
  ASSERT_EQ(::stat(File().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  // Positive control: a fresh process sees us registered.
  EXPECT_EQ(SeenFromAChild(Dir()), std::set<pid_t>{::getpid()});
}

TEST_F(ProbersTest, OneAndSeveralOthersThenOneExits) {
  Result<std::unique_ptr<ProberRegistry>> reg = ProberRegistry::Join(Dir());
  ASSERT_TRUE(reg.ok()) << reg.status().message();
  std::vector<std::unique_ptr<Child>> kids;
  kids.push_back(std::make_unique<Child>([&] { return JoinAndStay(Dir()); }));
  ASSERT_TRUE(kids[0]->ok());
  EXPECT_EQ(Others(**reg), std::set<pid_t>{kids[0]->pid()});
  for (int i = 0; i < 4; ++i) {
    kids.push_back(std::make_unique<Child>([&] { return JoinAndStay(Dir()); }));
    ASSERT_TRUE(kids.back()->ok());
  }
  std::set<pid_t> all;
  for (const auto& k : kids) all.insert(k->pid());
  EXPECT_EQ(Others(**reg), all);
  // A registered process that exits is gone at once (no stale entry).
  pid_t gone = kids[2]->pid();
  kids[2]->Stop();
  all.erase(gone);
  EXPECT_EQ(Others(**reg), all);
  // Each child, forked from a registered parent, registered afresh (its
  // parent's registry, copied by fork, is not its own): a fresh process sees
  // all of them and us.
  all.insert(::getpid());
  EXPECT_EQ(SeenFromAChild(Dir()), all);
}

TEST_F(ProbersTest, AGrandchildOfARegisteredProcessIsNotRegistered) {
  Result<std::unique_ptr<ProberRegistry>> reg = ProberRegistry::Join(Dir());
  ASSERT_TRUE(reg.ok()) << reg.status().message();
  Child child([&] {
    JoinAndStay(Dir());
    int ready[2];
    if (::pipe2(ready, O_CLOEXEC) != 0) ::_exit(3);
    pid_t grandchild = ::fork();
    if (grandchild == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // set before the test goes on: it dies with the child
      ::close(ready[1]);
      for (;;) ::pause();
    }
    ::close(ready[1]);
    char c;
    (void)!::read(ready[0], &c, 1);  // EOF once the grandchild is set
    return std::vector<pid_t>{grandchild};
  });
  ASSERT_TRUE(child.ok());
  ASSERT_EQ(child.out().size(), 1u);
  pid_t grandchild = child.out()[0];
  // Positive control: the grandchild lives, a fork of a registered process
  // holding its parent's descriptor of the file.
  ASSERT_GT(grandchild, 0);
  ASSERT_EQ(::kill(grandchild, 0), 0);
  EXPECT_EQ(Others(**reg), std::set<pid_t>{child.pid()});
  child.Stop();
  EXPECT_TRUE(Others(**reg).empty());
  ::kill(grandchild, SIGKILL);
}

TEST_F(ProbersTest, ALaterLockBelowAnEarlierOneIsFound) {
  // The kernel keeps a file's locks by owner, in the order the owners first
  // locked: F_GETLK answers with the earlier owner's lock even when a later
  // one's lies below it. Only searching on both sides of each answer finds both.
  ASSERT_EQ(::close(::open(File().c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600)), 0);
  Child early([&] { return LockRanges(File(), {{5000, 1}}, F_WRLCK); });
  Child later([&] { return LockRanges(File(), {{7, 1}}, F_WRLCK); });
  Child last([&] { return LockRanges(File(), {{6000, 1}, {3, 1}}, F_WRLCK); });
  ASSERT_TRUE(early.ok() && later.ok() && last.ok());
  EXPECT_EQ(SeenFromAChild(Dir()), (std::set<pid_t>{early.pid(), later.pid(), last.pid()}));
}

TEST_F(ProbersTest, EveryShapeAndOrderOfRangesIsFoundOnlyWriteLocks) {
  Result<std::unique_ptr<ProberRegistry>> reg = ProberRegistry::Join(Dir());
  ASSERT_TRUE(reg.ok()) << reg.status().message();
  const off_t self = (*reg)->slot();
  const off_t big = off_t{1} << 40;
  // Ranges interleaved between processes, below and above our own byte, at
  // offset 0, far out, at the largest offset, and one to the end of any file.
  Child a([&] { return LockRanges(File(), {{0, 1}, {100, 10}, {self + 1, 1}}, F_WRLCK); });
  Child b([&] { return LockRanges(File(), {{50, 1}, {self - 1, 1}, {big, 1}, {LLONG_MAX - 200, 1}}, F_WRLCK); });
  Child c([&] { return LockRanges(File(), {{LLONG_MAX - 100, 0}}, F_WRLCK); });
  Child reader([&] { return LockRanges(File(), {{60, 1}, {200, 5}}, F_RDLCK); });
  // An open-file-description lock names no process (l_pid -1) and is shared
  // across fork: it registers nobody.
  Child ofd([&] {
    int fd = ::open(File().c_str(), O_RDWR | O_CLOEXEC);
    struct flock fl = {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = 70;
    fl.l_len = 1;
    if (fd < 0 || ::fcntl(fd, F_OFD_SETLK, &fl) != 0) ::_exit(4);
    return std::vector<pid_t>{};
  });
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && reader.ok() && ofd.ok());
  EXPECT_EQ(Others(**reg), (std::set<pid_t>{a.pid(), b.pid(), c.pid()}));
  b.Stop();
  EXPECT_EQ(Others(**reg), (std::set<pid_t>{a.pid(), c.pid()}));
}

TEST_F(ProbersTest, TheCallBoundStopsTheSearch) {
  ASSERT_EQ(::close(::open(File().c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600)), 0);
  Child a([&] { return LockRanges(File(), {{10, 1}}, F_WRLCK); });
  Child b([&] { return LockRanges(File(), {{20, 1}}, F_WRLCK); });
  Child c([&] { return LockRanges(File(), {{30, 1}}, F_WRLCK); });
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(SeenFromAChild(Dir()), (std::set<pid_t>{a.pid(), b.pid(), c.pid()}));  // control
  EXPECT_EQ(SeenFromAChild(Dir(), 1).size(), 1u);
  EXPECT_LE(SeenFromAChild(Dir(), 3).size(), 3u);
  EXPECT_EQ(SeenFromAChild(Dir(), 7).size(), 3u);  // 2k+1 calls suffice for k regions
}

TEST_F(ProbersTest, AJoinedFileIsOpenedOnceAndHeldUntilTheLastRegistryGoes) {
  Result<std::unique_ptr<ProberRegistry>> first = ProberRegistry::Join(Dir());
  ASSERT_TRUE(first.ok()) << first.status().message();
  // The same file through another path (a symlinked directory).
  std::string alias = tmp_ / "alias";
  ASSERT_EQ(::symlink(Dir().c_str(), alias.c_str()), 0);
  Result<std::unique_ptr<ProberRegistry>> second = ProberRegistry::Join(alias);
  ASSERT_TRUE(second.ok()) << second.status().message();
  EXPECT_EQ((*second)->slot(), (*first)->slot());
  first->reset();  // a close here would have dropped the process's lock
  EXPECT_EQ(SeenFromAChild(Dir()), std::set<pid_t>{::getpid()});
  second->reset();
  EXPECT_TRUE(SeenFromAChild(Dir()).empty());
  // And joins again.
  Result<std::unique_ptr<ProberRegistry>> third = ProberRegistry::Join(Dir());
  ASSERT_TRUE(third.ok()) << third.status().message();
  EXPECT_EQ(SeenFromAChild(Dir()), std::set<pid_t>{::getpid()});
}

TEST_F(ProbersTest, ATakenSlotMovesUpAndIsStillSeen) {
  pid_t self = ::getpid();
  ASSERT_EQ(::close(::open(File().c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600)), 0);
  Child squatter([&] { return LockRanges(File(), {{self, 1}}, F_WRLCK); });  // another pid namespace's agent
  ASSERT_TRUE(squatter.ok());
  Result<std::unique_ptr<ProberRegistry>> reg = ProberRegistry::Join(Dir());
  ASSERT_TRUE(reg.ok()) << reg.status().message();
  EXPECT_EQ((*reg)->slot(), self + ProberRegistry::kPidSlots);
  EXPECT_EQ(Others(**reg), std::set<pid_t>{squatter.pid()});
  EXPECT_EQ(SeenFromAChild(Dir()), (std::set<pid_t>{self, squatter.pid()}));
}

TEST_F(ProbersTest, RefusesASymlinkAForeignFileAndALooseMode) {
  std::string target = tmp_ / "elsewhere";
  ASSERT_EQ(::close(::open(target.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600)), 0);
  ASSERT_EQ(::symlink(target.c_str(), File().c_str()), 0);
  Result<std::unique_ptr<ProberRegistry>> r = ProberRegistry::Join(Dir());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("symlink"), std::string::npos) << r.status().message();
  ASSERT_EQ(::unlink(File().c_str()), 0);

  ASSERT_EQ(::close(::open(File().c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600)), 0);
  ASSERT_EQ(::chown(File().c_str(), 65534, 65534), 0);
  r = ProberRegistry::Join(Dir());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("owned by uid"), std::string::npos) << r.status().message();

  ASSERT_EQ(::chown(File().c_str(), ::geteuid(), ::getegid()), 0);
  ASSERT_EQ(::chmod(File().c_str(), 0620), 0);
  r = ProberRegistry::Join(Dir());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("writable by it alone"), std::string::npos) << r.status().message();
  EXPECT_TRUE(SeenFromAChild(Dir()).empty());

  // Another uid (a container's process without the agent's credentials)
  // cannot open the 0600 file at all, so cannot lock it, in a directory it can
  // search (the state directory is 0755).
  ASSERT_EQ(::chmod(Dir().c_str(), 0755), 0);
  auto intrude = [&] {
    Child intruder([&] {
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(5);
      bool rw = ::open(File().c_str(), O_RDWR | O_CLOEXEC) >= 0;
      bool ro = ::open(File().c_str(), O_RDONLY | O_CLOEXEC) >= 0;
      return std::vector<pid_t>{rw ? 1 : 0, ro ? 1 : 0};
    });
    EXPECT_TRUE(intruder.ok());
    return intruder.out();
  };
  ASSERT_EQ(::chmod(File().c_str(), 0600), 0);
  EXPECT_EQ(intrude(), (std::vector<pid_t>{0, 0}));
  ASSERT_EQ(::chmod(File().c_str(), 0666), 0);
  EXPECT_EQ(intrude(), (std::vector<pid_t>{1, 1}));  // control: the mode is what keeps it out (Join refuses 0666)
  ASSERT_EQ(::chmod(File().c_str(), 0600), 0);

  // Control: the same file, ours and 0600, is joined.
  ASSERT_EQ(::chmod(File().c_str(), 0600), 0);
  r = ProberRegistry::Join(Dir());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(SeenFromAChild(Dir()), std::set<pid_t>{::getpid()});
}

}  // namespace
}  // namespace shmkeeper

// The observer's fanotify marks on the real kernel (issue 23): the
// filesystem mark carries only directory events, each probed file gets an
// inode mark for its opens and closes, placed by the probe on its own
// descriptor (observer.h). Each test runs on a private tmpfs in a private
// mount namespace (gone with the test process), with real child processes:
// - a file probed unheld, then opened and closed once by another process
//   between two checks: the event dirties it and moves its activity time;
// - a file renamed after its probe keeps its mark: its next use is an event;
// - churn (files created, used, removed between two checks, never probed)
//   costs no use event; with the filesystem-wide fallback (the positive
//   control) the same churn costs one per file;
// - the mark budget spent (the seam ObserverOptions::max_inode_marks; the
//   real limit, fs.fanotify.max_user_marks, is a node-wide sysctl and is not
//   touched): that tmpfs falls back to every open and close, counted and
//   reported once, and use of a file probed after that is still seen;
// - a marked file, unlinked and closed, frees its pages (the mark does not
//   pin the inode), also when a holder closes it after the unlink;
// - a file probed held names its holder: its creator (FAN_CREATE's pid), or
//   a process that opened it before its mark (one walk of /proc);
// - close after write(2) or ftruncate of a probed file changes Layout (the
//   listing cache's signal that sizes changed), and so does its unlink, held
//   or not (the inode mark's FAN_ATTRIB: the filesystem mark carries no
//   removals); a probe that finds the name gone makes the listing stale;
// - a name swapped between the listing and the probe gets no mark;
// - one create event per scan: a burst of 1,000 creates costs one event
//   (the control, kept armed: one each); the re-arm (a Watch) changes
//   Layout; no way back into the tmpfs (or another filesystem) keeps creates
//   armed; a failed re-arm drops Layout until one succeeds; a disarmed tmpfs
//   is not pinned (a plain umount works);
// - through a started agent: a file grown by write(2) between two light
//   scans shows its new size; each create right after a scan is listed by
//   an early scan.
// Tests wait on the kernel (fsnotify queues events synchronously in the
// opener's system call: a child reaped means its events are queued).
#include "node/observer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "node/engine.h"
#include "node/reporter.h"
#include "support/temp_dir.h"

namespace shmkeeper {
namespace {

class ObserverMarksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    // A private mount namespace (the process is single-threaded here): the
    // tmpfs goes with the test process whatever happens.
    ASSERT_EQ(::unshare(CLONE_NEWNS), 0) << "needs root: " << ::strerror(errno);
    ASSERT_EQ(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0);
    dir_ = tmp_.path();
    ASSERT_EQ(::mount("shmk-observer-test", dir_.c_str(), "tmpfs", 0, "size=256m"), 0) << ::strerror(errno);
    dir_fd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(dir_fd_, 0);
    struct stat st;
    ASSERT_EQ(::fstat(dir_fd_, &st), 0);
    dev_ = st.st_dev;
  }
  void TearDown() override {
    observer_.reset();
    for (pid_t p : children_) {
      ::kill(p, SIGKILL);
      ::waitpid(p, nullptr, 0);
    }
    if (dir_fd_ >= 0) ::close(dir_fd_);
    ::umount2(dir_.c_str(), MNT_DETACH);
  }

  void StartObserver(std::optional<int64_t> max_marks = std::nullopt, bool disarm_creates = true,
                     std::chrono::milliseconds holder_walk_every = std::chrono::seconds(10)) {
    ObserverOptions opts;
    opts.max_inode_marks = max_marks;
    opts.disarm_creates = disarm_creates;
    opts.holder_walk_every = holder_walk_every;
    opts.clock = clock_;
    opts.mark_fault = [this](dev_t) {
      return mark_faults_-- > 0 ? Status::FromErrno(ENOSPC, "fanotify_mark") : Status::Ok();
    };
    observer_ = std::make_unique<Observer>([] {}, [] {}, &reporter_, opts);
    Status s = observer_->Start();
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_TRUE(observer_->Watch(dir_fd_, dev_, nullptr, Reopen()));
  }
  // The scan's way back into the tmpfs (what the observer disarms through).
  Observer::Reopen Reopen() {
    return [dir = dir_]() -> Result<UniqueFd> {
      UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (!fd.valid()) return Status::FromErrno(errno, "open " + dir);
      return fd;
    };
  }
  // A child creates `n` files, one at a time: after each, the test drains
  // (the event, if any, is read before the next create: nothing merges).
  // Returns the events read meanwhile.
  int64_t CreateOneByOne(int n, const std::string& prefix) {
    int64_t e0 = Events();
    int go[2], done[2];
    EXPECT_EQ(::pipe(go), 0);
    EXPECT_EQ(::pipe(done), 0);
    pid_t pid = ::fork();
    if (pid == 0) {
      char c;
      for (int i = 0; i < n; ++i) {
        if (::read(go[0], &c, 1) != 1) ::_exit(1);
        std::string path = dir_ + "/" + prefix + std::to_string(i);
        int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0) ::_exit(1);
        ::close(fd);
        if (::write(done[1], "d", 1) != 1) ::_exit(1);
      }
      ::_exit(0);
    }
    ::close(go[0]);
    ::close(done[1]);
    for (int i = 0; i < n; ++i) {
      char c = 'g';
      EXPECT_EQ(::write(go[1], &c, 1), 1);
      EXPECT_EQ(::read(done[0], &c, 1), 1);  // the create returned: its event (if any) is queued
      observer_->Drain();
    }
    ::close(go[1]);
    ::close(done[0]);
    int status = 0;
    EXPECT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return Events() - e0;
  }

  FileKey Make(const std::string& name, size_t bytes = 4096) {
    std::string path = dir_ + "/" + name;
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    EXPECT_GE(fd, 0) << path;
    std::string data(bytes, 'x');
    EXPECT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(bytes));
    ::close(fd);
    return Key(name);
  }
  FileKey Key(const std::string& name) {
    struct stat st {};
    EXPECT_EQ(::fstatat(dir_fd_, name.c_str(), &st, 0), 0) << name;
    return FileKey{st.st_dev, st.st_ino};
  }

  // Runs `fn` in a child process to its end (its events are then queued).
  static pid_t RunChild(const std::function<void()>& fn) {
    pid_t pid = ::fork();
    if (pid == 0) {
      fn();
      ::_exit(0);
    }
    int status = 0;
    EXPECT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return pid;
  }
  // Runs `hold` in a child that signals readiness, then stays until killed.
  pid_t Spawn(const std::function<void()>& hold) {
    int p[2];
    EXPECT_EQ(::pipe(p), 0);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      hold();
      char c = 'r';
      (void)!::write(p[1], &c, 1);
      for (;;) ::pause();
    }
    ::close(p[1]);
    char c;
    EXPECT_EQ(::read(p[0], &c, 1), 1);
    ::close(p[0]);
    children_.push_back(pid);
    return pid;
  }
  void Kill(pid_t pid) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    std::erase(children_, pid);
  }

  void OpenClose(const std::string& name, int flags = O_RDONLY) {
    std::string path = dir_ + "/" + name;
    RunChild([&] {
      int fd = ::open(path.c_str(), flags | O_CLOEXEC);
      if (fd < 0) ::_exit(1);
      ::close(fd);
    });
  }

  // Files created, written, closed and removed by a child, never probed.
  void Churn(int n) {
    RunChild([&] {
      for (int i = 0; i < n; ++i) {
        char path[4200];
        snprintf(path, sizeof path, "%s/churn_%d", dir_.c_str(), i);
        int fd = ::open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0) ::_exit(1);
        if (::write(fd, "c", 1) != 1) ::_exit(1);
        ::close(fd);
        fd = ::open(path, O_RDONLY | O_CLOEXEC);  // a reader too
        if (fd < 0) ::_exit(1);
        ::close(fd);
        ::unlink(path);
      }
    });
  }

  int64_t Events() {
    observer_->Drain();
    return observer_->counters().events;
  }

  uint64_t UsedBlocks() {
    struct statfs sf;
    EXPECT_EQ(::fstatfs(dir_fd_, &sf), 0);
    return sf.f_blocks - sf.f_bfree;
  }

  // The observer's clock (StartObserver): a test sets it to fake_ to advance it.
  Clock* clock_ = RealClock();
  FakeClock fake_;
  // The observer's next filesystem marks or re-arms that fail (its seam).
  int mark_faults_ = 0;
  test::TempDir tmp_{"/tmp/shmk-observer-"};
  std::string dir_;
  int dir_fd_ = -1;
  dev_t dev_ = 0;
  Reporter reporter_;
  std::unique_ptr<Observer> observer_;
  std::vector<pid_t> children_;
};

TEST_F(ObserverMarksTest, UseBetweenTwoChecksOfAProbedFileIsSeen) {
  StartObserver();
  FileKey key = Make("seg");
  Observer::Use first = observer_->Check(dir_fd_, "seg", key);
  EXPECT_TRUE(first.probed_now);
  EXPECT_FALSE(first.held);
  EXPECT_EQ(observer_->counters().inode_marks, 1);
  observer_->Drain();
  Observer::Use idle = observer_->Check(dir_fd_, "seg", key);
  EXPECT_FALSE(idle.probed_now) << "nothing happened: the cached verdict";
  EXPECT_FALSE(idle.last_activity.has_value());

  auto before = std::chrono::steady_clock::now();
  pid_t user = 0;
  std::string path = dir_ + "/seg";
  user = RunChild([&] {
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) ::_exit(1);
    ::close(fd);
  });
  observer_->Drain();
  Observer::Use after = observer_->Check(dir_fd_, "seg", key);
  EXPECT_TRUE(after.probed_now) << "the open and close by another process made it dirty";
  EXPECT_FALSE(after.held);
  ASSERT_TRUE(after.last_activity.has_value()) << "the inode mark reported no use";
  EXPECT_GE(*after.last_activity, before);
  EXPECT_NE(std::find(after.pids.begin(), after.pids.end(), user), after.pids.end());
  EXPECT_EQ(observer_->counters().mark_fallbacks, 0);
}

TEST_F(ObserverMarksTest, RenameKeepsTheMark) {
  StartObserver();
  FileKey key = Make("before");
  EXPECT_TRUE(observer_->Check(dir_fd_, "before", key).probed_now);
  ASSERT_EQ(::renameat(dir_fd_, "before", dir_fd_, "after"), 0);
  observer_->Drain();
  EXPECT_FALSE(observer_->Check(dir_fd_, "after", key).probed_now) << "a rename is no use";
  OpenClose("after");
  observer_->Drain();
  Observer::Use u = observer_->Check(dir_fd_, "after", key);
  EXPECT_TRUE(u.probed_now) << "the open after the rename was no event: the mark did not follow the inode";
  EXPECT_TRUE(u.last_activity.has_value());
}

TEST_F(ObserverMarksTest, ChurnOfUnprobedFilesCostsNoUseEvent) {
  StartObserver();
  FileKey key = Make("probed");
  observer_->Check(dir_fd_, "probed", key);
  int64_t e0 = Events();
  Churn(2000);
  int64_t churn_events = Events() - e0;
  // The directory events (creates, deletes) name the directory and merge:
  // a few per drain, none per file.
  EXPECT_LT(churn_events, 50) << "2,000 files created, used and removed cost " << churn_events << " events";
  // The probed file's use is still an event (the same group works).
  OpenClose("probed");
  EXPECT_GT(Events(), e0 + churn_events);
}

TEST_F(ObserverMarksTest, ChurnCostsEventsWithTheFilesystemWideFallback) {
  // The positive control of the test above: with no inode mark allowed,
  // the tmpfs falls back to every open and close, and the same churn is an
  // event per file (each one a new inode: nothing to merge with).
  StartObserver(/*max_marks=*/0);
  FileKey key = Make("probed");
  observer_->Check(dir_fd_, "probed", key);
  ASSERT_EQ(observer_->counters().mark_fallbacks, 1);
  int64_t e0 = Events();
  Churn(2000);
  EXPECT_GE(Events() - e0, 1000);
}

TEST_F(ObserverMarksTest, MarkBudgetSpentFallsBackToEveryOpenOnThatTmpfs) {
  StartObserver(/*max_marks=*/1);
  FileKey a = Make("a");
  FileKey b = Make("b");
  EXPECT_TRUE(observer_->Check(dir_fd_, "a", a).probed_now);
  EXPECT_EQ(observer_->counters().inode_marks, 1);
  EXPECT_EQ(observer_->counters().mark_fallbacks, 0);
  EXPECT_TRUE(observer_->Check(dir_fd_, "b", b).probed_now);  // over budget: the whole tmpfs
  EXPECT_EQ(observer_->counters().inode_marks, 1);
  EXPECT_EQ(observer_->counters().mark_fallbacks, 1);
  EXPECT_EQ(reporter_.Count(kObserverMarkFallbacks), 1);
  FileKey c = Make("c");
  EXPECT_TRUE(observer_->Check(dir_fd_, "c", c).probed_now);
  EXPECT_EQ(reporter_.Count(kObserverMarkFallbacks), 1) << "reported once per filesystem";
  observer_->Drain();
  // Use of every file is still seen: b (no inode mark) and a (its mark).
  OpenClose("b");
  OpenClose("a");
  observer_->Drain();
  Observer::Use ub = observer_->Check(dir_fd_, "b", b);
  EXPECT_TRUE(ub.probed_now);
  EXPECT_TRUE(ub.last_activity.has_value());
  EXPECT_TRUE(observer_->Check(dir_fd_, "a", a).probed_now);
  EXPECT_FALSE(observer_->Check(dir_fd_, "c", c).probed_now) << "c was not used";
}

TEST_F(ObserverMarksTest, UnlinkedMarkedFileFreesItsPages) {
  StartObserver();
  uint64_t empty = UsedBlocks();
  FileKey key = Make("big", 32 << 20);
  uint64_t full = UsedBlocks();
  ASSERT_GT(full, empty + (16 << 20) / 4096) << "the 32 MiB were not allocated: the check below would prove nothing";
  observer_->Check(dir_fd_, "big", key);
  ASSERT_EQ(observer_->counters().inode_marks, 1);
  // The mark is live (a positive control): a use is an event.
  int64_t e0 = Events();
  OpenClose("big");
  ASSERT_GT(Events(), e0);
  ASSERT_EQ(::unlinkat(dir_fd_, "big", 0), 0);
  EXPECT_LT(UsedBlocks(), empty + (1 << 20) / 4096) << "the inode mark kept the unlinked file's pages";

  // Unlinked while held: freed at the holder's last close.
  FileKey held_key = Make("held", 32 << 20);
  observer_->Check(dir_fd_, "held", held_key);
  std::string path = dir_ + "/held";
  pid_t holder = Spawn([&] {
    if (::open(path.c_str(), O_RDONLY) < 0) ::_exit(1);
  });
  ASSERT_EQ(::unlinkat(dir_fd_, "held", 0), 0);
  EXPECT_GT(UsedBlocks(), empty + (16 << 20) / 4096) << "held: its pages stay";
  Kill(holder);
  EXPECT_LT(UsedBlocks(), empty + (1 << 20) / 4096) << "the inode mark kept the pages after the last close";
}

TEST_F(ObserverMarksTest, HeldFileNamesItsCreatorWithoutAWalk) {
  StartObserver();
  observer_->Drain();
  std::string path = dir_ + "/created";
  pid_t creator = Spawn([&] {
    if (::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600) < 0) ::_exit(1);
  });
  observer_->Drain();  // the FAN_CREATE names the creator
  Observer::Use u = observer_->Check(dir_fd_, "created", Key("created"));
  EXPECT_TRUE(u.held);
  EXPECT_EQ(u.pids, std::vector<pid_t>{creator});
  EXPECT_EQ(observer_->counters().holder_walks, 0);
}

TEST_F(ObserverMarksTest, HeldFileOpenedBeforeItsMarkByANonCreatorIsFoundByAWalk) {
  StartObserver();
  FileKey key = Make("shared");
  observer_->Drain();
  std::string path = dir_ + "/shared";
  pid_t reader = Spawn([&] {
    if (::open(path.c_str(), O_RDONLY) < 0) ::_exit(1);
  });
  Observer::Use u = observer_->Check(dir_fd_, "shared", key);
  EXPECT_TRUE(u.held);
  EXPECT_EQ(u.pids, std::vector<pid_t>{reader});
  EXPECT_EQ(observer_->counters().holder_walks, 1);
  // Its close is an event now (the mark was placed by that probe).
  Kill(reader);
  observer_->Drain();
  Observer::Use after = observer_->Check(dir_fd_, "shared", key);
  EXPECT_TRUE(after.probed_now);
  EXPECT_FALSE(after.held);
}

// Files whose holders only a walk can name: one walk names the holders of
// every file on the tmpfs (the rest of the scan needs none), and walks are
// batched at most one per interval: a file met after the walk's findings
// are stale (2 s) and before the interval waits (held, holders pending) for
// the next walk, which names it.
TEST_F(ObserverMarksTest, HolderWalksNameEveryFileAndAreBatchedPerInterval) {
  // On the observer's clock, advanced by the test: nothing waits on time.
  clock_ = &fake_;
  constexpr auto kEvery = std::chrono::seconds(4);
  StartObserver(std::nullopt, /*disarm_creates=*/true, kEvery);
  std::vector<std::string> names = {"first", "second", "third", "late"};
  std::vector<FileKey> keys;
  for (const std::string& n : names) keys.push_back(Make(n));
  FileKey idle = Make("idle");
  observer_->Drain();
  std::vector<pid_t> readers;
  auto spawn_reader = [&](const std::string& n) {
    std::string path = dir_ + "/" + n;
    readers.push_back(Spawn([path] {
      if (::open(path.c_str(), O_RDONLY) < 0) ::_exit(1);
    }));
  };
  for (size_t i = 0; i < 3; ++i) spawn_reader(names[i]);
  for (size_t i = 0; i < 3; ++i) {
    Observer::Use u = observer_->Check(dir_fd_, names[i], keys[i]);
    EXPECT_EQ(u.pids, std::vector<pid_t>{readers[i]}) << names[i];
    EXPECT_FALSE(u.holders_pending) << names[i];
  }
  EXPECT_EQ(observer_->counters().holder_walks, 1) << "one walk named all three";
  // Past the walk's 2 s, within the interval: "late" waits for the next walk.
  spawn_reader(names[3]);
  fake_.Advance(std::chrono::milliseconds(2100));
  Observer::Use late = observer_->Check(dir_fd_, names[3], keys[3]);
  EXPECT_TRUE(late.held);
  EXPECT_TRUE(late.holders_pending);
  EXPECT_TRUE(late.pids.empty());
  EXPECT_EQ(observer_->counters().holder_walks, 1);
  // Still within the interval: no walk.
  fake_.Advance(std::chrono::milliseconds(1800));
  (void)observer_->Check(dir_fd_, "idle", idle);
  EXPECT_EQ(observer_->counters().holder_walks, 1);
  // Any Check once the interval has passed runs the next walk.
  fake_.Advance(std::chrono::milliseconds(200));
  (void)observer_->Check(dir_fd_, "idle", idle);
  EXPECT_EQ(observer_->counters().holder_walks, 2);
  late = observer_->Check(dir_fd_, names[3], keys[3]);
  EXPECT_EQ(late.pids, std::vector<pid_t>{readers[3]});
  EXPECT_FALSE(late.holders_pending);
}

TEST_F(ObserverMarksTest, CloseAfterWritingAProbedFileChangesLayout) {
  StartObserver();
  FileKey key = Make("grows");
  observer_->Check(dir_fd_, "grows", key);
  observer_->Drain();
  std::optional<uint64_t> l0 = observer_->Layout(dev_);
  ASSERT_TRUE(l0.has_value());
  OpenClose("grows", O_RDONLY);  // read-only use: no size change
  observer_->Drain();
  EXPECT_EQ(observer_->Layout(dev_), l0);
  std::string path = dir_ + "/grows";
  RunChild([&] {  // grown by ftruncate: no page allocated, statfs unchanged
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0 || ::ftruncate(fd, 1 << 20) != 0) ::_exit(1);
    ::close(fd);
  });
  observer_->Drain();
  std::optional<uint64_t> l1 = observer_->Layout(dev_);
  EXPECT_NE(l1, l0);
  RunChild([&] {  // grown by write(2)
    int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0 || ::write(fd, "more", 4) != 4) ::_exit(1);
    ::close(fd);
  });
  observer_->Drain();
  EXPECT_NE(observer_->Layout(dev_), l1);
}

TEST_F(ObserverMarksTest, RemovalOfAProbedFileChangesLayoutHeldOrNot) {
  // The filesystem mark does not carry removals (each would cost the
  // remover an event); a listed file's unlink is its inode mark's FAN_ATTRIB.
  StartObserver();
  FileKey a = Make("a");
  FileKey b = Make("b");
  observer_->Check(dir_fd_, "a", a);
  observer_->Check(dir_fd_, "b", b);
  std::string path_b = dir_ + "/b";
  pid_t holder = Spawn([&] {
    if (::open(path_b.c_str(), O_RDONLY) < 0) ::_exit(1);
  });
  observer_->Drain();
  std::optional<uint64_t> l0 = observer_->Layout(dev_);
  RunChild([&] {
    if (::unlinkat(dir_fd_, "a", 0) != 0) ::_exit(1);
  });
  observer_->Drain();
  std::optional<uint64_t> l1 = observer_->Layout(dev_);
  EXPECT_NE(l1, l0) << "the unlink of a probed, unheld file was not seen";
  RunChild([&] {
    if (::unlinkat(dir_fd_, "b", 0) != 0) ::_exit(1);
  });
  observer_->Drain();
  EXPECT_NE(observer_->Layout(dev_), l1) << "the unlink of a probed file still held was not seen at once";
  Kill(holder);
}

TEST_F(ObserverMarksTest, AProbeThatFindsTheNameGoneMakesTheListingStale) {
  StartObserver();
  FileKey key = Make("gone");
  ASSERT_EQ(::unlinkat(dir_fd_, "gone", 0), 0);  // before any probe: no mark, no event
  observer_->Drain();
  std::optional<uint64_t> l0 = observer_->Layout(dev_);
  Observer::Use u = observer_->Check(dir_fd_, "gone", key);
  EXPECT_FALSE(u.held);
  EXPECT_NE(observer_->Layout(dev_), l0);
}

TEST_F(ObserverMarksTest, ASwappedNameIsNeitherProbedNorMarked) {
  // The probe marks the inode it opened, after checking it is the one the
  // listing showed: a name swapped in between gets no mark.
  StartObserver();
  FileKey listed = Make("a");
  ASSERT_EQ(::renameat(dir_fd_, "a", dir_fd_, "elsewhere"), 0);
  FileKey swapped_in = Make("a");
  ASSERT_NE(listed.ino, swapped_in.ino);
  Observer::Use u = observer_->Check(dir_fd_, "a", listed);
  EXPECT_TRUE(u.gone);
  EXPECT_EQ(observer_->counters().inode_marks, 0);
  int64_t e0 = Events();
  OpenClose("a");  // the swapped-in inode: no mark, no event
  EXPECT_EQ(Events(), e0);
  EXPECT_TRUE(observer_->Check(dir_fd_, "a", swapped_in).probed_now);  // its own first probe marks it
  EXPECT_EQ(observer_->counters().inode_marks, 1);
  OpenClose("a");
  EXPECT_GT(Events(), e0);
}

// The listing cache of the agent's light scans (node_scan.h) against a file
// grown by write(2) between two light scans, without filesystem-wide close
// events: the next light scan shows its new size. (The sizes a scan reports
// are pages allocated, which statfs shows too; the close-after-write event
// of the file's inode mark, the other signal, is checked alone by
// CloseAfterWritingAProbedFileChangesLayout.)
TEST_F(ObserverMarksTest, ABurstOfCreatesCostsOneEventPerScan) {
  StartObserver();
  uint64_t l0 = *observer_->Layout(dev_);
  // 1,000 creates, each drained before the next (no merging in the queue):
  // the first disarms FAN_CREATE, the 999 others are no events.
  int64_t events = CreateOneByOne(1000, "burst_");
  EXPECT_LE(events, 3) << "1,000 creates between two scans";
  EXPECT_EQ(observer_->counters().disarms, 1);
  uint64_t l1 = *observer_->Layout(dev_);
  EXPECT_NE(l1, l0) << "a disarm changes Layout";
  // The scan's Watch re-arms (and changes Layout again, with no event since:
  // a listing from while it was disarmed is never reused).
  ASSERT_TRUE(observer_->Watch(dir_fd_, dev_, nullptr, Reopen()));
  EXPECT_EQ(observer_->counters().rearms, 1);
  uint64_t l2 = *observer_->Layout(dev_);
  EXPECT_NE(l2, l1) << "a re-arm changes Layout";
  // The first create after the re-arm is an event again (and disarms again).
  EXPECT_GE(CreateOneByOne(5, "after_"), 1);
  EXPECT_EQ(observer_->counters().disarms, 2);
  EXPECT_NE(*observer_->Layout(dev_), l2);
  // A Watch of an armed tmpfs changes nothing.
  ASSERT_TRUE(observer_->Watch(dir_fd_, dev_, nullptr, Reopen()));
  ASSERT_TRUE(observer_->Watch(dir_fd_, dev_, nullptr, Reopen()));
  EXPECT_EQ(observer_->counters().rearms, 2);
  uint64_t l3 = *observer_->Layout(dev_);
  ASSERT_TRUE(observer_->Watch(dir_fd_, dev_, nullptr, Reopen()));
  EXPECT_EQ(*observer_->Layout(dev_), l3);
}

TEST_F(ObserverMarksTest, CreatesKeptArmedCostAnEventEach) {
  // The positive control of the test above: creates never disarmed.
  StartObserver(std::nullopt, /*disarm_creates=*/false);
  EXPECT_GE(CreateOneByOne(1000, "burst_"), 990);
  EXPECT_EQ(observer_->counters().disarms, 0);
}

TEST_F(ObserverMarksTest, NoWayBackInKeepsCreatesArmed) {
  // Without a Reopen (or one that opens another filesystem) nothing is disarmed.
  ObserverOptions opts;
  observer_ = std::make_unique<Observer>([] {}, [] {}, &reporter_, opts);
  ASSERT_TRUE(observer_->Start().ok());
  ASSERT_TRUE(observer_->Watch(dir_fd_, dev_, nullptr, [] {
    return Result<UniqueFd>(UniqueFd(::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC)));
  }));
  EXPECT_GE(CreateOneByOne(50, "c_"), 45);
  EXPECT_EQ(observer_->counters().disarms, 0);
}

TEST_F(ObserverMarksTest, AFailedReArmListsEveryScanUntilOneSucceeds) {
  StartObserver();
  CreateOneByOne(1, "first");
  ASSERT_EQ(observer_->counters().disarms, 1);
  ASSERT_TRUE(observer_->Layout(dev_).has_value());
  // Two re-arms fail (the kernel's error, through the seam): reported once,
  // no Layout (the scan lists that tmpfs every time instead of reusing a
  // listing).
  mark_faults_ = 2;
  ASSERT_TRUE(observer_->Watch(dir_fd_, dev_));
  ASSERT_TRUE(observer_->Watch(dir_fd_, dev_));
  EXPECT_FALSE(observer_->Layout(dev_).has_value());
  EXPECT_EQ(reporter_.Count(kObserverMarkErrors), 1);
  ASSERT_TRUE(observer_->Watch(dir_fd_, dev_));
  EXPECT_TRUE(observer_->Layout(dev_).has_value());
  EXPECT_EQ(observer_->counters().rearms, 1);
  EXPECT_GE(CreateOneByOne(1, "second"), 1) << "re-armed";
}

TEST_F(ObserverMarksTest, AMarkOrReArmFailureIsReportedWithNoObserverLockHeld) {
  // The Reporter's log is the agent's callback: it may ask the observer for
  // its counters. Made from inside a lock, the report would block that call;
  // the log asks on another thread and gives up after 5 s, so a regression
  // fails here instead of hanging.
  int answered = 0, blocked = 0;
  std::vector<std::future<int64_t>> asks;  // a blocked ask ends once the lock goes; joined at the end
  reporter_.SetLog([&](LogLevel, const std::string&) {
    asks.push_back(std::async(std::launch::async, [&] { return observer_->counters().mark_failures; }));
    (asks.back().wait_for(std::chrono::seconds(5)) == std::future_status::ready ? answered : blocked)++;
  });
  ObserverOptions opts;
  opts.mark_fault = [this](dev_t) {
    return mark_faults_-- > 0 ? Status::FromErrno(ENOSPC, "fanotify_mark") : Status::Ok();
  };
  observer_ = std::make_unique<Observer>([] {}, [] {}, &reporter_, opts);
  ASSERT_TRUE(observer_->Start().ok());
  mark_faults_ = 1;  // the filesystem mark fails once
  EXPECT_FALSE(observer_->Watch(dir_fd_, dev_, nullptr, Reopen()));
  ASSERT_TRUE(observer_->Watch(dir_fd_, dev_, nullptr, Reopen()));
  EXPECT_EQ(observer_->counters().mark_retries, 1);
  // A re-arm that fails (after a create disarmed the tmpfs).
  CreateOneByOne(1, "first");
  ASSERT_EQ(observer_->counters().disarms, 1);
  mark_faults_ = 1;
  ASSERT_TRUE(observer_->Watch(dir_fd_, dev_));
  EXPECT_EQ(reporter_.Count(kObserverMarkErrors), 2);
  EXPECT_EQ(answered, 2) << "the positive control: each failure reached the log";
  EXPECT_EQ(blocked, 0) << "a report was made with an observer lock held";
  observer_.reset();  // before the log's captures go
}

TEST_F(ObserverMarksTest, AnotherAgentIsToldWithNoObserverLockHeld) {
  // What the prober registry tells (a change of the other agents, or its
  // failure) goes to the agent's callbacks, which may call the observer (a
  // Drain, its counters). Told while Drain held its lock, the log's own
  // Drain would block: the log drains on another thread and gives up after
  // 5 s, so a regression fails here instead of hanging.
  test::TempDir state("/tmp/shmk-observer-probers-");
  Result<std::unique_ptr<ProberRegistry>> joined = ProberRegistry::Join(state.path());
  ASSERT_TRUE(joined.ok()) << joined.status().message();
  std::shared_ptr<ProberRegistry> registry = std::move(*joined);
  // Told once (one change: the child joins), on whichever thread drained
  // its events (the observer's own, or this one).
  int answered = 0, blocked = 0;
  std::future<void> ask;  // a blocked ask ends once the lock goes
  std::promise<void> told;
  observer_ = std::make_unique<Observer>([] {}, [] {}, &reporter_, ObserverOptions{});
  observer_->SetProbers(registry, [&](const std::string&) {
    if (ask.valid()) return;
    ask = std::async(std::launch::async, [&] { observer_->Drain(); });
    (ask.wait_for(std::chrono::seconds(5)) == std::future_status::ready ? answered : blocked)++;
    told.set_value();
  });
  ASSERT_TRUE(observer_->Start().ok());
  ASSERT_TRUE(observer_->Watch(dir_fd_, dev_, nullptr, Reopen()));
  FileKey key = Make("seg");
  EXPECT_TRUE(observer_->Check(dir_fd_, "seg", key).probed_now);  // marked: its opens are events
  // Another agent (registered in the child itself) opens and closes it,
  // and stays registered.
  std::string path = dir_ + "/seg";
  const std::string& dir = state.path();
  Spawn([path, dir] {
    Result<std::unique_ptr<ProberRegistry>> r = ProberRegistry::Join(dir);
    if (!r.ok()) ::_exit(1);
    (void)r->release();  // registered until the child exits
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) ::_exit(1);
    ::close(fd);
  });
  observer_->Drain();
  ASSERT_EQ(told.get_future().wait_for(std::chrono::seconds(20)), std::future_status::ready)
      << "the new agent never reached the log";
  ask.wait();
  EXPECT_EQ(observer_->counters().other_agents, 1);
  EXPECT_GE(observer_->counters().prober_events, 1);
  EXPECT_EQ(answered, 1) << "the positive control: the new agent reached the log";
  EXPECT_EQ(blocked, 0) << "the probers log was called with the observer's drain lock held";
  observer_.reset();  // before the log's captures go
}

TEST_F(ObserverMarksTest, ADisarmedTmpfsIsNotPinned) {
  // The disarm reopens the tmpfs and keeps nothing open: once the test's own
  // descriptor is closed, a plain umount (no MNT_DETACH, as a kubelet's)
  // succeeds. The positive control: with a descriptor open it is EBUSY.
  StartObserver();
  CreateOneByOne(3, "c_");
  ASSERT_EQ(observer_->counters().disarms, 1);
  ASSERT_NE(::umount2(dir_.c_str(), 0), 0);
  EXPECT_EQ(errno, EBUSY);
  ::close(dir_fd_);
  dir_fd_ = -1;
  EXPECT_EQ(::umount2(dir_.c_str(), 0), 0) << ::strerror(errno);
}

TEST_F(ObserverMarksTest, ACreateAfterAScanIsListedByAnEarlyScan) {
  // Through a started agent whose periodic scan is far away: only the early
  // scan a create's event calls for can list a new file. Each create comes
  // right after the scan that listed the previous one (re-armed).
  Config config;
  config.agent.event_socket = "";
  config.agent.observe = true;
  config.agent.scan_interval = std::chrono::seconds(600);
  ScanOptions scan;
  scan.runtime_roots = {};
  scan.docker_socket = "";
  scan.host_shm_dirs = {dir_};
  Agent agent(config, scan);
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_STREQ(agent.observer_mode(), "fanotify");
  auto files = [&]() -> int {
    for (const PodRecord& p : agent.Snapshot()->pods) {
      if (p.host_dir == dir_) return p.files;
    }
    return -1;
  };
  ASSERT_EQ(files(), 0);
  for (int i = 1; i <= 3; ++i) {
    uint64_t before = agent.scans_completed();
    RunChild([&] {
      std::string path = dir_ + "/early_" + std::to_string(i);
      int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd < 0) ::_exit(1);
      ::close(fd);
    });
    // An early scan comes (at most one a second) and lists it.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (files() != i && std::chrono::steady_clock::now() < deadline) {
      agent.WaitForScan(agent.scans_completed(), std::chrono::seconds(5));
    }
    EXPECT_EQ(files(), i) << "create " << i << " was not listed by an early scan";
    EXPECT_GT(agent.scans_completed(), before);
  }
  ObserverCounters c = agent.observer_counters();
  EXPECT_GE(c.disarms, 3);
  EXPECT_GE(c.rearms, 2);
  agent.Stop();
}

TEST_F(ObserverMarksTest, AFileGrownBetweenTwoLightScansShowsItsNewSize) {
  Config config;
  config.agent.event_socket = "";
  config.agent.observe = true;
  config.agent.scan_interval = std::chrono::milliseconds(200);
  ScanOptions scan;
  scan.runtime_roots = {};
  scan.docker_socket = "";
  scan.host_shm_dirs = {dir_};
  Agent agent(config, scan);
  Make("grows", 4096);
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_STREQ(agent.observer_mode(), "fanotify");
  auto bytes = [&]() -> int64_t {
    for (const PodRecord& p : agent.Snapshot()->pods) {
      for (const SegmentRecord& s : p.top_segments) {
        if (s.path == dir_ + "/grows") return s.bytes;
      }
    }
    return -1;
  };
  auto light_scans = [&](int n) {
    for (int i = 0; i < n; ++i) ASSERT_TRUE(agent.WaitForScan(agent.scans_completed(), std::chrono::seconds(10)));
  };
  light_scans(3);
  ASSERT_EQ(bytes(), 4096);
  ASSERT_GE(agent.observer_counters().inode_marks, 1) << "the file was probed (and marked) by a scan";
  std::string path = dir_ + "/grows";
  RunChild([&] {
    int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0) ::_exit(1);
    static char chunk[1 << 16];
    for (int i = 0; i < 16; ++i) {
      if (::write(fd, chunk, sizeof chunk) != static_cast<ssize_t>(sizeof chunk)) ::_exit(1);
    }
    ::close(fd);
  });
  light_scans(3);
  EXPECT_EQ(bytes(), 4096 + (1 << 20)) << "a light scan reused the listing from before the growth";
  agent.Stop();
}

}  // namespace
}  // namespace shmkeeper

// SysV removal re-checks the kernel's own record of use (issue 23): right
// before IPC_RMID, in the segment's IPC namespace, nattch, cpid, lpid and the
// attach/detach times must be what the scan saw. A real segment in a real
// private IPC namespace, attached and detached by its owner process.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

#include "scan/sysv.h"

namespace shmkeeper {
namespace {

// A child in its own IPC namespace with one detached segment; each byte
// written to its command pipe makes it attach and detach the segment once
// and answer with one byte.
struct Owner {
  pid_t pid = 0;
  int cmd = -1, ack = -1;
  int32_t shmid = -1;

  void Start() {
    int c[2], a[2];
    ASSERT_EQ(::pipe(c), 0);
    ASSERT_EQ(::pipe(a), 0);
    pid = ::fork();
    if (pid == 0) {
      if (::unshare(CLONE_NEWIPC) != 0) ::_exit(1);
      int id = ::shmget(IPC_PRIVATE, 1 << 16, IPC_CREAT | 0600);
      if (id < 0) ::_exit(1);
      (void)!::write(a[1], &id, sizeof id);
      char ch;
      while (::read(c[0], &ch, 1) == 1) {
        void* at = ::shmat(id, nullptr, 0);
        if (at != reinterpret_cast<void*>(-1)) ::shmdt(at);
        (void)!::write(a[1], "x", 1);
      }
      ::_exit(0);
    }
    ::close(c[0]);
    ::close(a[1]);
    cmd = c[1];
    ack = a[0];
    ASSERT_EQ(::read(ack, &shmid, sizeof shmid), static_cast<ssize_t>(sizeof shmid));
  }
  void Use() {
    char ch = 'u';
    ASSERT_EQ(::write(cmd, &ch, 1), 1);
    ASSERT_EQ(::read(ack, &ch, 1), 1);
  }
  ~Owner() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (cmd >= 0) ::close(cmd);
    if (ack >= 0) ::close(ack);
  }
};

Result<SysvSegment> Find(pid_t pid, int32_t shmid) {
  SHMK_ASSIGN_OR_RETURN(std::vector<SysvSegment> segs, ListSysvShm(pid));
  for (const SysvSegment& s : segs) {
    if (s.shmid == shmid) return s;
  }
  return Status::NotFound("segment gone");
}

SysvExpect ExpectOf(const SysvSegment& s) { return {s.shmid, s.cpid, s.lpid, s.atime, s.dtime}; }

TEST(SysvRecheckTest, UseSinceTheScanKeepsTheSegment) {
  Owner owner;
  owner.Start();
  owner.Use();
  Result<SysvSegment> scanned = Find(owner.pid, owner.shmid);
  ASSERT_TRUE(scanned.ok()) << scanned.status().message();
  EXPECT_GT(scanned->atime, 0);  // the kernel's record of use is read
  EXPECT_GT(scanned->dtime, 0);
  EXPECT_EQ(scanned->nattch, 0);
  // The times have a one-second resolution: use it again in a later second
  // (wait for the clock's next second itself, not for a guess of a second).
  timespec clock{};
  ASSERT_EQ(::clock_gettime(CLOCK_REALTIME, &clock), 0);
  // Past the second's start by more than a tick: the kernel's coarse seconds moved too.
  timespec next{clock.tv_sec + 1, 20'000'000};
  while (::clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &next, nullptr) == EINTR) {
  }
  ASSERT_GT(::time(nullptr), scanned->atime);
  owner.Use();
  Status removed = RemoveSysvShm(owner.pid, ExpectOf(*scanned));
  EXPECT_EQ(removed.code(), Code::kFailedPrecondition) << removed.message();
  ASSERT_TRUE(Find(owner.pid, owner.shmid).ok()) << "a segment used since the scan was removed";
  // Positive control: with what the kernel shows now, removal goes through.
  Result<SysvSegment> now = Find(owner.pid, owner.shmid);
  ASSERT_TRUE(now.ok());
  EXPECT_TRUE(RemoveSysvShm(owner.pid, ExpectOf(*now)).ok());
  EXPECT_FALSE(Find(owner.pid, owner.shmid).ok());
}

TEST(SysvRecheckTest, AnotherCreatorUnderTheSameIdIsKept) {
  Owner owner;
  owner.Start();
  Result<SysvSegment> scanned = Find(owner.pid, owner.shmid);
  ASSERT_TRUE(scanned.ok());
  SysvExpect want = ExpectOf(*scanned);
  want.cpid += 1;  // as if the id had been reused by another creator
  EXPECT_EQ(RemoveSysvShm(owner.pid, want).code(), Code::kFailedPrecondition);
  EXPECT_TRUE(Find(owner.pid, owner.shmid).ok());
}

}  // namespace
}  // namespace shmkeeper

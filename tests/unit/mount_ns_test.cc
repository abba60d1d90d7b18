// scan/mount_ns.h against the real kernel: mount namespace ids, and a
// namespace made (unshare(CLONE_NEWNS) in a child, which needs
// CAP_SYS_ADMIN) listed with an id never seen before. Kernels before 6.12 have no such
// ioctls: there the functions must fail, never answer.
#include "scan/mount_ns.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "base/fileutil.h"

namespace shmkeeper {
namespace {

bool KernelHasThem() {
  struct utsname u;
  int major = 0, minor = 0;
  return ::uname(&u) == 0 && std::sscanf(u.release, "%d.%d", &major, &minor) == 2 &&
         (major > 6 || (major == 6 && minor >= 12));
}

TEST(MountNsTest, OwnNamespaceIsAmongEveryNamespace) {
  UniqueFd self(::open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(self.valid());
  Result<uint64_t> id = MountNamespaceId(self.get());
  if (!KernelHasThem()) {
    EXPECT_FALSE(id.ok());  // fails, never a made-up id
    GTEST_SKIP() << "Linux < 6.12: no NS_MNT_GET_INFO (the agent reads its node facts at every scan there)";
  }
  ASSERT_TRUE(id.ok()) << id.status().message();
  Result<std::vector<uint64_t>> all = MountNamespaceIds(self.get());
  ASSERT_TRUE(all.ok()) << all.status().message();
  EXPECT_TRUE(std::binary_search(all->begin(), all->end(), *id));
  EXPECT_TRUE(std::is_sorted(all->begin(), all->end()));
}

// Namespaces made one after another, each seen from ours and each with an
// id no other had; their order is not asserted (per-CPU batches).
TEST(MountNsTest, NamespacesMadeAfterwardsAreSeenWithNewIds) {
  if (!KernelHasThem()) GTEST_SKIP() << "Linux < 6.12: no NS_MNT_GET_NEXT";
  UniqueFd self(::open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(self.valid());
  Result<std::vector<uint64_t>> before = MountNamespaceIds(self.get());
  ASSERT_TRUE(before.ok()) << before.status().message();
  for (int round = 0; round < 4; ++round) {
    int ready[2], done[2];
    ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
    ASSERT_EQ(::pipe2(done, O_CLOEXEC), 0);
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(done[1]);  // the parent's end: its close is the signal
      char c = ::unshare(CLONE_NEWNS) == 0 ? 'y' : 'n';
      (void)!::write(ready[1], &c, 1);
      (void)!::read(done[0], &c, 1);  // held until the parent has asked
      ::_exit(0);
    }
    ::close(done[0]);
    ::close(ready[1]);
    char c = 0;
    ASSERT_EQ(::read(ready[0], &c, 1), 1);
    ::close(ready[0]);
    if (c != 'y') {
      ::close(done[1]);
      ::waitpid(child, nullptr, 0);
      GTEST_SKIP() << "unshare(CLONE_NEWNS) needs CAP_SYS_ADMIN (run as root)";
    }
    Result<std::vector<uint64_t>> after = MountNamespaceIds(self.get());
    UniqueFd theirs(::open(("/proc/" + std::to_string(child) + "/ns/mnt").c_str(), O_RDONLY | O_CLOEXEC));
    Result<uint64_t> child_id =
        theirs.valid() ? MountNamespaceId(theirs.get()) : Result<uint64_t>(Status::NotFound("ns"));
    ::close(done[1]);
    ::waitpid(child, nullptr, 0);
    ASSERT_TRUE(after.ok()) << after.status().message();
    ASSERT_TRUE(child_id.ok()) << child_id.status().message();
    EXPECT_FALSE(std::binary_search(before->begin(), before->end(), *child_id)) << "an id given before";
    EXPECT_TRUE(std::binary_search(after->begin(), after->end(), *child_id)) << "the new namespace not listed";
  }
}

TEST(MountNsTest, APidIsAskedOfItsPidNamespace) {
  UniqueFd own(::open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(own.valid());
  Result<pid_t> self = TgidFromPidNamespace(own.get(), ::getpid());
  if (!self.ok()) GTEST_SKIP() << "no NS_GET_TGID_FROM_PIDNS (Linux < 6.9): " << self.status().message();
  EXPECT_EQ(*self, ::getpid());
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);  // reaped: its pid runs nowhere now (the control)
  Result<pid_t> gone = TgidFromPidNamespace(own.get(), child);
  ASSERT_TRUE(gone.ok()) << gone.status().message();
  EXPECT_EQ(*gone, 0);
}

TEST(MountNsTest, AnFdThatIsNoNamespaceFails) {
  UniqueFd dir(::open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(dir.valid());
  EXPECT_FALSE(MountNamespaceId(dir.get()).ok());
  EXPECT_FALSE(MountNamespaceIds(dir.get()).ok());
}

}  // namespace
}  // namespace shmkeeper

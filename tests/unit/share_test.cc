#include "shmkeeper/share.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "../../plugin/share/holders.h"

namespace {

std::string Name(const char* tag) { return std::string("shmk-share-test-") + tag + "-" + std::to_string(getpid()); }

bool Exists(const std::string& name) { return ::access(("/dev/shm/" + name).c_str(), F_OK) == 0; }

TEST(ShareTest, CreateOpenShareAndTheLastReleaseUnlinks) {
  std::string name = Name("basic");
  shmk_segment* a = nullptr;
  ASSERT_EQ(shmk_create(name.c_str(), 1 << 20, &a), 0);
  EXPECT_EQ(shmk_size(a), 1u << 20);
  std::memcpy(shmk_data(a), "hello", 6);
  EXPECT_EQ(shmk_create(name.c_str(), 10, &a), EEXIST);
  pid_t child = fork();
  if (child == 0) {  // another process sees the same pages
    shmk_segment* b = nullptr;
    int ok = shmk_open(name.c_str(), 0, &b) == 0 && std::strcmp(static_cast<char*>(shmk_data(b)), "hello") == 0 &&
             shmk_size(b) == (1u << 20);
    shmk_release(b);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(Exists(name));  // the creator still holds it
  EXPECT_EQ(shmk_release(a), 0);
  EXPECT_FALSE(Exists(name));
}

TEST(ShareTest, BadInputIsAnErrnoNeverACrash) {
  shmk_segment* s = nullptr;
  const struct {
    const char* name;
    int want;
  } cases[] = {{"", EINVAL}, {"a/b", EINVAL}, {"..", EINVAL}, {"shmk-share-test-absent", ENOENT}};
  for (const auto& c : cases) EXPECT_EQ(shmk_open(c.name, 1, &s), c.want) << c.name;
  EXPECT_EQ(shmk_create(nullptr, 1, &s), EINVAL);
  // A plain file of that name is not a segment.
  std::string name = Name("plain");
  int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 8192), 0);
  close(fd);
  EXPECT_EQ(shmk_open(name.c_str(), 1, &s), EINVAL);
  shm_unlink(name.c_str());
  EXPECT_EQ(shmk_release(nullptr), EINVAL);
}

TEST(ShareTest, TooLargeFailsAtCreateAndLeavesNothing) {
  std::string name = Name("huge");
  shmk_segment* s = nullptr;
  int err = shmk_create(name.c_str(), size_t{1} << 50, &s);  // 1 PiB: the reservation fails up front
  EXPECT_TRUE(err == ENOSPC || err == EFBIG) << std::strerror(err);
  EXPECT_FALSE(Exists(name));
}

// The consumer table behind the CUDA export: a released slot and a dead
// holder's slot both stop counting; a live one counts until it leaves.
TEST(HoldersTest, CountsLiveHoldersOnlyAcrossProcesses) {
  auto* t = static_cast<shmk_holders*>(
      mmap(nullptr, sizeof(shmk_holders), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(t, MAP_FAILED);
  int to_child[2], from_child[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(from_child), 0);
  pid_t live = fork();
  if (live == 0) {  // joins, reports, and holds until told to leave
    int slot = -1;
    char c = shmk_holders_join(t, &slot) == 0 ? 'j' : 'x';
    if (write(from_child[1], &c, 1) != 1 || read(to_child[0], &c, 1) != 1) _exit(1);
    shmk_holders_leave(t, slot);
    _exit(0);
  }
  pid_t dying = fork();
  if (dying == 0) {  // joins and dies holding its slot
    int slot = -1;
    _exit(shmk_holders_join(t, &slot) == 0 ? 0 : 1);
  }
  char c = 0;
  ASSERT_EQ(read(from_child[0], &c, 1), 1);
  EXPECT_EQ(c, 'j');
  int status = 0;
  ASSERT_EQ(waitpid(dying, &status, 0), dying);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(shmk_holders_live(t), 1);  // the dead one's slot is freed, the live one counts
  EXPECT_EQ(shmk_holders_live(t), 1);
  ASSERT_EQ(write(to_child[1], "l", 1), 1);
  ASSERT_EQ(waitpid(live, &status, 0), live);
  EXPECT_EQ(shmk_holders_live(t), 0);
  for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) close(fd);
  munmap(t, sizeof(shmk_holders));
}

TEST(HoldersTest, FullTableIsEagainAndDeadSlotsAreReused) {
  shmk_holders t = {};
  int slot = -1;
  for (int i = 0; i < SHMK_MAX_HOLDERS; ++i) ASSERT_EQ(shmk_holders_join(&t, &slot), 0) << i;
  EXPECT_EQ(shmk_holders_join(&t, &slot), EAGAIN);
  EXPECT_EQ(shmk_holders_live(&t), SHMK_MAX_HOLDERS);
  t.slot[7].start_ticks += 1;  // as if a reused pid: another process now
  EXPECT_EQ(shmk_holders_join(&t, &slot), 0);
  EXPECT_EQ(slot, 7);
  shmk_holders_leave(&t, slot);
  EXPECT_EQ(shmk_holders_live(&t), SHMK_MAX_HOLDERS - 1);
  EXPECT_GT(shmk_process_start(static_cast<uint32_t>(getpid())), 0u);
  EXPECT_EQ(shmk_process_start(0), 0u);
}

}  // namespace

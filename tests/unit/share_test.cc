#include "shmkeeper/share.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

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

}  // namespace

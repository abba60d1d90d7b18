// Creator claims that name the sender's descriptor ("fd", issue 23): the
// number is a hint that saves the agent a walk of the sender's descriptors
// and mappings, never evidence. Real files on the host's /dev/shm, real
// processes as senders, VerifyCreatorClaim as the agent calls it; each
// attack has its positive control (the same sender and file, honestly).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <functional>
#include <string>

#include "node/creator_book.h"

namespace shmkeeper {
namespace {

class CreatorClaimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      paths_[i] = "/dev/shm/shmk-claim-" + std::to_string(::getpid()) + "-" + std::to_string(i);
      ::unlink(paths_[i].c_str());
    }
  }
  void TearDown() override {
    for (const std::string& p : paths_) ::unlink(p.c_str());
  }
  // Creates file `i` (empty, mode 0644) and returns its descriptor.
  int Create(int i) {
    int fd = ::open(paths_[i].c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0644);
    EXPECT_GE(fd, 0) << paths_[i];
    return fd;
  }
  Json Claim(int i, Json fd) const {
    Json doc = {{"type", "create"}, {"path", paths_[i]}};
    if (!fd.is_null()) doc["fd"] = fd;
    return doc;
  }
  // The verdict on `doc` from `sender` ("accepted" or the rejection's name).
  static std::string Verdict(const Json& doc, SenderCreds sender) {
    ClaimRejection why = ClaimRejection::kMalformed;
    Result<VerifiedClaim> claim = VerifyCreatorClaim(doc, sender, &why);
    if (!claim.ok()) return ClaimRejectionName(why);
    EXPECT_EQ(claim->record.host_pid, sender.pid);
    return "accepted";
  }
  std::string paths_[2];
};

// A sender: a child process that runs `setup` (as uid `uid` unless -1),
// reports the number it returns through a pipe and waits; killed by the
// destructor. (Never the test process itself: the verifier's own O_PATH look
// at the file would count as the sender's holding.)
class Sender {
 public:
  explicit Sender(const std::function<int()>& setup, int uid = -1) {
    int p[2];
    EXPECT_EQ(::pipe2(p, O_CLOEXEC), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      if (uid >= 0 && (::setgid(uid) != 0 || ::setuid(uid) != 0)) ::_exit(1);
      int fd = setup();
      (void)!::write(p[1], &fd, sizeof fd);
      ::pause();
      ::_exit(0);
    }
    ::close(p[1]);
    EXPECT_EQ(::read(p[0], &fd_, sizeof fd_), static_cast<ssize_t>(sizeof fd_));
    ::close(p[0]);
    uid_ = uid >= 0 ? static_cast<uid_t>(uid) : ::getuid();
  }
  ~Sender() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  SenderCreds creds() const { return {pid_, uid_}; }
  int fd() const { return fd_; }

 private:
  pid_t pid_ = -1;
  uid_t uid_ = 0;
  int fd_ = -1;
};

TEST_F(CreatorClaimTest, TheNamedDescriptorProvesHolding) {
  Sender s([&] { return Create(0); });
  EXPECT_EQ(Verdict(Claim(0, s.fd()), s.creds()), "accepted");
  EXPECT_EQ(Verdict(Claim(0, nullptr), s.creds()), "accepted");  // an older preload's record: the full check
}

TEST_F(CreatorClaimTest, ANumberTheSenderDoesNotHoldIsRefused) {
  ::close(Create(0));  // the file exists; the sender holds it nowhere
  Sender s([] { return 7; });
  EXPECT_EQ(Verdict(Claim(0, s.fd()), s.creds()), "not_holder");
  EXPECT_EQ(Verdict(Claim(0, 1000000), s.creds()), "not_holder");
  // Positive control: a sender holding the same file at the number it names.
  Sender holder([&] { return ::open(paths_[0].c_str(), O_RDONLY); });
  EXPECT_EQ(Verdict(Claim(0, holder.fd()), holder.creds()), "accepted");
}

TEST_F(CreatorClaimTest, ANumberHoldingAnotherFileIsRefused) {
  ::close(Create(0));
  ::close(Create(1));
  // The sender holds file 1 and names that number for file 0.
  Sender s([&] { return ::open(paths_[1].c_str(), O_RDONLY); });
  EXPECT_EQ(Verdict(Claim(0, s.fd()), s.creds()), "not_holder");
  EXPECT_EQ(Verdict(Claim(1, s.fd()), s.creds()), "accepted");  // control
}

TEST_F(CreatorClaimTest, ANumberReusedAfterCloseIsRefused) {
  ::close(Create(0));
  ::close(Create(1));
  Sender s([&] {
    int fd = ::open(paths_[0].c_str(), O_RDONLY);
    ::close(fd);
    int reused = ::open(paths_[1].c_str(), O_RDONLY);  // the lowest free number: the one file 0 had
    return reused == fd ? fd : -1;
  });
  ASSERT_GE(s.fd(), 0);
  EXPECT_EQ(Verdict(Claim(0, s.fd()), s.creds()), "not_holder");
  EXPECT_EQ(Verdict(Claim(1, s.fd()), s.creds()), "accepted");  // control
}

TEST_F(CreatorClaimTest, AMappingStillCountsOnceTheNamedDescriptorIsClosed) {
  int made = Create(0);
  ASSERT_EQ(::ftruncate(made, 4096), 0);
  ::close(made);
  Sender mapper([&] {  // as PyTorch does: open, ftruncate, mmap, close
    int fd = ::open(paths_[0].c_str(), O_RDWR);
    void* m = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    return m == MAP_FAILED ? -1 : fd;
  });
  ASSERT_GE(mapper.fd(), 0);
  EXPECT_EQ(Verdict(Claim(0, mapper.fd()), mapper.creds()), "accepted");
  Sender closed([&] {  // control: opened and closed, nothing kept
    int fd = ::open(paths_[0].c_str(), O_RDWR);
    ::close(fd);
    return fd;
  });
  EXPECT_EQ(Verdict(Claim(0, closed.fd()), closed.creds()), "not_holder");
}

TEST_F(CreatorClaimTest, ANumberThatIsNotADescriptorIsMalformed) {
  Sender s([&] { return Create(0); });
  for (const Json& bad : {Json(-1), Json(std::to_string(s.fd())), Json(int64_t{1} << 40), Json(2.5), Json::array()}) {
    EXPECT_EQ(Verdict(Claim(0, bad), s.creds()), "malformed") << bad.dump();
  }
  EXPECT_EQ(Verdict(Claim(0, s.fd()), s.creds()), "accepted");  // control
}

TEST_F(CreatorClaimTest, ANamedDescriptorDoesNotBypassOwnership) {
  if (::getuid() != 0) GTEST_SKIP() << "needs root (a sender of another uid)";
  ::close(Create(0));  // root's 0644 file in root's sticky /dev/shm: uid 65534 may open it, not remove it
  Sender forger([&] { return ::open(paths_[0].c_str(), O_RDONLY); }, 65534);
  ASSERT_GE(forger.fd(), 0);
  EXPECT_EQ(Verdict(Claim(0, forger.fd()), forger.creds()), "not_owner");
  // Control: a file that uid created itself is its own to claim.
  Sender creator([&] { return ::open(paths_[1].c_str(), O_CREAT | O_EXCL | O_RDWR, 0600); }, 65534);
  ASSERT_GE(creator.fd(), 0);
  EXPECT_EQ(Verdict(Claim(1, creator.fd()), creator.creds()), "accepted");
}

}  // namespace
}  // namespace shmkeeper

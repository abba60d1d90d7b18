// DatagramIntake directly (issue 35: direct tests of the engine's objects):
// what each datagram type does, a real creator claim recorded (the test is
// its own sender, on a file of its own in /dev/shm), refusals counted, and
// the log's rate limit on a FakeClock.
#include "node/datagram_intake.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "base/clock.h"
#include "scan/fs_identity.h"

namespace shmkeeper {
namespace {

class DatagramIntakeTest : public ::testing::Test {
 protected:
  DatagramIntakeTest()
      : book_(std::make_shared<CreatorBook>()),
        intake_(
            book_, [this] { pokes_++; }, [this](LogLevel, const std::string& line) { lines_.push_back(line); },
            &clock_) {}

  void Send(const std::string& payload) { intake_.OnDatagram(::getpid(), ::getuid(), payload); }
  int64_t Rejected(const char* why) {
    auto r = intake_.rejected();
    auto it = r.find(why);
    return it == r.end() ? 0 : it->second;
  }

  FakeClock clock_;
  std::shared_ptr<CreatorBook> book_;
  int pokes_ = 0;
  std::vector<std::string> lines_;
  DatagramIntake intake_;
};

// A file of the test's own in /dev/shm, open while the object lives.
class OwnShmFile {
 public:
  OwnShmFile() : name_("shmk-intake-test-" + std::to_string(::getpid())) {
    fd_ = ::open(("/dev/shm/" + name_).c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  }
  ~OwnShmFile() {
    if (fd_ >= 0) ::close(fd_);
    ::unlink(("/dev/shm/" + name_).c_str());
  }
  int fd() const { return fd_; }
  std::string claim() const { return R"({"type":"create","path":"/dev/shm/)" + name_ + R"("})"; }

 private:
  std::string name_;
  int fd_ = -1;
};

TEST_F(DatagramIntakeTest, StoppedAsksForAScanAndOlderNoticesAreIgnored) {
  Send(R"({"type":"stopped","id":"abc"})");
  EXPECT_EQ(pokes_, 1);
  Send(R"({"type":"unlink","path":"/dev/shm/x"})");
  Send(R"({"type":"memfd","name":"x"})");
  EXPECT_EQ(pokes_, 1);
  EXPECT_TRUE(intake_.rejected().empty());
  EXPECT_TRUE(lines_.empty());
}

TEST_F(DatagramIntakeTest, AnythingElseIsRefusedAsMalformedAndNamed) {
  Send("not json");
  Send(R"({"type":"reclaim","path":"/dev/shm/x"})");
  Send(R"({"type":"create"})");
  EXPECT_EQ(Rejected("malformed"), 3);
  EXPECT_EQ(pokes_, 0);
  ASSERT_EQ(lines_.size(), 3u);
  EXPECT_NE(lines_[0].find("refused a datagram from pid " + std::to_string(::getpid()) + " (malformed)"),
            std::string::npos)
      << lines_[0];
}

TEST_F(DatagramIntakeTest, AClaimOfAHeldFileIsRecordedAndOfAnotherRefused) {
  OwnShmFile file;
  ASSERT_GE(file.fd(), 0) << ::strerror(errno);
  struct stat st;
  ASSERT_EQ(::fstat(file.fd(), &st), 0);
  Result<uint64_t> fsid = FilesystemId(file.fd());
  ASSERT_TRUE(fsid.ok());
  Send(file.claim());
  EXPECT_TRUE(intake_.rejected().empty()) << (lines_.empty() ? "" : lines_[0]);
  std::optional<CreatorRecord> rec = book_->Find(FileKey{st.st_dev, st.st_ino}, *fsid);
  ASSERT_TRUE(rec.has_value()) << "the positive control: a held file's claim is recorded";
  EXPECT_EQ(rec->host_pid, ::getpid());
  // The same claim again by its creator: recorded again, no refusal.
  Send(file.claim());
  EXPECT_TRUE(intake_.rejected().empty());
  // A claim by another process that holds it too (a child, which inherited
  // the descriptor) while its creator runs: refused, the record kept.
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  intake_.OnDatagram(child, ::getuid(), file.claim());
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_EQ(Rejected("live_creator"), 1);
  EXPECT_EQ(book_->Find(FileKey{st.st_dev, st.st_ino}, *fsid)->host_pid, ::getpid());
  // A file that does not exist: no file.
  Send(R"({"type":"create","path":"/dev/shm/shmk-intake-test-absent"})");
  EXPECT_EQ(Rejected("no_file"), 1);
}

TEST_F(DatagramIntakeTest, RefusalsAreAllCountedButLoggedTenAMinute) {
  for (int i = 0; i < 25; ++i) Send("junk");
  EXPECT_EQ(Rejected("malformed"), 25);
  EXPECT_EQ(lines_.size(), static_cast<size_t>(DatagramIntake::kLinesPerWindow));
  clock_.Advance(std::chrono::seconds(59));
  Send("junk");
  EXPECT_EQ(lines_.size(), 10u) << "still the same minute";
  clock_.Advance(std::chrono::seconds(1));
  Send("junk");
  ASSERT_EQ(lines_.size(), 11u);
  EXPECT_EQ(lines_.back().rfind("16 more refused datagrams were not logged; ", 0), 0u) << lines_.back();
  EXPECT_EQ(Rejected("malformed"), 27);
}

}  // namespace
}  // namespace shmkeeper

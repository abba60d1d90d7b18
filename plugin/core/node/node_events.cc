#include "node/node_events.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

namespace shmkeeper {
namespace {

// Waits for `fd` or the stop eventfd; false when stopping.
bool WaitReadable(int fd, int stop) {
  pollfd fds[2] = {{fd, POLLIN, 0}, {stop, POLLIN, 0}};
  while (::poll(fds, 2, -1) < 0) {
    if (errno != EINTR) return false;
  }
  return !(fds[1].revents & POLLIN);
}

// Waits up to `ms` for the stop eventfd; true when stopping.
bool Stopping(int stop, int ms) {
  pollfd fd{stop, POLLIN, 0};
  int r;
  while ((r = ::poll(&fd, 1, ms)) < 0 && errno == EINTR) {
  }
  return r > 0;
}

void Signal(const UniqueFd& efd) {
  uint64_t one = 1;
  if (efd.valid()) (void)!::write(efd.get(), &one, sizeof one);
}

}  // namespace

EventReceiver::EventReceiver(std::string path, Handler on_datagram, Reporter* reporter, Clock* clock)
    : path_(std::move(path)), handler_(std::move(on_datagram)), reporter_(reporter), clock_(clock) {}

Status EventReceiver::Start() {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path_.size() >= sizeof addr.sun_path) return Status::Invalid("event socket path too long: " + path_);
  std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
  SHMK_RETURN_IF_ERROR(MakeDirs(path_.substr(0, path_.rfind('/'))));
  sock_.reset(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock_.valid()) return Status::FromErrno(errno, "socket");
  int on = 1;
  if (::setsockopt(sock_.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof on) != 0) {
    return Status::FromErrno(errno, "SO_PASSCRED");
  }
  // A socket file nobody has bound any more is a previous agent's: replace it.
  // One that answers belongs to a running agent: never steal it.
  UniqueFd probe(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (probe.valid() && ::connect(probe.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    return Status::Precondition(path_ + " is in use by another agent");
  }
  ::unlink(path_.c_str());
  if (::bind(sock_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return Status::FromErrno(errno, "bind " + path_);
  }
  if (::chmod(path_.c_str(), 0666) != 0) return Status::FromErrno(errno, "chmod " + path_);
  stop_.reset(::eventfd(0, EFD_CLOEXEC));
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void EventReceiver::Run() {
  ::pthread_setname_np(::pthread_self(), "shmk-datagrams");  // top -H, the benchmarks' per-thread CPU
  // Every wakeup drains what has queued (up to kBatch datagrams, then the
  // stop eventfd is looked at again): a burst of records costs one poll.
  constexpr int kBatch = 256;
  // After a pass that dropped a datagram over a sender's rate limit, the
  // receiver naps: that sender's next datagrams would be dropped too, and
  // reading them one wakeup each costs both sides a context switch per
  // datagram (a program creating segments in a tight loop: ~0.25x of its own
  // CPU in the agent). While it naps, datagrams queue (the kernel keeps
  // net.unix.max_dgram_qlen of them, 10 by default, and refuses the rest at
  // the sender: non-blocking senders such as the preload drop them). 2 ms
  // lets through ~5,500 datagrams a second, about the limit for all senders
  // together (sender_limiter.h).
  constexpr int kNapMs = 2;
  // A record is read kSettleMs after the first of a batch arrived: the
  // records of segments created and removed at once (a program cycling
  // through segments) then fail at the file's lookup, three system calls,
  // instead of being verified while the file briefly exists (~15 on /proc).
  // The cost: the record of a creator that dies within kSettleMs of its
  // create is refused (the sender is gone), and that segment is judged
  // without it (kept, unless its name says its creator).
  constexpr int kSettleMs = 5;
  while (WaitReadable(sock_.get(), stop_.get())) {
    if (Stopping(stop_.get(), kSettleMs)) break;
    bool over_limit = false;
    for (int i = 0; i < kBatch && ReceiveOne(&over_limit); ++i) {
    }
    if (over_limit && Stopping(stop_.get(), kNapMs)) break;
  }
}

bool EventReceiver::ReceiveOne(bool* over_limit) {
  char buf[4097];
  char control[CMSG_SPACE(sizeof(ucred))];
  iovec iov{buf, sizeof buf - 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n = ::recvmsg(sock_.get(), &msg, MSG_DONTWAIT);
  if (n < 0) {
    int err = errno;
    if (err == EAGAIN || err == EWOULDBLOCK) return false;
    if (err != EINTR && reporter_) {
      reporter_->Report(kDatagramsReceiveErrors, "dropped a datagram on " + path_ + ": recvmsg: " + std::strerror(err));
    }
    return err == EINTR;
  }
  if (msg.msg_flags & MSG_TRUNC) n = 0;
  pid_t sender = 0;
  uid_t uid = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
      ucred cred;
      std::memcpy(&cred, CMSG_DATA(c), sizeof cred);
      sender = cred.pid;
      uid = cred.uid;
    }
  }
  if (sender > 0 && !limiter_.Allow(sender, clock_->Now())) {
    *over_limit = true;
    if (reporter_) {
      reporter_->Report(kDatagramsRateLimited, "dropped a datagram on " + path_ + " from pid " +
                                                   std::to_string(sender) + ": over the senders' rate limits");
    }
  } else if (sender > 0) {
    handler_(sender, uid, std::string(buf, static_cast<size_t>(n)));
  } else if (reporter_) {
    reporter_->Report(kDatagramsNoCredentials, "dropped a datagram on " + path_ + " without sender credentials");
  }
  return true;
}

EventReceiver::~EventReceiver() {
  Signal(stop_);
  if (thread_.joinable()) thread_.join();
  if (sock_.valid()) ::unlink(path_.c_str());
}

ChangeWatcher::ChangeWatcher(std::function<void()> on_change, Reporter* reporter)
    : on_change_(std::move(on_change)), reporter_(reporter) {}

Status ChangeWatcher::Start() {
  inotify_.reset(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (!inotify_.valid()) return Status::FromErrno(errno, "inotify_init1");
  stop_.reset(::eventfd(0, EFD_CLOEXEC));
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void ChangeWatcher::SetPaths(const std::vector<std::string>& paths, const std::vector<std::string>& roots) {
  if (!inotify_.valid()) return;
  MutexLock l(&mu_);
  want_ = paths;
  roots_ = roots;
  Sync();
}

namespace {

bool IsDir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// `path` when it is a directory, else its nearest ancestor that is.
std::string NearestDir(std::string path) {
  while (!path.empty() && path != "/" && !IsDir(path)) {
    size_t slash = path.rfind('/');
    path = slash == 0 ? "/" : slash == std::string::npos ? "" : path.substr(0, slash);
  }
  return path;
}

}  // namespace

void ChangeWatcher::Sync() {
  std::set<std::string> want;
  for (const std::string& p : want_) {
    if (IsDir(p)) want.insert(p);  // a pod's shm directory: gone with its pod
  }
  for (const std::string& r : roots_) {
    want.insert(NearestDir(r));
    if (!IsDir(r)) continue;
    for (const std::string& sub : ListDir(r, /*dirs_only=*/true)) want.insert(r + "/" + sub);
  }
  want.erase("");
  for (auto it = watches_.begin(); it != watches_.end();) {
    if (want.count(it->first)) {
      ++it;
      continue;
    }
    ::inotify_rm_watch(inotify_.get(), it->second);
    it = watches_.erase(it);
  }
  constexpr uint32_t kMask = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_CLOSE_WRITE | IN_ONLYDIR;
  for (const std::string& p : want) {
    if (watches_.count(p)) continue;
    int wd = ::inotify_add_watch(inotify_.get(), p.c_str(), kMask);
    int err = errno;
    if (wd >= 0) {
      watches_[p] = wd;
      failed_.erase(p);
    } else if (err != ENOENT && failed_.insert(p).second && reporter_) {  // ENOENT: gone since it was listed
      reporter_->Report(kWatcherErrors,
                        "cannot watch " + p + " (changes there wait for the periodic scan): " + std::strerror(err));
    }
  }
  std::erase_if(failed_, [&](const std::string& p) { return !want.count(p); });
}

void ChangeWatcher::Run() {
  ::pthread_setname_np(::pthread_self(), "shmk-inotify");  // top -H, the benchmarks' per-thread CPU
  alignas(inotify_event) char buf[16384];
  while (WaitReadable(inotify_.get(), stop_.get())) {
    bool any = false;
    while (::read(inotify_.get(), buf, sizeof buf) > 0) any = true;  // drain: one wake per burst
    if (!any) continue;
    {
      MutexLock l(&mu_);
      Sync();  // a root that appeared, a new container directory: watched before the scan runs
    }
    on_change_();
  }
}

ChangeWatcher::~ChangeWatcher() {
  Signal(stop_);
  if (thread_.joinable()) thread_.join();
}

}  // namespace shmkeeper

#include "http_guard.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <deque>
#include <optional>
#include <sstream>
#include <vector>

namespace shmkeeper::agent {

using Clock = std::chrono::steady_clock;

struct HttpGuard::Slot {
  int watch_fd = -1;   // a dup of the connection's socket; closed by Release
  uint64_t inode = 0;  // the socket's identity (fd numbers are reused)
  int fd = -1;         // the library's descriptor number, for FindAcceptedSocket
  std::string client;  // source address
  Phase phase = kHeader;
  Clock::time_point deadline;
  bool killed = false;
};

namespace {

thread_local std::shared_ptr<void> t_slot;  // the connection this worker serves

constexpr const char* kRefusalNames[] = {"max_connections", "max_connections_per_client"};
constexpr const char* kPhaseNames[] = {"header", "response", "idle"};

uint64_t InodeOf(int fd) {
  struct stat st;
  return ::fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

std::string PeerAddress(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char buf[INET6_ADDRSTRLEN] = "?";
  if (ss.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, buf, sizeof buf);
  } else if (ss.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr, buf, sizeof buf);
  }
  return buf;
}

// The local port of a connected TCP socket, or -1 (not a socket, not
// connected, a listener).
int ConnectedLocalPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return -1;
  int port = -1;
  if (ss.ss_family == AF_INET) port = ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) port = ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  if (port < 0) return -1;
  int listening = 0;
  socklen_t ol = sizeof listening;
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ol) != 0 || listening) return -1;
  sockaddr_storage peer{};
  socklen_t pl = sizeof peer;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) return -1;
  return port;
}

// The local port of a listening TCP socket, or -1.
int ListeningPort(int fd) {
  int listening = 0;
  socklen_t ol = sizeof listening;
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ol) != 0 || !listening) return -1;
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return -1;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return -1;
}

time_t Seconds(std::chrono::milliseconds d) { return std::max<time_t>(1, (d.count() + 999) / 1000); }

}  // namespace

// The library's TaskQueue: one worker per admitted connection (workers are
// kept for reuse), admission on the listening thread.
class HttpGuard::Queue : public httplib::TaskQueue {
 public:
  explicit Queue(HttpGuard* guard) : guard_(guard) {}
  ~Queue() override = default;

  void enqueue(std::function<void()> fn) override {
    std::shared_ptr<Slot> slot = guard_->Admit();
    if (!slot) {
      fn();  // the socket is shut down: the library reads EOF and closes it at once
      return;
    }
    std::lock_guard<std::mutex> l(mu_);
    jobs_.push_back({std::move(slot), std::move(fn)});
    // Each queued job needs its own idle worker (a woken one may not have
    // taken its job yet): no admitted connection waits for another.
    if (static_cast<int>(jobs_.size()) > idle_) {
      workers_.emplace_back([this] { Work(); });
    } else {
      cv_.notify_one();
    }
  }

  void shutdown() override {
    guard_->KillAll();
    {
      std::lock_guard<std::mutex> l(mu_);
      done_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

 private:
  struct Job {
    std::shared_ptr<Slot> slot;
    std::function<void()> fn;
  };
  void Work() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      ++idle_;
      cv_.wait(l, [&] { return done_ || !jobs_.empty(); });
      --idle_;
      if (jobs_.empty()) return;  // done_
      Job job = std::move(jobs_.front());
      jobs_.pop_front();
      l.unlock();
      t_slot = job.slot;
      job.fn();
      t_slot.reset();
      guard_->Release(job.slot);
      l.lock();
    }
  }

  HttpGuard* guard_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  std::vector<std::thread> workers_;
  int idle_ = 0;
  bool done_ = false;
};

HttpGuard::HttpGuard(HttpLimits limits) : limits_(limits), watchdog_([this] { Watchdog(); }) {}

HttpGuard::~HttpGuard() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  watchdog_.join();
}

void HttpGuard::Install(httplib::Server* server, int port, Authorize authorize) {
  port_ = port;
  // The library listens with a backlog of 5: a burst of connections (an
  // attacker's, or many clients after a restart) would make the kernel drop
  // the SYNs of well-behaved clients, who then retry after a second or more.
  // listen(2) again on the bound socket raises it; refusals are ours to make.
  rlimit rl{};
  int limit = ::getrlimit(RLIMIT_NOFILE, &rl) == 0 ? static_cast<int>(std::min<rlim_t>(rl.rlim_cur, 1 << 20)) : 1024;
  for (int fd = 0; fd < limit; ++fd) {
    if (ListeningPort(fd) == port) {
      ::listen(fd, SOMAXCONN);
      break;
    }
  }
  server->new_task_queue = [this] { return new Queue(this); };
  // Per recv/send: a client must make progress within this; the deadlines
  // below bound the whole head and the whole response.
  server->set_read_timeout(Seconds(limits_.header_timeout), 0);
  server->set_write_timeout(Seconds(limits_.write_timeout), 0);
  server->set_keep_alive_timeout(Seconds(limits_.idle_timeout));
  server->set_keep_alive_max_count(100);
  server->set_payload_max_length(64 * 1024);  // GET only: no request has a body worth reading
  server->set_pre_routing_handler([this, authorize](const httplib::Request& req, httplib::Response& res) {
    MarkHeadComplete();
    if (authorize && !authorize(req, res)) return httplib::Server::HandlerResponse::Handled;
    return httplib::Server::HandlerResponse::Unhandled;
  });
  server->set_logger([this](const httplib::Request&, const httplib::Response&) { MarkResponseWritten(); });
}

int HttpGuard::FindAcceptedSocket(const std::set<uint64_t>& known) const {
  rlimit rl{};
  int limit = ::getrlimit(RLIMIT_NOFILE, &rl) == 0 ? static_cast<int>(std::min<rlim_t>(rl.rlim_cur, 1 << 20)) : 1024;
  // accept(2) returned the lowest free descriptor: the scan ends early.
  for (int fd = 0; fd < limit; ++fd) {
    if (ConnectedLocalPort(fd) != port_) continue;
    if (known.count(InodeOf(fd))) continue;  // a tracked connection (its own descriptor or the guard's dup)
    return fd;
  }
  return -1;
}

std::shared_ptr<HttpGuard::Slot> HttpGuard::Admit() {
  std::set<uint64_t> known;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& s : slots_) known.insert(s->inode);
  }
  auto slot = std::make_shared<Slot>();
  slot->fd = FindAcceptedSocket(known);
  if (slot->fd >= 0) {
    slot->inode = InodeOf(slot->fd);
    slot->client = PeerAddress(slot->fd);
  }
  std::lock_guard<std::mutex> l(mu_);
  int refuse = -1;
  if (static_cast<int>(slots_.size()) >= limits_.max_connections) {
    refuse = kMaxConnections;
  } else if (per_client_[slot->client] >= limits_.max_connections_per_client) {
    refuse = kMaxPerClient;
  }
  if (refuse >= 0) {
    if (per_client_[slot->client] == 0) per_client_.erase(slot->client);
    ++counts_.refused[refuse];
    if (slot->fd >= 0) {
      static constexpr char k503[] =
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 21\r\n"
          "Connection: close\r\n\r\ntoo many connections\n";
      (void)!::send(slot->fd, k503, sizeof k503 - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
      ::shutdown(slot->fd, SHUT_RDWR);
    }
    return nullptr;
  }
  if (slot->fd >= 0) slot->watch_fd = ::fcntl(slot->fd, F_DUPFD_CLOEXEC, 0);
  slot->deadline = Clock::now() + limits_.header_timeout;
  ++per_client_[slot->client];
  ++counts_.accepted;
  slots_.insert(slot);
  wake_.notify_all();  // a new deadline for the watchdog
  return slot;
}

void HttpGuard::Release(const std::shared_ptr<Slot>& slot) {
  std::lock_guard<std::mutex> l(mu_);
  if (--per_client_[slot->client] <= 0) per_client_.erase(slot->client);
  if (slot->watch_fd >= 0) ::close(slot->watch_fd);
  slot->watch_fd = -1;
  slots_.erase(slot);
}

void HttpGuard::MarkHeadComplete() {
  auto slot = std::static_pointer_cast<Slot>(t_slot);
  if (!slot) return;
  std::lock_guard<std::mutex> l(mu_);
  slot->phase = kResponse;
  slot->deadline = Clock::now() + limits_.write_timeout;  // may be earlier than the head's
  wake_.notify_all();
}

void HttpGuard::MarkResponseWritten() {
  auto slot = std::static_pointer_cast<Slot>(t_slot);
  if (!slot) return;
  std::lock_guard<std::mutex> l(mu_);
  slot->phase = kIdle;
  slot->deadline = Clock::now() + limits_.idle_timeout + limits_.header_timeout;
}

void HttpGuard::Watchdog() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stopping_) {
    // Asleep until the earliest deadline of a connection served now; with
    // none, until one is admitted: an idle agent has no timer here. A
    // deadline set or moved wakes it (Admit, MarkHeadComplete, ...).
    std::optional<Clock::time_point> next;
    for (const auto& s : slots_) {
      if (!s->killed && (!next || s->deadline < *next)) next = s->deadline;
    }
    if (next) {
      wake_.wait_until(l, *next);
    } else {
      wake_.wait(l);
    }
    Clock::time_point now = Clock::now();
    for (const auto& s : slots_) {
      if (s->killed || now < s->deadline) continue;
      s->killed = true;
      ++counts_.timed_out[s->phase];
      if (s->watch_fd >= 0) ::shutdown(s->watch_fd, SHUT_RDWR);  // the worker's recv/send returns at once
    }
  }
}

void HttpGuard::KillAll() {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& s : slots_) {
    s->killed = true;
    if (s->watch_fd >= 0) ::shutdown(s->watch_fd, SHUT_RDWR);
  }
}

void HttpGuard::CountUnauthorized() {
  std::lock_guard<std::mutex> l(mu_);
  ++counts_.unauthorized;
}

HttpGuard::Counts HttpGuard::counts() const {
  std::lock_guard<std::mutex> l(mu_);
  Counts c = counts_;
  c.open = static_cast<int>(slots_.size());
  return c;
}

std::string HttpGuard::RenderMetrics() const {
  Counts c = counts();
  std::ostringstream o;
  auto help = [&](const char* name, const char* type, const char* text) {
    o << "# HELP " << name << " " << text << "\n# TYPE " << name << " " << type << "\n";
  };
  help("shmkeeper_http_connections_accepted_total", "counter", "Connections admitted by the metrics listener.");
  o << "shmkeeper_http_connections_accepted_total " << c.accepted << "\n";
  help("shmkeeper_http_connections_open", "gauge", "Connections the metrics listener serves now.");
  o << "shmkeeper_http_connections_open " << c.open << "\n";
  help("shmkeeper_http_connections_refused_total", "counter",
       "Connections refused at once (agent.metrics.maxConnections, maxConnectionsPerClient), by reason.");
  for (int r = 0; r < kRefusalCount; ++r) {
    o << "shmkeeper_http_connections_refused_total{reason=\"" << kRefusalNames[r] << "\"} " << c.refused[r] << "\n";
  }
  help("shmkeeper_http_connections_timed_out_total", "counter",
       "Connections closed by the agent because a request head (headerTimeout), a response (writeTimeout) or an "
       "idle keep-alive (idleTimeout) took too long, by phase.");
  for (int p = 0; p < kPhaseCount; ++p) {
    o << "shmkeeper_http_connections_timed_out_total{phase=\"" << kPhaseNames[p] << "\"} " << c.timed_out[p] << "\n";
  }
  help("shmkeeper_http_requests_unauthorized_total", "counter",
       "Requests for /metrics refused for a missing or wrong bearer token.");
  o << "shmkeeper_http_requests_unauthorized_total " << c.unauthorized << "\n";
  return o.str();
}

}  // namespace shmkeeper::agent

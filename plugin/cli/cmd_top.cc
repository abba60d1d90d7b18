// shmkeeper top: a live terminal view of the pods' shared memory, in plain
// ANSI. The numbers come from ListPods and GetNode; the view is redrawn on
// every event of the agent's Watch stream (shown at the bottom) and every
// --interval. Keys: q quits, s changes the sort. --once prints one frame
// without terminal control (for scripts, or a terminal-less check).
#include <fcntl.h>
#include <google/protobuf/util/time_util.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <deque>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>

#include "agent_client.h"
#include "base/fileutil.h"
#include "base/term_escape.h"

namespace shmkeeper::cli {
namespace {

constexpr const char* kSortKeys[] = {"use", "used", "size", "leaked", "name"};
constexpr size_t kMaxEvents = 5;
constexpr int kBarWidth = 20;

struct TopFlags {
  AgentFlags agent;
  std::string ns;
  std::string sort = "use";
  double interval_s = 2;
  bool once = false;
};

// ---- one frame ---------------------------------------------------------------

double UseRatio(const v1::Pod& p) {
  return p.shm().size_bytes() > 0 ? static_cast<double>(p.shm().used_bytes()) / p.shm().size_bytes() : 0;
}

void SortPods(std::vector<v1::Pod>* pods, const std::string& key) {
  auto name = [](const v1::Pod& p) { return p.namespace_() + "/" + p.name(); };
  std::stable_sort(pods->begin(), pods->end(), [&](const v1::Pod& a, const v1::Pod& b) {
    if (key == "name") return name(a) < name(b);
    if (key == "used") return a.shm().used_bytes() > b.shm().used_bytes();
    if (key == "size") return a.shm().size_bytes() > b.shm().size_bytes();
    if (key == "leaked") return a.leaked_bytes() > b.leaked_bytes();
    return UseRatio(a) > UseRatio(b);
  });
}

std::string Bar(double ratio) {
  int filled = static_cast<int>(std::clamp(ratio, 0.0, 1.0) * kBarWidth + 0.5);
  return "[" + std::string(filled, '#') + std::string(kBarWidth - filled, '.') + "]";
}

std::string Pad(std::string s, size_t width, bool right = false) {
  if (s.size() > width) s = s.substr(0, width);
  std::string fill(width - s.size(), ' ');
  return right ? fill + s : s + fill;
}

// A pod name in `width` columns: long ones keep their end (paths and pod names differ there).
std::string FitName(const std::string& s, size_t width) {
  return Pad(s.size() > width ? "..." + s.substr(s.size() - (width - 3)) : s, width);
}

std::string Clock() {
  std::string t = google::protobuf::util::TimeUtil::ToString(google::protobuf::util::TimeUtil::GetCurrentTime());
  return t.size() >= 19 ? t.substr(11, 8) : t;  // HH:MM:SS of an RFC 3339 time
}

// One table line: pod, kind, bar, percent, used, size, leaked, sized by.
std::string Row(size_t name_w, const std::string& name, const std::string& kind, const std::string& bar,
                const std::string& pct, const std::string& used, const std::string& size, const std::string& leaked,
                const std::string& sized) {
  return FitName(name, name_w) + "  " + Pad(kind, 10) + "  " + Pad(bar, kBarWidth + 2) + "  " + Pad(pct, 4, true) +
         "  " + Pad(used, 9, true) + "  " + Pad(size, 9, true) + "  " + Pad(leaked, 9, true) + "  " + sized;
}

std::string PodRow(const v1::Pod& p, size_t name_w) {
  const v1::ShmUsage& u = p.shm();
  std::string sized = u.sized_by().empty() ? "-" : u.sized_by();
  if (!u.requested_source().empty()) sized += " (" + u.requested_source() + ")";
  return Row(name_w, TermEscape(PodName(p.namespace_(), p.name())), KindName(p.kind()), Bar(UseRatio(p)),
             std::to_string(static_cast<int>(UseRatio(p) * 100 + 0.5)) + "%", Iec(u.used_bytes()), Iec(u.size_bytes()),
             Iec(p.leaked_bytes()), TermEscape(sized));
}

size_t NameWidth(const std::vector<v1::Pod>& pods) {
  size_t w = 16;
  for (const v1::Pod& p : pods) w = std::max(w, TermEscape(PodName(p.namespace_(), p.name())).size());
  return std::min<size_t>(w, 48);
}

// The frame as lines, none wider than `width`, at most `height` of them.
std::vector<std::string> Frame(const v1::Node& node, std::vector<v1::Pod> pods, const std::string& sort,
                               const std::deque<std::string>& events, const std::string& error, size_t width,
                               size_t height) {
  SortPods(&pods, sort);
  size_t name_w = NameWidth(pods);
  std::vector<std::string> lines = {
      "shmkeeper top  " + TermEscape(node.hostname()) + "  " + std::to_string(pods.size()) + " pods, " +
          Iec(node.pods_shm_used_bytes()) + " of shared memory, leaked " + Iec(node.leaked_bytes()) + "  " + Clock(),
      "sort: " + sort + "   keys: s sort, q quit" + (error.empty() ? "" : "   ! " + TermEscape(error)), "",
      Row(name_w, "POD", "KIND", "USE", "%", "USED", "SIZE", "LEAKED", "SIZED BY")};
  size_t reserved = lines.size() + 1 + (events.empty() ? 0 : events.size() + 2);  // + the "more" line
  size_t room = height > reserved ? height - reserved : 1;
  for (size_t i = 0; i < pods.size() && i < room; ++i) lines.push_back(PodRow(pods[i], name_w));
  if (pods.size() > room) lines.push_back("... " + std::to_string(pods.size() - room) + " more");
  if (!events.empty()) {
    lines.push_back("");
    lines.push_back("events:");
    for (const std::string& e : events) lines.push_back("  " + e);
  }
  for (std::string& l : lines) {
    if (l.size() > width) l.resize(width);
  }
  if (lines.size() > height) lines.resize(height);
  return lines;
}

// ---- the agent ---------------------------------------------------------------

struct Numbers {
  v1::Node node;
  std::vector<v1::Pod> pods;
};

Result<Numbers> Fetch(v1::ShmKeeper::Stub& stub, const TopFlags& f) {
  Numbers n;
  grpc::ClientContext node_ctx, pods_ctx;
  SetDeadline(&node_ctx);
  SetDeadline(&pods_ctx);
  v1::GetNodeResponse node;
  if (grpc::Status s = stub.GetNode(&node_ctx, {}, &node); !s.ok()) return RpcError(f.agent, s);
  v1::ListPodsRequest req;
  req.set_namespace_(f.ns);
  v1::ListPodsResponse pods;
  if (grpc::Status s = stub.ListPods(&pods_ctx, req, &pods); !s.ok()) return RpcError(f.agent, s);
  n.node = node.node();
  n.pods.assign(pods.pods().begin(), pods.pods().end());
  return n;
}

// Follows the agent's Watch stream on its own thread (reconnecting while the
// view runs) and wakes the view through a pipe on every event.
class EventFeed {
 public:
  EventFeed(v1::ShmKeeper::Stub* stub, std::string ns, int wake_fd)
      : stub_(stub), ns_(std::move(ns)), wake_fd_(wake_fd), thread_([this] { Run(); }) {}
  ~EventFeed() {
    stop_ = true;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (ctx_) ctx_->TryCancel();
    }
    thread_.join();
  }
  std::deque<std::string> Recent() {
    std::lock_guard<std::mutex> l(mu_);
    return recent_;
  }

 private:
  void Run() {
    while (!stop_) {
      auto ctx = std::make_shared<grpc::ClientContext>();
      {
        std::lock_guard<std::mutex> l(mu_);
        if (stop_) return;
        ctx_ = ctx;
      }
      v1::WatchRequest req;
      req.set_namespace_(ns_);
      std::unique_ptr<grpc::ClientReader<v1::Event>> reader = stub_->Watch(ctx.get(), req);
      v1::Event e;
      while (reader->Read(&e)) Add(e);
      (void)reader->Finish();  // a gone agent shows as a fetch error in the view; retry below
      for (int i = 0; i < 10 && !stop_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  void Add(const v1::Event& e) {
    std::string pod = TermEscape(PodName(e.pod().namespace_(), e.pod().name()));
    std::string time = google::protobuf::util::TimeUtil::ToString(e.time());
    {
      std::lock_guard<std::mutex> l(mu_);
      recent_.push_back((time.size() >= 19 ? time.substr(11, 8) : time) + "  " +
                        v1::EventType_Name(e.type()).substr(11) + "  " + pod + "  " + TermEscape(e.message()));
      if (recent_.size() > kMaxEvents) recent_.pop_front();
    }
    char b = 'e';
    (void)!::write(wake_fd_, &b, 1);  // a full pipe already wakes the view
  }

  v1::ShmKeeper::Stub* stub_;
  std::string ns_;
  int wake_fd_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::shared_ptr<grpc::ClientContext> ctx_;
  std::deque<std::string> recent_;
  std::thread thread_;
};

// ---- the terminal ------------------------------------------------------------

std::atomic<bool> g_quit{false};
void OnQuitSignal(int) { g_quit = true; }
void OnResize(int) {}  // only interrupts poll(): the next frame reads the new size

// Raw keys, the alternate screen and a hidden cursor while alive; restores the terminal when destroyed.
class RawTerminal {
 public:
  static Result<std::unique_ptr<RawTerminal>> Open() {
    auto t = std::unique_ptr<RawTerminal>(new RawTerminal());
    if (::tcgetattr(STDIN_FILENO, &t->saved_) != 0) return Status::FromErrno(errno, "tcgetattr");
    termios raw = t->saved_;
    raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    if (::tcsetattr(STDIN_FILENO, TCSANOW, &raw) != 0) return Status::FromErrno(errno, "tcsetattr");
    t->active_ = true;
    std::cout << "\x1b[?1049h\x1b[?25l" << std::flush;
    return t;
  }
  ~RawTerminal() {
    if (!active_) return;
    std::cout << "\x1b[?25h\x1b[?1049l" << std::flush;
    (void)::tcsetattr(STDIN_FILENO, TCSANOW, &saved_);  // nothing better to do with a failure on the way out
  }
  static std::pair<size_t, size_t> Size() {
    winsize ws{};
    if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0) return {80, 24};
    return {ws.ws_col, ws.ws_row};
  }
  static void Draw(const std::vector<std::string>& lines) {
    std::string out = "\x1b[H";
    for (const std::string& l : lines) out += l + "\x1b[K\r\n";
    out += "\x1b[J";
    std::cout << out << std::flush;
  }

 private:
  RawTerminal() = default;
  termios saved_{};
  bool active_ = false;
};

void InstallSignals() {
  struct sigaction sa {};
  sa.sa_handler = OnQuitSignal;  // no SA_RESTART: poll() returns at once
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  sa.sa_handler = OnResize;
  sigaction(SIGWINCH, &sa, nullptr);
}

// Reads pending keys; returns false on q, or when the terminal is gone.
bool HandleKeys(int fd, std::string* sort) {
  char buf[64];
  ssize_t n = ::read(fd, buf, sizeof(buf));
  if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return false;
  for (ssize_t i = 0; i < n; ++i) {
    if (buf[i] == 'q' || buf[i] == 'Q') return false;
    if (buf[i] == 's' || buf[i] == 'S') {
      auto it = std::find(std::begin(kSortKeys), std::end(kSortKeys), *sort);
      *sort = (it == std::end(kSortKeys) || it + 1 == std::end(kSortKeys)) ? kSortKeys[0] : *(it + 1);
    }
  }
  return true;
}

// Drains the wake-up pipe (its bytes only say "something happened").
void Drain(int fd) {
  char buf[256];
  while (::read(fd, buf, sizeof(buf)) > 0) {
  }
}

Status Live(v1::ShmKeeper::Stub& stub, TopFlags f, Numbers first) {
  SHMK_ASSIGN_OR_RETURN(std::unique_ptr<RawTerminal> term, RawTerminal::Open());
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return Status::FromErrno(errno, "pipe");
  UniqueFd wake_read(fds[0]), wake_write(fds[1]);
  InstallSignals();
  Numbers now = std::move(first);
  std::string error;
  EventFeed feed(&stub, f.ns, wake_write.get());  // joined before the pipe closes
  while (!g_quit) {
    auto [w, h] = RawTerminal::Size();
    RawTerminal::Draw(Frame(now.node, now.pods, f.sort, feed.Recent(), error, w, h));
    pollfd in[2] = {{STDIN_FILENO, POLLIN, 0}, {wake_read.get(), POLLIN, 0}};
    int ready = ::poll(in, 2, static_cast<int>(f.interval_s * 1000));
    if (ready > 0 && (in[0].revents & (POLLHUP | POLLERR | POLLNVAL)) && !(in[0].revents & POLLIN)) break;
    if (ready > 0 && (in[0].revents & POLLIN) && !HandleKeys(STDIN_FILENO, &f.sort)) break;
    if (ready > 0 && (in[1].revents & POLLIN)) Drain(wake_read.get());
    Result<Numbers> next = Fetch(stub, f);
    error = next.ok() ? "" : next.status().message();
    if (next.ok()) now = std::move(*next);
  }
  return Status::Ok();
}

Status Top(const TopFlags& f) {
  if (std::find(std::begin(kSortKeys), std::end(kSortKeys), f.sort) == std::end(kSortKeys)) {
    return Status::Invalid("--sort \"" + f.sort + "\": use one of use, used, size, leaked, name");
  }
  if (!(f.interval_s >= 0.1 && f.interval_s <= 3600)) return Status::Invalid("--interval must be 0.1 to 3600 seconds");
  if (!f.once && !(::isatty(STDIN_FILENO) && ::isatty(STDOUT_FILENO))) {
    return Status::Invalid("top needs a terminal on stdin and stdout (--once prints one frame)");
  }
  SHMK_ASSIGN_OR_RETURN(std::unique_ptr<v1::ShmKeeper::Stub> stub, Connect(f.agent));
  SHMK_ASSIGN_OR_RETURN(Numbers first, Fetch(*stub, f));  // an unreachable agent: one line, exit 1
  if (!f.once) return Live(*stub, f, std::move(first));
  for (const std::string& l : Frame(first.node, first.pods, f.sort, {}, "", 200, 1000)) std::cout << l << "\n";
  return Status::Ok();
}

}  // namespace

void RegisterTop(CLI::App& app, Outcome& outcome) {
  auto f = std::make_shared<TopFlags>();
  CLI::App* top = app.add_subcommand("top", "Live view of the pods' shared memory (q quits, s changes the sort)");
  f->agent.Add(top, /*with_output=*/false);
  top->add_option("-n,--namespace", f->ns, "Only this namespace (compose: project)");
  top->add_option("--sort", f->sort, "use (used/size), used, size, leaked or name")->capture_default_str();
  top->add_option("--interval", f->interval_s, "Seconds between refreshes (events refresh at once)")
      ->capture_default_str();
  top->add_flag("--once", f->once, "Print one frame and exit (no terminal needed)");
  top->callback([f, &outcome] { outcome.status = Top(*f); });
}

}  // namespace shmkeeper::cli

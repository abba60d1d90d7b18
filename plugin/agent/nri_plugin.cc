#include "nri_plugin.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "decide/size_container.h"
#include "nri_catchup.h"
#include "nri_decide.h"
#include "nri_mountns.h"
#include "nri_rootfs.h"

namespace shmkeeper::agent {
namespace api = ::nri::pkg::api::v1alpha1;

NriPlugin::NriPlugin(std::string socket, NriSessionOptions options, ConfigFn config, Os* os, NriStats* stats, LogFn log)
    : socket_(std::move(socket)),
      options_(std::move(options)),
      config_(std::move(config)),
      os_(os),
      stats_(stats),
      log_(std::move(log)) {
  stats_->SetSocket(socket_);
}

NriPlugin::~NriPlugin() { Stop(); }

void NriPlugin::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void NriPlugin::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);  // wakes the session's poll
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool NriPlugin::Sleep(std::chrono::milliseconds d) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, d, [this] { return stopping_; });
  return !stopping_;
}

Result<int> NriPlugin::Connect() {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_.size() >= sizeof(addr.sun_path)) return Status::Invalid("agent.nri.socket is too long: " + socket_);
  std::memcpy(addr.sun_path, socket_.c_str(), socket_.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno(errno, "NRI: socket");
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    Status s = Status::FromErrno(errno, "NRI: connect to " + socket_);
    ::close(fd);
    return s;
  }
  return fd;
}

void NriPlugin::Loop() {
  std::chrono::milliseconds backoff(500);
  const std::chrono::milliseconds max_backoff(10000);
  std::string last_logged;
  while (true) {
    Result<int> fd = Connect();
    if (fd.ok()) {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (stopping_) {
          ::close(*fd);
          return;
        }
        fd_ = *fd;
      }
      std::unique_ptr<RuntimeMountNsOs> ns_os = RuntimeMountNsOs::ForPeerOf(*fd, os_);
      if (ns_os->joined()) log_("info", "NRI: the runtime has a mount namespace of its own: /dev/shm is sized in it");
      runtime_os_ = std::move(ns_os);
      bool registered = false;
      Status end = RunNriSession(*fd, options_, *this, [&] {
        registered = true;
        backoff = std::chrono::milliseconds(500);
        stats_->Connected();
        log_("info", "NRI: registered with the runtime at " + socket_ + " as " + options_.index + "-" + options_.name);
      });
      {
        std::lock_guard<std::mutex> l(mu_);
        fd_ = -1;
      }
      ::close(*fd);
      if (registered) {
        stats_->Disconnected(end.message());
        log_("warning", end.message() + "; reconnecting");
        last_logged.clear();
      } else {
        stats_->ConnectFailed(end.message());
        if (end.message() != last_logged) log_("warning", end.message());
        last_logged = end.message();
      }
    } else {
      stats_->ConnectFailed(fd.status().message());
      // One line per distinct reason: a runtime that is down is retried quietly.
      if (fd.status().message() != last_logged) log_("warning", fd.status().message() + "; retrying");
      last_logged = fd.status().message();
    }
    if (!Sleep(backoff)) return;
    backoff = std::min(backoff * 2, max_backoff);
  }
}

void NriPlugin::Configured(const api::ConfigureRequest& req) {
  stats_->Configured(req.runtime_name(), req.runtime_version());
  log_("info", "NRI: configured by " + req.runtime_name() + " " + req.runtime_version() + " (NRI " + req.nri_version() +
                   ", request timeout " + std::to_string(req.request_timeout()) + " ms)");
}

Result<api::CreateContainerResponse> NriPlugin::CreateContainer(const api::CreateContainerRequest& req) {
  Config config = config_();
  Result<NriDecision> d = DecideCreateContainer(req.pod(), req.container(), config, runtime_os_ ? *runtime_os_ : *os_);
  const std::string who = req.pod().namespace_() + "/" + req.pod().name() + " container " + req.container().name();
  if (!d.ok()) {
    stats_->Failed();
    log_("error", "NRI: sizing " + who + ": " + d.status().message());
    if (OutcomeOfFailure(d.status(), true, config) == FailureOutcome::kRefuse) {
      return Status::Internal("shmkeeper: " + d.status().message());
    }
    return api::CreateContainerResponse();  // no adjustment: the container starts as the runtime made it
  }
  if (!d->refusal.empty()) {
    stats_->Refused();
    log_("warning", "NRI: refused " + who + ": " + d->refusal);
    return Status::Invalid(d->refusal);
  }
  stats_->Decided(ShmActionName(d->plan.action));
  if (d->plan.action == ShmAction::kResize) {
    log_("info", "NRI: " + who + ": /dev/shm " + std::to_string(d->plan.old_bytes) + " -> " +
                     std::to_string(d->plan.new_bytes) + " bytes (" + d->plan.source + ")");
  }
  api::CreateContainerResponse resp;
  if (runtime_os_) *resp.mutable_adjust() = Inject(req, config, who);
  return resp;
}

api::ContainerAdjustment NriPlugin::Inject(const api::CreateContainerRequest& req, const Config& config,
                                           const std::string& who) {
  NriInjection inj = InjectThroughRuntime(*runtime_os_, req.pod(), req.container(), config);
  stats_->Injected("preload", PreloadOutcome(inj.preload));
  if (!inj.cuda.empty()) stats_->Injected("cuda-ipc", inj.cuda == "cuda-ipc" ? "injected" : "skipped");
  std::string line = "NRI: " + who + ": inject " + inj.preload + (inj.cuda.empty() ? "" : "; cuda " + inj.cuda);
  for (const std::string& n : inj.notes) line += "; " + n;
  log_(PreloadOutcome(inj.preload) == "undecided" ? "warning" : "info", line);
  return std::move(inj.adjust);
}

void NriPlugin::Synchronized(const api::SynchronizeRequest& all) {
  Config config = config_();
  std::vector<NriCatchUp> late = CatchUpPods(all, config, runtime_os_ ? *runtime_os_ : *os_);
  for (const NriCatchUp& c : late) {
    stats_->CaughtUp(c.outcome);
    const std::string line = "NRI: pod " + c.who + " was created while the agent was away: ";
    if (c.outcome == "resized") {
      log_("warning", line + "resized late, " + c.message);
    } else if (c.outcome == "refused") {
      log_("error", line + "not resized (its size is refused; it keeps the runtime's): " + c.message);
    } else {
      log_("error", line + "not resized: " + c.message);
    }
  }
  log_("info", "NRI: synchronized with the runtime: " + std::to_string(all.pods_size()) + " pods, " +
                   std::to_string(all.containers_size()) + " containers, " + std::to_string(late.size()) +
                   " caught up");
}

void NriPlugin::Abandoned(const api::CreateContainerRequest& req) {
  stats_->Abandoned();
  log_("warning", "NRI: the runtime stopped waiting for CreateContainer of " + req.pod().namespace_() + "/" +
                      req.pod().name() + " container " + req.container().name() +
                      " (its plugin request timeout): not decided; caught up at the next connection");
}

}  // namespace shmkeeper::agent

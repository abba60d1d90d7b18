#include "server.h"

#include <google/protobuf/util/time_util.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <httplib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <optional>

#include "base/fileutil.h"
#include "node/decision_tally.h"
#include "node/metrics.h"
#include "service.h"
#include "shmkeeper/v1/agent.grpc.pb.h"

namespace shmkeeper::agent {
namespace {

bool UnixSocketAccepts(const std::string& path);

Status PrepareSocketPath(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    std::string dir = path.substr(0, slash);
    if (::mkdir(dir.c_str(), 0750) != 0 && errno != EEXIST) return Status::FromErrno(errno, "mkdir " + dir);
  }
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return Status::Precondition(path + " exists and is not a socket");
    // A socket that answers is a running agent's (a --read-only one beside it): never steal it.
    if (UnixSocketAccepts(path)) return Status::Precondition(path + " is in use by another agent");
    ::unlink(path.c_str());  // stale socket of a previous agent
  }
  return Status::Ok();
}

Result<std::shared_ptr<grpc::ServerCredentials>> TcpCredentials(const ServerOptions& o) {
  if (o.tcp_insecure) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl;
  SHMK_ASSIGN_OR_RETURN(std::string cert, ReadFile(o.tls_cert_file));
  SHMK_ASSIGN_OR_RETURN(std::string key, ReadFile(o.tls_key_file));
  ssl.pem_key_cert_pairs.push_back({key, cert});
  if (!o.tls_client_ca_file.empty()) {
    SHMK_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadFile(o.tls_client_ca_file));
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

bool SplitHostPort(const std::string& addr, std::string* host, int* port) {
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos) return false;
  *host = addr.substr(0, colon);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  char* end = nullptr;
  long p = std::strtol(addr.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || p < 0 || p > 65535) return false;
  *port = static_cast<int>(p);
  return true;
}

// Whether a listener accepts connections on the unix socket at `path` (gone,
// replaced or not listening: false).
bool UnixSocketAccepts(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) return false;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

bool IsSocket(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

// Whether `a` equals `b`, in a time that depends only on their lengths.
bool SameSecret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// /metrics with "Authorization: Bearer <token>", the token being `file`'s
// content without surrounding whitespace (as Prometheus' bearer_token_file
// reads it). Other paths pass. A refusal fills `res` with 401 (403 when the
// token file cannot be read: fail closed).
bool BearerTokenAccepted(const std::string& file, const httplib::Request& req, httplib::Response& res,
                         HttpGuard* guard) {
  if (req.path != "/metrics") return true;
  Result<std::string> token = ReadFile(file, 4096);
  std::string want = token.ok() ? *token : "";
  while (!want.empty() && std::isspace(static_cast<unsigned char>(want.back()))) want.pop_back();
  while (!want.empty() && std::isspace(static_cast<unsigned char>(want.front()))) want.erase(0, 1);
  std::string got = req.get_header_value("Authorization");
  if (!want.empty() && got.starts_with("Bearer ") && SameSecret(got.substr(7), want)) return true;
  guard->CountUnauthorized();
  res.status = want.empty() ? 403 : 401;
  if (!want.empty()) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(want.empty() ? "the bearer token file cannot be read\n" : "a bearer token is required\n",
                  "text/plain");
  return false;
}

// The verdict on a scan loop whose last scan finished at `last_scan` (none: no
// scan yet) and an event socket `events` ("" = not configured).
void JudgeScanAndEvents(const std::optional<std::chrono::system_clock::time_point>& last_scan,
                        std::chrono::milliseconds interval, const std::string& events,
                        std::chrono::system_clock::time_point now, HealthReport* r) {
  const auto limit = 3 * interval + std::chrono::seconds(30);
  if (!last_scan) {
    r->problems.push_back("no scan has finished");
  } else if (now - *last_scan > limit) {
    auto age = std::chrono::duration_cast<std::chrono::seconds>(now - *last_scan).count();
    r->problems.push_back("scan loop stalled: the last scan finished " + std::to_string(age) + "s ago (interval " +
                          std::to_string(interval.count()) + "ms)");
  }
  if (!events.empty() && !IsSocket(events)) r->problems.push_back("event socket " + events + " is gone");
}

Result<std::string> ProbeOverHttp(const Config& config);

}  // namespace

HealthReport CheckHealth(const Agent& agent, const std::string& unix_socket,
                         std::chrono::system_clock::time_point now) {
  HealthReport r;
  std::shared_ptr<const NodeSnapshot> snap = agent.Snapshot();
  std::optional<std::chrono::system_clock::time_point> last;
  if (snap) last = snap->time;
  JudgeScanAndEvents(last, agent.config().agent.scan_interval, "", now, &r);
  if (!unix_socket.empty() && !UnixSocketAccepts(unix_socket)) {
    r.problems.push_back("agent socket " + unix_socket + " accepts no connection");
  }
  const std::string events = agent.config().agent.event_socket;
  if (!events.empty() && !IsSocket(events)) r.problems.push_back("event socket " + events + " is gone");
  return r;
}

std::string HealthReport::Text() const {
  if (problems.empty()) return "ok\n";
  std::string out;
  for (const std::string& p : problems) out += p + "\n";
  return out;
}

Result<std::string> ProbeHealth(const Config& config) {
  if (config.agent.socket.empty()) return ProbeOverHttp(config);
  const std::string& path = config.agent.socket;
  if (!UnixSocketAccepts(path)) return Status::Precondition("agent socket " + path + " accepts no connection");
  auto stub = v1::ShmKeeper::NewStub(grpc::CreateChannel("unix:" + path, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::GetNodeResponse resp;
  grpc::Status s = stub->GetNode(&ctx, {}, &resp);
  HealthReport r;
  std::optional<std::chrono::system_clock::time_point> last;
  if (s.ok()) {
    last = std::chrono::system_clock::time_point(std::chrono::milliseconds(
        google::protobuf::util::TimeUtil::TimestampToMilliseconds(resp.node().last_scan_time())));
  } else if (s.error_code() != grpc::StatusCode::FAILED_PRECONDITION) {  // FAILED_PRECONDITION: no scan yet
    return Status::Precondition("agent socket " + path + ": GetNode: " + s.error_message());
  }
  JudgeScanAndEvents(last, config.agent.scan_interval, config.agent.event_socket, std::chrono::system_clock::now(), &r);
  if (r.ok()) return r.Text();
  std::string text = r.Text();
  text.pop_back();
  return Status::Precondition("unhealthy: " + text);
}

namespace {

Result<std::string> ProbeOverHttp(const Config& config) {
  const std::string& address = config.agent.metrics_address;
  if (address.empty()) return Status::Invalid("neither agent.socket nor agent.metricsAddress is set");
  std::string host;
  int port = 0;
  if (!SplitHostPort(address, &host, &port) || port == 0) {
    return Status::Invalid("metrics address \"" + address + "\" is not host:port");
  }
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  httplib::Client client(host, port);
  client.set_connection_timeout(std::chrono::seconds(3));
  client.set_read_timeout(std::chrono::seconds(5));
  httplib::Result res = client.Get("/healthz");
  if (!res) return Status::Precondition("GET /healthz on " + address + ": " + httplib::to_string(res.error()));
  if (res->status != 200) {
    std::string why = res->body;
    while (!why.empty() && why.back() == '\n') why.pop_back();
    return Status::Precondition("unhealthy: " + why);
  }
  return res->body;
}

std::string ServiceMetrics(const ShmKeeperService& service) {
  return "# HELP shmkeeper_watch_streams Watch streams subscribed to the agent's events now (at most "
         "agent.maxWatchStreams).\n# TYPE shmkeeper_watch_streams gauge\nshmkeeper_watch_streams " +
         std::to_string(service.watch_subscribed()) +
         "\n# HELP shmkeeper_grpc_calls_denied_total Calls that change the node refused (PERMISSION_DENIED) "
         "because the TCP caller had no client certificate verified against agent.tcp.clientCAFile.\n"
         "# TYPE shmkeeper_grpc_calls_denied_total counter\n"
         "shmkeeper_grpc_calls_denied_total{method=\"ReclaimLeaks\"} " +
         std::to_string(service.reclaim_denied()) + "\n";
}

}  // namespace

ServerOptions ServerOptions::FromConfig(const Config& c) {
  ServerOptions o;
  o.unix_socket = c.agent.socket;
  o.tcp_address = c.agent.tcp.address;
  o.tls_cert_file = c.agent.tcp.cert_file;
  o.tls_key_file = c.agent.tcp.key_file;
  o.tls_client_ca_file = c.agent.tcp.client_ca_file;
  o.tcp_insecure = c.agent.tcp.insecure;
  o.metrics_address = c.agent.metrics_address;
  const auto& m = c.agent.metrics;
  o.http_limits = {m.max_connections, m.max_connections_per_client, m.header_timeout, m.idle_timeout, m.write_timeout};
  o.metrics_cert_file = m.cert_file;
  o.metrics_key_file = m.key_file;
  o.metrics_client_ca_file = m.client_ca_file;
  o.metrics_bearer_token_file = m.bearer_token_file;
  return o;
}

std::string ServerOptions::TcpReadOnlyNote() const {
  if (tcp_address.empty() || tcp_mtls()) return "";
  return "the TCP listener " + tcp_address +
         (tcp_insecure ? " is plaintext (agent.tcp.insecure)" : " has no agent.tcp.clientCAFile") +
         ": it serves read-only calls only; ReclaimLeaks over TCP needs mTLS (the unix socket serves everything)";
}

AgentServer::AgentServer(Agent* agent, ServerOptions options)
    : agent_(agent),
      opts_(std::move(options)),
      service_(std::make_unique<ShmKeeperService>(agent, opts_.tcp_mtls())),
      tally_(std::make_unique<DecisionTally>()) {
  tally_->Poll(agent->config().log.path);  // counts from now on
}

AgentServer::~AgentServer() { Shutdown(); }

Status AgentServer::Start() {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.RegisterService(service_.get());
  if (!opts_.unix_socket.empty()) {
    SHMK_RETURN_IF_ERROR(PrepareSocketPath(opts_.unix_socket));
    builder.AddListeningPort("unix:" + opts_.unix_socket, grpc::InsecureServerCredentials());
  }
  if (!opts_.tcp_address.empty()) {
    SHMK_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> creds, TcpCredentials(opts_));
    builder.AddListeningPort(opts_.tcp_address, creds, &tcp_port_);
  }
  mode_t old = ::umask(0117);  // the unix socket is created 0660
  grpc_ = builder.BuildAndStart();
  ::umask(old);
  if (!grpc_) return Status::Internal("gRPC server did not start (address in use or invalid?)");
  if (!opts_.tcp_address.empty() && tcp_port_ == 0) {
    Shutdown();
    return Status::Internal("cannot listen on " + opts_.tcp_address);
  }
  if (Status s = StartHttp(); !s.ok()) {
    Shutdown();
    return s;
  }
  grpc_->GetHealthCheckService()->SetServingStatus(true);
  return Status::Ok();
}

Status AgentServer::StartHttp() {
  if (opts_.metrics_address.empty()) return Status::Ok();
  std::string host;
  int port = 0;
  if (!SplitHostPort(opts_.metrics_address, &host, &port)) {
    return Status::Invalid("metrics address \"" + opts_.metrics_address + "\" is not host:port");
  }
  if (!opts_.metrics_cert_file.empty()) {
    // Read here for a clear error; the library takes paths.
    for (const std::string& f : {opts_.metrics_cert_file, opts_.metrics_key_file, opts_.metrics_client_ca_file}) {
      if (!f.empty()) SHMK_RETURN_IF_ERROR(ReadFile(f).status());
    }
    http_ = std::make_unique<httplib::SSLServer>(
        opts_.metrics_cert_file.c_str(), opts_.metrics_key_file.c_str(),
        opts_.metrics_client_ca_file.empty() ? nullptr : opts_.metrics_client_ca_file.c_str());
  } else {
    http_ = std::make_unique<httplib::Server>();
  }
  if (!http_->is_valid()) return Status::Invalid("metrics TLS: cannot use the certificate, key or client CA");
  guard_ = std::make_unique<HttpGuard>(opts_.http_limits);
  Agent* agent = agent_;
  HttpGuard* guard = guard_.get();
  const ShmKeeperService* service = service_.get();
  DecisionTally* tally = tally_.get();
  http_->Get("/metrics", [agent, guard, service, tally](const httplib::Request&, httplib::Response& res) {
    std::shared_ptr<const NodeSnapshot> snap = agent->Snapshot();
    tally->Poll(agent->config().log.path);  // the decisions logged since the last scrape
    res.set_content(
        RenderMetrics(snap.get(), *agent) + guard->RenderMetrics() + ServiceMetrics(*service) + tally->RenderMetrics(),
        "text/plain; version=0.0.4");
  });
  std::string unix_socket = opts_.unix_socket;
  http_->Get("/healthz", [agent, unix_socket](const httplib::Request&, httplib::Response& res) {
    HealthReport health = CheckHealth(*agent, unix_socket, std::chrono::system_clock::now());
    res.status = health.ok() ? 200 : 503;
    res.set_content(health.Text(), "text/plain");
  });
  http_->Get("/readyz", [agent](const httplib::Request&, httplib::Response& res) {
    bool ready = agent->Ready();
    res.status = ready ? 200 : 503;
    res.set_content(ready ? "ready\n" : "first scan pending\n", "text/plain");
  });
  metrics_port_ = port == 0 ? http_->bind_to_any_port(host) : (http_->bind_to_port(host, port) ? port : -1);
  if (metrics_port_ <= 0) return Status::Internal("cannot listen on " + opts_.metrics_address);
  HttpGuard::Authorize authorize;
  if (!opts_.metrics_bearer_token_file.empty()) {
    SHMK_RETURN_IF_ERROR(ReadFile(opts_.metrics_bearer_token_file).status());
    authorize = [file = opts_.metrics_bearer_token_file, guard](const httplib::Request& req, httplib::Response& res) {
      return BearerTokenAccepted(file, req, res, guard);
    };
  }
  guard_->Install(http_.get(), metrics_port_, authorize);
  http_thread_ = std::thread([this] { http_->listen_after_bind(); });
  // stop() before the listener entered its loop would be lost (it would then
  // run forever): return only once it is running.
  for (int i = 0; i < 500 && !http_->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!http_->is_running()) return Status::Internal("HTTP listener on " + opts_.metrics_address + " did not start");
  return Status::Ok();
}

void AgentServer::Shutdown() {
  if (http_) {
    http_->stop();
    if (http_thread_.joinable()) http_thread_.join();
    http_.reset();
  }
  guard_.reset();
  if (grpc_) {
    grpc_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    grpc_.reset();
    if (!opts_.unix_socket.empty()) ::unlink(opts_.unix_socket.c_str());
  }
}

}  // namespace shmkeeper::agent

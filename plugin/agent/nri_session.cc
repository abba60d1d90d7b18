#include "nri_session.h"

#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include "nri/ttrpc.pb.h"
#include "nri/wire.h"

namespace shmkeeper::agent {
namespace api = ::nri::pkg::api::v1alpha1;
using shmkeeper::nri::MessageType;
using shmkeeper::nri::TtrpcMessage;

namespace {

// gRPC status codes as ttrpc carries them.
constexpr int kCodeUnknown = 2;
constexpr int kCodeInvalidArgument = 3;
constexpr int kCodeUnimplemented = 12;

constexpr uint32_t kRegisterStream = 1;  // the plugin's first (and only) call: ttrpc clients use odd ids

Status WriteAll(int fd, const std::string& bytes) {
  size_t at = 0;
  while (at < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + at, bytes.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, "NRI: write to the runtime");
    at += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status Send(int fd, uint32_t conn, uint32_t stream, MessageType type, const std::string& payload) {
  TtrpcMessage m;
  m.conn = conn;
  m.stream_id = stream;
  m.type = static_cast<uint8_t>(type);
  m.payload = payload;
  SHMK_ASSIGN_OR_RETURN(std::string bytes, shmkeeper::nri::EncodeMessage(m));
  return WriteAll(fd, bytes);
}

struct Answer {
  int code = 0;  // 0 = OK
  std::string message;
  std::string payload;
  bool end = false;  // Shutdown: the session ends after this answer
};

Answer Error(int code, std::string message) { return Answer{code, std::move(message), "", false}; }

template <typename Req>
bool ParseInto(const std::string& payload, Req* req) {
  return req->ParseFromString(payload);
}

Answer Configure(const std::string& payload, NriHandler& handler) {
  api::ConfigureRequest req;
  if (!ParseInto(payload, &req)) return Error(kCodeInvalidArgument, "shmkeeper: an unreadable ConfigureRequest");
  handler.Configured(req);
  api::ConfigureResponse resp;
  resp.set_events(1 << (api::CREATE_CONTAINER - 1));  // EventMask: bit (event - 1)
  return Answer{0, "", resp.SerializeAsString(), false};
}

// What one connection has seen so far.
struct SessionState {
  bool registered = false;
  bool end = false;
  // The runtime closed its end: what is still buffered is read, nothing is
  // answered and no container is decided.
  bool peer_closed = false;
  api::SynchronizeRequest sync;  // the chunks so far
  bool sync_done = false;        // the last chunk came: hand `sync` over after the answer
};

Answer Synchronize(const std::string& payload, SessionState& state) {
  api::SynchronizeRequest req;
  if (!ParseInto(payload, &req)) return Error(kCodeInvalidArgument, "shmkeeper: an unreadable SynchronizeRequest");
  state.sync.MergeFrom(req);
  state.sync_done = !req.more();
  api::SynchronizeResponse resp;
  resp.set_more(req.more());  // "we take more": the runtime sends the rest; nothing to update
  return Answer{0, "", resp.SerializeAsString(), false};
}

Answer CreateContainer(const std::string& payload, NriHandler& handler) {
  api::CreateContainerRequest req;
  if (!ParseInto(payload, &req)) return Error(kCodeInvalidArgument, "shmkeeper: an unreadable CreateContainerRequest");
  Result<api::CreateContainerResponse> resp = handler.CreateContainer(req);
  if (!resp.ok()) return Error(kCodeUnknown, resp.status().message());
  return Answer{0, "", resp->SerializeAsString(), false};
}

Answer Dispatch(const ttrpc::Request& req, NriHandler& handler, SessionState& state) {
  if (req.service() != kNriPluginService) return Error(kCodeUnimplemented, "service " + req.service() + " not found");
  const std::string& method = req.method();
  if (method == "Configure") return Configure(req.payload(), handler);
  if (method == "Synchronize") return Synchronize(req.payload(), state);
  if (method == "CreateContainer") return CreateContainer(req.payload(), handler);
  // Every other call (events not subscribed to, StateChange, Shutdown) has a
  // response whose fields all default: the empty message.
  return Answer{0, "", "", method == "Shutdown"};
}

// A request that came after the runtime closed its end: nothing is answered;
// a CreateContainer goes to Abandoned, undecided.
void HandleAfterClose(const ttrpc::Request& req, NriHandler& handler) {
  api::CreateContainerRequest create;
  if (req.service() == kNriPluginService && req.method() == "CreateContainer" &&
      create.ParseFromString(req.payload())) {
    handler.Abandoned(create);
  }
}

// Handles one message; updates `state` as the runtime's messages say.
Status Handle(int fd, const TtrpcMessage& m, NriHandler& handler, SessionState& state) {
  if (m.conn == shmkeeper::nri::kRuntimeServiceConn && m.type == static_cast<uint8_t>(MessageType::kResponse)) {
    if (m.stream_id != kRegisterStream || state.registered) return Status::Ok();
    ttrpc::Response resp;
    if (!resp.ParseFromString(m.payload)) return Status::Invalid("NRI: an unreadable RegisterPlugin response");
    if (resp.status().code() != 0) {
      return Status::Precondition("NRI: the runtime refused the registration: " + resp.status().message());
    }
    state.registered = true;
    return Status::Ok();
  }
  if (m.conn != shmkeeper::nri::kPluginServiceConn || m.type != static_cast<uint8_t>(MessageType::kRequest)) {
    return Status::Ok();  // data frames, stray responses: nothing the plugin asked for
  }
  ttrpc::Request req;
  bool parsed = req.ParseFromString(m.payload);
  if (state.peer_closed) {
    if (parsed) HandleAfterClose(req, handler);
    return Status::Ok();
  }
  Answer a =
      parsed ? Dispatch(req, handler, state) : Error(kCodeInvalidArgument, "shmkeeper: an unreadable ttrpc request");
  ttrpc::Response resp;
  resp.mutable_status()->set_code(a.code);
  resp.mutable_status()->set_message(a.message);
  resp.set_payload(a.payload);
  SHMK_RETURN_IF_ERROR(Send(fd, m.conn, m.stream_id, MessageType::kResponse, resp.SerializeAsString()));
  state.end = a.end;
  if (state.sync_done) {  // answered: now the handler may take its time
    state.sync_done = false;
    handler.Synchronized(state.sync);
    state.sync.Clear();
  }
  return Status::Ok();
}

}  // namespace

Status RunNriSession(int fd, const NriSessionOptions& options, NriHandler& handler,
                     const std::function<void()>& on_registered) {
  api::RegisterPluginRequest reg;
  reg.set_plugin_name(options.name);
  reg.set_plugin_idx(options.index);
  ttrpc::Request call;
  call.set_service(kNriRuntimeService);
  call.set_method("RegisterPlugin");
  call.set_payload(reg.SerializeAsString());
  call.set_timeout_nano(std::chrono::nanoseconds(options.registration_timeout).count());
  SHMK_RETURN_IF_ERROR(
      Send(fd, shmkeeper::nri::kRuntimeServiceConn, kRegisterStream, MessageType::kRequest, call.SerializeAsString()));
  const auto deadline = std::chrono::steady_clock::now() + options.registration_timeout;
  shmkeeper::nri::WireReader reader;
  SessionState state;
  std::string buf(64 << 10, '\0');
  while (!state.end) {
    int wait_ms = -1;
    if (!state.registered) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return Status::Precondition("NRI: the runtime did not answer RegisterPlugin in time");
      wait_ms = static_cast<int>(left.count());
    }
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    int r = ::poll(&p, 1, wait_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::FromErrno(errno, "NRI: poll");
    if (r == 0) continue;
    // Seen before the read: every request still buffered came before the close.
    if (p.revents & (POLLRDHUP | POLLHUP)) state.peer_closed = true;
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, "NRI: read from the runtime");
    if (n == 0) return Status::Precondition("NRI: the runtime closed the connection");
    SHMK_RETURN_IF_ERROR(reader.Feed(std::string_view(buf.data(), static_cast<size_t>(n))));
    while (std::optional<TtrpcMessage> m = reader.Next()) {
      bool was_registered = state.registered;
      SHMK_RETURN_IF_ERROR(Handle(fd, *m, handler, state));
      if (state.registered && !was_registered && on_registered) on_registered();
      if (state.end) break;
    }
  }
  return Status::Precondition("NRI: the runtime asked the plugin to shut down");
}

}  // namespace shmkeeper::agent

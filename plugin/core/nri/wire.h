// NRI's byte framing, both layers, with no protobuf and no I/O: the
// multiplexer (containerd/nri pkg/net/multiplex: frames of a 4-byte
// connection id and a 4-byte length, big-endian, then that many bytes) that
// carries two logical connections over the plugin's one unix socket, and the
// ttrpc messages (containerd/ttrpc channel.go: a 10-byte header, uint32
// length, uint32 stream id, uint8 type, uint8 flags, big-endian, then the
// payload, a protobuf ttrpc.Request or ttrpc.Response) in each connection's
// byte stream. A mux frame is a chunk of that stream: one ttrpc message may
// span several frames.
//
// The bytes come from the runtime's socket: a length over the limits below
// is an error (the connection is dropped), never an allocation.
//
// Thread-safety: a WireReader is used by one thread at a time.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace shmkeeper::nri {

// The mux connection ids (pkg/net/multiplex/ttrpc.go): on connection 1 the
// plugin serves nri.pkg.api.v1alpha1.Plugin (the runtime calls Configure,
// Synchronize, CreateContainer, ...); on connection 2 the runtime serves
// nri.pkg.api.v1alpha1.Runtime (the plugin calls RegisterPlugin).
inline constexpr uint32_t kPluginServiceConn = 1;
inline constexpr uint32_t kRuntimeServiceConn = 2;

inline constexpr size_t kMuxHeaderBytes = 8;
inline constexpr size_t kTtrpcHeaderBytes = 10;
// ttrpc's messageLengthMax, and the mux's maxPayloadSize built on it.
inline constexpr uint32_t kTtrpcMaxMessage = 4 << 20;
inline constexpr uint32_t kMuxMaxPayload = kTtrpcHeaderBytes + kTtrpcMaxMessage;
// What this side writes per mux frame: the runtime reads a logical
// connection through a 4096-byte bufio.Reader and refuses (ENOMEM) a frame
// larger than the room it reads into.
inline constexpr size_t kMuxWriteChunk = 4096;

enum class MessageType : uint8_t { kRequest = 1, kResponse = 2, kData = 3 };

struct TtrpcMessage {
  uint32_t conn = 0;  // the mux connection it came on or goes to
  uint32_t stream_id = 0;
  uint8_t type = 0;  // a MessageType, or anything the peer sent
  uint8_t flags = 0;
  std::string payload;
};

// Reassembles messages from the socket's bytes.
class WireReader {
 public:
  // Appends bytes read from the socket. An error (a frame or message over
  // the limits) is final: the connection must be closed.
  Status Feed(std::string_view bytes);
  // The next complete message, oldest first, or nullopt.
  std::optional<TtrpcMessage> Next();

 private:
  Status DrainStream(uint32_t conn);
  std::string trunk_;                        // bytes not yet cut into mux frames
  std::map<uint32_t, std::string> streams_;  // per connection: bytes not yet cut into messages
  std::deque<TtrpcMessage> ready_;
};

// The bytes to write for `m`: its ttrpc header and payload, cut into mux
// frames of at most kMuxWriteChunk bytes on m.conn. kInvalidArgument when the
// payload is over kTtrpcMaxMessage.
Result<std::string> EncodeMessage(const TtrpcMessage& m);

}  // namespace shmkeeper::nri

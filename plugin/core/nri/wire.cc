#include "nri/wire.h"

#include <algorithm>

namespace shmkeeper::nri {
namespace {

uint32_t ReadBe32(std::string_view b) {
  return (static_cast<uint32_t>(static_cast<uint8_t>(b[0])) << 24) |
         (static_cast<uint32_t>(static_cast<uint8_t>(b[1])) << 16) |
         (static_cast<uint32_t>(static_cast<uint8_t>(b[2])) << 8) | static_cast<uint32_t>(static_cast<uint8_t>(b[3]));
}

void AppendBe32(std::string* out, uint32_t v) {
  out->push_back(static_cast<char>(v >> 24));
  out->push_back(static_cast<char>(v >> 16));
  out->push_back(static_cast<char>(v >> 8));
  out->push_back(static_cast<char>(v));
}

}  // namespace

Status WireReader::Feed(std::string_view bytes) {
  trunk_.append(bytes);
  size_t at = 0;
  while (trunk_.size() - at >= kMuxHeaderBytes) {
    std::string_view view(trunk_);
    uint32_t conn = ReadBe32(view.substr(at, 4));
    uint32_t len = ReadBe32(view.substr(at + 4, 4));
    if (len > kMuxMaxPayload) {
      return Status::Invalid("NRI: a mux frame of " + std::to_string(len) + " bytes (the limit is " +
                             std::to_string(kMuxMaxPayload) + ")");
    }
    if (trunk_.size() - at - kMuxHeaderBytes < len) break;
    // Frames for a connection nobody opened are dropped, as the runtime's mux does.
    if (conn == kPluginServiceConn || conn == kRuntimeServiceConn) {
      streams_[conn].append(view.substr(at + kMuxHeaderBytes, len));
      SHMK_RETURN_IF_ERROR(DrainStream(conn));
    }
    at += kMuxHeaderBytes + len;
  }
  trunk_.erase(0, at);
  return Status::Ok();
}

Status WireReader::DrainStream(uint32_t conn) {
  std::string& s = streams_[conn];
  size_t at = 0;
  while (s.size() - at >= kTtrpcHeaderBytes) {
    std::string_view view(s);
    uint32_t len = ReadBe32(view.substr(at, 4));
    if (len > kTtrpcMaxMessage) {
      return Status::Invalid("NRI: a ttrpc message of " + std::to_string(len) + " bytes (the limit is " +
                             std::to_string(kTtrpcMaxMessage) + ")");
    }
    if (s.size() - at - kTtrpcHeaderBytes < len) break;
    TtrpcMessage m;
    m.conn = conn;
    m.stream_id = ReadBe32(view.substr(at + 4, 4));
    m.type = static_cast<uint8_t>(view[at + 8]);
    m.flags = static_cast<uint8_t>(view[at + 9]);
    m.payload = std::string(view.substr(at + kTtrpcHeaderBytes, len));
    ready_.push_back(std::move(m));
    at += kTtrpcHeaderBytes + len;
  }
  s.erase(0, at);
  return Status::Ok();
}

std::optional<TtrpcMessage> WireReader::Next() {
  if (ready_.empty()) return std::nullopt;
  TtrpcMessage m = std::move(ready_.front());
  ready_.pop_front();
  return m;
}

Result<std::string> EncodeMessage(const TtrpcMessage& m) {
  if (m.payload.size() > kTtrpcMaxMessage) {
    return Status::Invalid("NRI: a ttrpc message of " + std::to_string(m.payload.size()) + " bytes is over the limit");
  }
  std::string stream;
  stream.reserve(kTtrpcHeaderBytes + m.payload.size());
  AppendBe32(&stream, static_cast<uint32_t>(m.payload.size()));
  AppendBe32(&stream, m.stream_id);
  stream.push_back(static_cast<char>(m.type));
  stream.push_back(static_cast<char>(m.flags));
  stream += m.payload;
  std::string out;
  out.reserve(stream.size() + (stream.size() / kMuxWriteChunk + 1) * kMuxHeaderBytes);
  for (size_t at = 0; at < stream.size(); at += kMuxWriteChunk) {
    size_t n = std::min(kMuxWriteChunk, stream.size() - at);
    AppendBe32(&out, m.conn);
    AppendBe32(&out, static_cast<uint32_t>(n));
    out.append(stream, at, n);
  }
  return out;
}

}  // namespace shmkeeper::nri

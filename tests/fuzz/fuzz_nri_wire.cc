// libFuzzer target: any bytes a runtime could send on the NRI socket, fed to
// the framing (nri/wire.h) in two pieces split where the first byte says;
// never crashes, and every message it reassembles is within ttrpc's limit,
// on one of the two mux connections, and survives an encode/decode round trip.
#include <cstdlib>
#include <string>

#include "nri/wire.h"

using shmkeeper::nri::EncodeMessage;
using shmkeeper::nri::TtrpcMessage;
using shmkeeper::nri::WireReader;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  size_t split = std::min<size_t>(data[0], bytes.size());
  WireReader reader;
  if (!reader.Feed(std::string_view(bytes).substr(0, split)).ok()) return 0;
  if (!reader.Feed(std::string_view(bytes).substr(split)).ok()) return 0;
  while (std::optional<TtrpcMessage> m = reader.Next()) {
    if (m->payload.size() > shmkeeper::nri::kTtrpcMaxMessage) std::abort();
    if (m->conn != shmkeeper::nri::kPluginServiceConn && m->conn != shmkeeper::nri::kRuntimeServiceConn) std::abort();
    shmkeeper::Result<std::string> again = EncodeMessage(*m);
    if (!again.ok()) std::abort();
    WireReader back;
    if (!back.Feed(*again).ok()) std::abort();
    std::optional<TtrpcMessage> r = back.Next();
    if (!r || r->payload != m->payload || r->stream_id != m->stream_id || r->type != m->type || r->flags != m->flags ||
        back.Next()) {
      std::abort();
    }
  }
  return 0;
}

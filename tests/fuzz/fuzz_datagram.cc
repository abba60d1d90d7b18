// libFuzzer target: creator records arrive as datagrams from any process in
// any container (untrusted). Parsing never crashes, and a record is accepted
// only for a regular file under the sender's /dev/shm.
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "node/creator_book.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string payload(reinterpret_cast<const char*>(data), size);
  shmkeeper::Json doc = shmkeeper::Json::parse(payload, nullptr, /*allow_exceptions=*/false);
  shmkeeper::ClaimRejection why = shmkeeper::ClaimRejection::kMalformed;
  auto rec = shmkeeper::VerifyCreatorClaim(doc, {::getpid(), ::getuid()}, &why, "/proc");
  if (!rec.ok()) {
    if (rec.status().message().empty() || std::string(shmkeeper::ClaimRejectionName(why)) == "?") std::abort();
    return 0;
  }
  if (rec->record.host_pid != ::getpid()) std::abort();
  return 0;
}

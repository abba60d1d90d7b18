// Datagrams to the agent's event socket (agent.eventSocket): the hook's
// "container stopped" and the sharing runtime's creator records. Sending never
// blocks and never fails the sender: with no agent listening, the datagram is
// dropped. The agent trusts only the kernel's SCM_CREDENTIALS, never the
// payload's claims about who sent it.
#pragma once

#include <string>

#include "base/status.h"

namespace shmkeeper {

// Sends `payload` (one JSON object, at most 4 KiB) as one datagram to the unix
// socket at `path`. Non-blocking; kUnavailable-style errors come back as a
// Status the caller may ignore.
Status SendEvent(const std::string& path, const std::string& payload);

}  // namespace shmkeeper

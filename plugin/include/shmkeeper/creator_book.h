// Who created each shm file, from the sharing runtime's datagrams.
//
// The sender's identity is what the kernel attached (SCM_CREDENTIALS: a pid
// in the agent's pid namespace), never the payload; the file is found again
// from the agent's own view of the sender's /dev/shm (its /proc/<pid>/root,
// resolved without leaving that root), so a container can only speak about
// files in its own /dev/shm, and only as itself.
//
// Thread-safety: CreatorBook's methods may be called from any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "shmkeeper/json.h"
#include "shmkeeper/proc_table.h"
#include "shmkeeper/status.h"

namespace shmkeeper {

struct CreatorRecord {
  pid_t host_pid = 0;        // as the kernel told the agent
  uint64_t start_ticks = 0;  // its start time: a reused pid is another process
  pid_t ns_pid = 0;          // the same process in its own pid namespace
  std::string command;

  // Whether that very process still runs.
  bool Alive(const std::string& proc = "/proc") const;
};

class CreatorBook {
 public:
  void Record(const FileKey& key, CreatorRecord rec);
  std::optional<CreatorRecord> Find(const FileKey& key) const;
  // Drops records of files no longer present.
  void Retain(const std::set<FileKey>& live);
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::map<FileKey, CreatorRecord> records_;
};

// One parsed datagram from a sender the kernel identified as `sender_pid`:
// {"type":"create","path":"/dev/shm/<name>"}. Returns the file's key and the
// record; kInvalidArgument for another shape or a path outside /dev/shm.
Result<std::pair<FileKey, CreatorRecord>> CreatorFromDatagram(const Json& doc, pid_t sender_pid,
                                                              const std::string& proc = "/proc");

}  // namespace shmkeeper

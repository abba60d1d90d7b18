// Who created each shm file, from the sharing runtime's datagrams.
//
// Trust model: anyone who can reach the event socket can send anything, so a
// datagram is a claim, never evidence by itself. The kernel's credentials
// (SCM_CREDENTIALS) prove only who sent it: a pid and uid in the agent's
// namespaces. The file is found again from the agent's own view of the
// sender's /dev/shm (its /proc/<pid>/root, resolved without leaving that
// root), so a sender can only speak about files in its own /dev/shm. The
// claim becomes a record only when, at receipt, the sender itself has that
// inode open or mapped (any of its threads) and could remove it anyway: its
// uid (as the kernel translated it into the agent's user namespace) owns the
// file or its directory, or it has CAP_FOWNER in the agent's (initial) user
// namespace, or it has CAP_FOWNER in a user namespace into which the file's
// owner and group are both mapped (exactly when the kernel would let that
// capability act on the file). Root of a user namespace the sender made for
// itself proves nothing about a file whose owner is not mapped into it
// (docs/reclaim-safety.md). A record never replaces the record of a creator
// that still runs. Claims that fail are counted by reason and never acted on.
//
// Thread-safety: CreatorBook's methods may be called from any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "base/clock.h"
#include "base/json.h"
#include "base/mutex.h"
#include "base/status.h"
#include "scan/proc_table.h"

namespace shmkeeper {

struct CreatorRecord {
  pid_t host_pid = 0;        // as the kernel told the agent
  uint64_t start_ticks = 0;  // its start time: a reused pid is another process
  pid_t ns_pid = 0;          // the same process in its own pid namespace
  std::string command;
  // The superblock of the file it created (scan/fs_identity.h): device and
  // inode numbers are reused by later tmpfs, this never is.
  uint64_t fsid = 0;

  // Whether that very process still runs.
  bool Alive(const std::string& proc = "/proc") const;
};

class CreatorBook {
 public:
  // Records `rec` unless the file already has a record whose creator is alive
  // (then kFailedPrecondition).
  Status Record(const FileKey& key, CreatorRecord rec, const std::string& proc = "/proc");
  // The record of `key` on the superblock `fsid` (none for a record of an
  // earlier filesystem that had the same device and inode numbers).
  std::optional<CreatorRecord> Find(const FileKey& key, uint64_t fsid) const;
  // Drops records of files no longer present.
  void Retain(const std::set<FileKey>& live);
  size_t size() const;

 private:
  mutable Mutex mu_;
  std::map<FileKey, CreatorRecord> records_ SHMK_GUARDED_BY(mu_);
};

// Why a creator claim was refused: the label of
// shmkeeper_event_datagrams_rejected_total.
enum class ClaimRejection {
  kMalformed,       // not {"type":"create","path":"/dev/shm/<name>"[,"fd":<n>]}
  kNoFile,          // no such regular file in the sender's /dev/shm, or the sender is gone
  kNotHolder,       // the sender does not have the file open or mapped
  kNotOwner,        // the sender neither owns the file or its directory nor has CAP_FOWNER
  kUsernsUnmapped,  // CAP_FOWNER only in a user namespace that does not map the file's owner or group
  kLiveCreator,     // the file already has a record of a creator that runs
};
inline constexpr ClaimRejection kAllClaimRejections[] = {ClaimRejection::kMalformed,      ClaimRejection::kNoFile,
                                                         ClaimRejection::kNotHolder,      ClaimRejection::kNotOwner,
                                                         ClaimRejection::kUsernsUnmapped, ClaimRejection::kLiveCreator};
const char* ClaimRejectionName(ClaimRejection r);

// The kernel's word on a datagram's sender (SCM_CREDENTIALS, translated into
// the agent's namespaces).
struct SenderCreds {
  pid_t pid = 0;
  uid_t uid = 0;
};

struct VerifiedClaim {
  FileKey key;
  CreatorRecord record;
};

// Checks one parsed creator claim {"type":"create","path":"/dev/shm/<name>"}
// (see the trust model above). On failure, `*why` says which check failed.
//
// A claim may name the descriptor at which the sender holds the file
// ("fd": <n>, sent by the preload since #23; older preloads name none and are
// accepted as before). The number is a hint, never evidence: the sender holds
// the file when /proc/<pid>/fd/<n> is that inode now (one stat instead of a
// walk of every descriptor and mapping of the sender); when it is not (never
// opened, another file, closed and reused, or the file is only mapped now),
// the full check of the sender's descriptors and mappings decides, exactly as
// for a claim that names none. A named "fd" that is not a descriptor number
// (negative, not an integer, above INT_MAX) is malformed. A sender's pid
// namespace and command, read from /proc, are reused for a second of `clock`
// (not owned) by the same thread.
Result<VerifiedClaim> VerifyCreatorClaim(const Json& doc, const SenderCreds& sender, ClaimRejection* why,
                                         const std::string& proc = "/proc", Clock* clock = RealClock());

}  // namespace shmkeeper

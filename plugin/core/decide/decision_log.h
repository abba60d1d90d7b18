// Structured logs: one JSON line per container decision in log.path, and
// runc-compatible lines in the engine's --log file (containerd's shim reads
// the last "error" entry there and shows it to the user).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "decide/config.h"
#include "decide/plan.h"
#include "decide/spec.h"

namespace shmkeeper {

// RFC 3339 UTC timestamp with nanoseconds, as runc writes.
std::string NowRfc3339();

// A decision line. Every line has the same keys, success or not (scripts
// never meet a missing key): time, level, msg ("shm decision"), container,
// by ("runtime" or "hook"), action (resize, keep, skip; passthrough, refuse,
// warning on failure), source, requested, old_bytes, new_bytes,
// memory_limit {bytes, source}, reason, preload, cuda, notes, policy (what
// was wrong with the policy file, "" when it was used) and error ("" on
// success). Values not known are "" or 0.
Json DecisionRecord(const std::string& container_id, const ShmPlan& plan, const char* by = "runtime");

// The line for a container that was not sized as planned: `action` is
// "passthrough" (the spec went to the real runtime untouched), "refuse" (the
// container was not created) or "warning" (sized, with a problem).
Json DecisionFailureRecord(const std::string& container_id, const char* level, const char* by, const char* action,
                           const Status& error, const std::string& policy = "");

// Size-capped rotation of a log many processes append to at once.
struct LogRotation {
  int64_t max_bytes = 0;  // rotate once the file has this many bytes; 0 = never
  int max_files = 1;      // keep <path>.1 .. <path>.max_files
};

// Appends `record` as one line to `path` (created 0640, parent 0755). Writes
// are single write(2) calls with O_APPEND, so concurrent writers interleave by
// line. A record below `min_level` is dropped. With rotation.max_bytes > 0,
// one fstat(2) follows the write; when the file has reached the cap, this
// writer renames <path>.i to <path>.i+1 and <path> to <path>.1 under an
// exclusive flock(2) on the file, so that among many writers exactly one
// rotates and no line is lost or split (a writer still holding the old file
// finishes its line in <path>.1). Thread-safe; safe across processes.
Status AppendJsonLine(const std::string& path, Json record, LogLevel level, LogLevel min_level,
                      const LogRotation& rotation = {});

// AppendJsonLine to the policy's decision log (log.path, log.level,
// log.maxSize, log.maxFiles).
Status AppendDecisionLine(const Config& config, Json record, LogLevel level);

// One line in the engine's log format: "json" gives runc's JSON, anything else
// logrus' text form.
std::string RuntimeLogLine(const std::string& format, const char* level, const std::string& msg);

// Appends RuntimeLogLine to `path`; ignores an empty path.
Status AppendRuntimeLog(const std::string& path, const std::string& format, const char* level, const std::string& msg);

// The sizing record, `<bundle>/shmkeeper-shm.json`: written by whoever sized a
// container's /dev/shm (the runtime wrapper, the OCI hook, or the agent's
// reconciler in agent-only mode) so the agent can report per pod where its
// size came from. The bundle belongs to the engine and goes away with the
// container. Reading treats the file as untrusted (size-capped, typed).
inline constexpr const char* kSizingRecordFile = "shmkeeper-shm.json";

struct SizingRecord {
  std::string by;         // "runtime", "hook", "reconcile", "nri" or "nri-late" (nri_decide.h)
  std::string source;     // the plan's source: annotation:<key>, env:..., engine, policy
  std::string requested;  // as written ("2Gi", "auto")
  int64_t bytes = 0;      // the size applied, in whole pages
  MemoryLimit limit;      // the memory limit "auto" used (bytes 0 = none)
};

SizingRecord SizingRecordOf(const ShmPlan& plan, const char* by);
Status WriteSizingRecord(const std::string& bundle, const SizingRecord& record);
std::optional<SizingRecord> ReadSizingRecord(const std::string& bundle);

}  // namespace shmkeeper

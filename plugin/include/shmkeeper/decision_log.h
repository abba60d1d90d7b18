// Structured logs: one JSON line per container decision in log.path, and
// runc-compatible lines in the engine's --log file (containerd's shim reads
// the last "error" entry there and shows it to the user).
#pragma once

#include <string>

#include "shmkeeper/config.h"
#include "shmkeeper/shm_plan.h"
#include "shmkeeper/spec.h"
#include "shmkeeper/status.h"

namespace shmkeeper {

// RFC 3339 UTC timestamp with nanoseconds, as runc writes.
std::string NowRfc3339();

// {"time","level","msg":"shm decision","container","action","source",...}.
Json DecisionRecord(const std::string& container_id, const ShmPlan& plan);

// Appends `record` as one line to `path` (created 0640, parent 0755). Writes
// are single write(2) calls with O_APPEND, so concurrent writers interleave by
// line. A record below `min_level` is dropped.
Status AppendJsonLine(const std::string& path, Json record, LogLevel level, LogLevel min_level);

// One line in the engine's log format: "json" gives runc's JSON, anything else
// logrus' text form.
std::string RuntimeLogLine(const std::string& format, const char* level, const std::string& msg);

// Appends RuntimeLogLine to `path`; ignores an empty path.
Status AppendRuntimeLog(const std::string& path, const std::string& format, const char* level, const std::string& msg);

}  // namespace shmkeeper

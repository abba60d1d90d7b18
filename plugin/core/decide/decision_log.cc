#include "decide/decision_log.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>
#include <string>
#include <utility>

#include "base/fileutil.h"

namespace shmkeeper {
namespace {

Status WriteLine(int fd, const std::string& path, const std::string& line) {
  ssize_t n;
  do {
    n = ::write(fd, line.data(), line.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Status::FromErrno(errno, "write log " + path);
  return Status::Ok();
}

// Rotation by whoever notices, safe with many writers: the rotator holds an
// exclusive flock on the inode it rotates and re-checks, under the lock, that
// `path` still names that inode. A writer that opened the same inode waits on
// the lock, then sees `path` moved on and leaves it; a writer that still holds
// the old inode appends its line to <path>.1 (whole, never lost). New files
// appear only after the last rename, so two rotations never shift at once.
Status RotateIfStill(int fd, const std::string& path, const struct stat& mine, int max_files) {
  int r;
  do {
    r = ::flock(fd, LOCK_EX);
  } while (r < 0 && errno == EINTR);
  if (r < 0) return Status::FromErrno(errno, "lock log " + path);
  struct stat now;
  if (::stat(path.c_str(), &now) != 0 || now.st_ino != mine.st_ino || now.st_dev != mine.st_dev) {
    return Status::Ok();  // another writer rotated it already
  }
  for (int i = max_files - 1; i >= 1; --i) {
    std::string from = path + "." + std::to_string(i);
    if (::rename(from.c_str(), (path + "." + std::to_string(i + 1)).c_str()) != 0 && errno != ENOENT) {
      return Status::FromErrno(errno, "rotate log " + from);
    }
  }
  if (::rename(path.c_str(), (path + ".1").c_str()) != 0) return Status::FromErrno(errno, "rotate log " + path);
  return Status::Ok();  // the lock goes with the fd
}

Status AppendLine(const std::string& path, std::string line, const LogRotation& rotation = {}) {
  line.push_back('\n');
  size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) ::mkdir(path.substr(0, slash).c_str(), 0755);
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640));
  if (!fd.valid()) return Status::FromErrno(errno, "open log " + path);
  SHMK_RETURN_IF_ERROR(WriteLine(fd.get(), path, line));
  if (rotation.max_bytes <= 0) return Status::Ok();
  struct stat st;  // the one extra system call on the create path
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, "stat log " + path);
  if (st.st_size < rotation.max_bytes) return Status::Ok();
  return RotateIfStill(fd.get(), path, st, rotation.max_files < 1 ? 1 : rotation.max_files);
}

}  // namespace

std::string NowRfc3339() {
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  ::gmtime_r(&ts.tv_sec, &tm);
  // snprintf rather than strftime: strftime loads the time zone database.
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%09ldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec);
  return buf;
}

namespace {

// Every key of a decision line, with its empty value.
Json BaseRecord(const std::string& container_id, const char* level, const char* by) {
  return {{"time", NowRfc3339()},
          {"level", level},
          {"msg", "shm decision"},
          {"container", container_id},
          {"by", by},
          {"action", ""},
          {"source", ""},
          {"requested", ""},
          {"old_bytes", 0},
          {"new_bytes", 0},
          {"memory_limit", {{"bytes", 0}, {"source", ""}}},
          {"reason", ""},
          {"preload", ""},
          {"cuda", ""},
          {"notes", Json::array()},
          {"policy", ""},
          {"error", ""}};
}

}  // namespace

Json DecisionRecord(const std::string& container_id, const ShmPlan& plan, const char* by) {
  Json r = BaseRecord(container_id, "info", by);
  r["action"] = ShmActionName(plan.action);
  r["old_bytes"] = plan.old_bytes;
  r["new_bytes"] = plan.action == ShmAction::kSkip ? plan.old_bytes : plan.new_bytes;
  if (plan.action != ShmAction::kSkip) {
    r["source"] = plan.source;
    r["requested"] = plan.requested;
    if (plan.limit.bytes > 0) r["memory_limit"] = {{"bytes", plan.limit.bytes}, {"source", plan.limit.source}};
  }
  r["reason"] = plan.reason;
  return r;
}

Json DecisionFailureRecord(const std::string& container_id, const char* level, const char* by, const char* action,
                           const Status& error, const std::string& policy) {
  Json r = BaseRecord(container_id, level, by);
  r["action"] = action;
  r["error"] = error.message();
  r["policy"] = policy;
  return r;
}

Status AppendJsonLine(const std::string& path, Json record, LogLevel level, LogLevel min_level,
                      const LogRotation& rotation) {
  if (path.empty() || level < min_level) return Status::Ok();
  if (!record.contains("time")) record["time"] = NowRfc3339();
  if (!record.contains("level")) record["level"] = LogLevelName(level);
  return AppendLine(path, DumpJson(record), rotation);
}

Status AppendDecisionLine(const Config& config, Json record, LogLevel level) {
  return AppendJsonLine(config.log.path, std::move(record), level, config.log.level,
                        LogRotation{config.log.max_bytes, config.log.max_files});
}

std::string RuntimeLogLine(const std::string& format, const char* level, const std::string& msg) {
  if (format == "json") {
    Json j = {{"level", level}, {"msg", msg}, {"time", NowRfc3339()}};
    return DumpJson(j);
  }
  // logrus text: msg quoted with JSON string escaping.
  return "time=\"" + NowRfc3339() + "\" level=" + level + " msg=" + DumpJson(Json(msg));
}

Status AppendRuntimeLog(const std::string& path, const std::string& format, const char* level, const std::string& msg) {
  if (path.empty()) return Status::Ok();
  return AppendLine(path, RuntimeLogLine(format, level, msg));
}

SizingRecord SizingRecordOf(const ShmPlan& plan, const char* by) {
  return SizingRecord{by, plan.source, plan.requested, plan.new_bytes, plan.limit};
}

Status WriteSizingRecord(const std::string& bundle, const SizingRecord& r) {
  Json doc = {{"by", r.by}, {"source", r.source}, {"requested", r.requested}, {"bytes", r.bytes}};
  if (r.limit.bytes > 0) doc["memory_limit"] = {{"bytes", r.limit.bytes}, {"source", r.limit.source}};
  return WriteFileAtomic(bundle + "/" + kSizingRecordFile, DumpJson(doc) + "\n", 0644, /*sync_dir=*/false);
}

std::optional<SizingRecord> ReadSizingRecord(const std::string& bundle) {
  Result<std::string> text = ReadFile(bundle + "/" + kSizingRecordFile, 64 << 10);
  if (!text.ok()) return std::nullopt;
  Json doc = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return std::nullopt;
  SizingRecord r;
  r.by = StringField(doc, "by");
  r.source = StringField(doc, "source");
  r.requested = StringField(doc, "requested");
  r.bytes = IntegerField<int64_t>(doc, "bytes", 0);
  if (doc.contains("memory_limit")) {
    r.limit.bytes = IntegerField<int64_t>(doc["memory_limit"], "bytes", 0);
    r.limit.source = StringField(doc["memory_limit"], "source");
  }
  if (r.by.empty()) return std::nullopt;
  return r;
}

}  // namespace shmkeeper

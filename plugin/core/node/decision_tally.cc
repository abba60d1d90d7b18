#include "node/decision_tally.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>

#include "base/fileutil.h"
#include "base/json.h"

namespace shmkeeper {
namespace {

// Label values are only ever these (the log is parsed, its strings never
// reach the exposition text).
constexpr std::array<std::string_view, 2> kBy = {"runtime", "hook"};
constexpr std::array<std::string_view, 6> kActions = {"resize", "keep", "skip", "refuse", "passthrough", "warning"};

template <size_t N>
bool OneOf(const std::array<std::string_view, N>& names, const std::string& v) {
  return std::find(names.begin(), names.end(), v) != names.end();
}

UniqueFd OpenLog(const std::string& path, struct stat* st) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (fd.get() < 0 || ::fstat(fd.get(), st) != 0 || !S_ISREG(st->st_mode)) return UniqueFd();
  return fd;
}

}  // namespace

void DecisionTally::Poll(const std::string& path) {
  MutexLock lock(&mu_);
  if (path != path_) {
    path_ = path;
    started_ = false;
    partial_.clear();
  }
  if (path.empty()) return;
  struct stat st {};
  UniqueFd fd = OpenLog(path, &st);
  readable_ = fd.get() >= 0;
  if (!started_) {  // decisions from before the agent (or this path) are not counted
    started_ = true;
    dev_ = readable_ ? st.st_dev : 0;  // a log that does not exist yet is read from its start once it does
    ino_ = readable_ ? st.st_ino : 0;
    offset_ = readable_ ? st.st_size : 0;
    return;
  }
  int64_t budget = kMaxReadPerPoll;
  if (!readable_ || st.st_dev != dev_ || st.st_ino != ino_) {
    // Rotated (the rotating writer renames the file; the next one creates
    // it): the old file is <path>.1 now; read what it got since the last poll.
    struct stat old {};
    UniqueFd prev = OpenLog(path + ".1", &old);
    if (prev.get() >= 0 && old.st_dev == dev_ && old.st_ino == ino_) {
      ReadFrom(prev.get(), &budget);
      readable_ = true;
    }
    if (fd.get() < 0) return;  // the next writer creates it: read from its start then
    partial_.clear();
    dev_ = st.st_dev;
    ino_ = st.st_ino;
    offset_ = 0;
  } else if (st.st_size < offset_) {  // truncated in place
    partial_.clear();
    offset_ = 0;
  }
  ReadFrom(fd.get(), &budget);
}

void DecisionTally::ReadFrom(int fd, int64_t* budget) {
  char buf[64 << 10];
  while (*budget > 0) {
    ssize_t n = ::pread(fd, buf, std::min<int64_t>(sizeof buf, *budget), offset_);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    offset_ += n;
    *budget -= n;
    std::string_view chunk(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = chunk.find('\n')) != std::string_view::npos; chunk.remove_prefix(nl + 1)) {
      partial_.append(chunk.substr(0, nl));
      CountLine(partial_);
      partial_.clear();
    }
    partial_.append(chunk);
    if (partial_.size() > kMaxLineBytes) {  // no decision line is this long: skip to the next line
      ++unparsed_;
      partial_.clear();
    }
  }
}

void DecisionTally::CountLine(std::string_view line) {
  if (line.empty() || line.size() > kMaxLineBytes) return;
  Json rec = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (rec.is_discarded() || StringField(rec, "msg") != "shm decision") {
    ++unparsed_;
    return;
  }
  std::string by = StringField(rec, "by"), action = StringField(rec, "action");
  if (!OneOf(kBy, by) || !OneOf(kActions, action)) {
    ++unparsed_;
    return;
  }
  ++decisions_[{by, action}];
  if (StringField(rec, "preload").starts_with("skip")) ++preload_skipped_[by];
}

std::string DecisionTally::RenderMetrics() const {
  MutexLock lock(&mu_);
  std::string out =
      "# HELP shmkeeper_container_decisions_total Decisions of the runtime wrapper and the OCI hook read from the "
      "decision log (log.path) since the agent started: action resize, keep or skip (applied), refuse (the "
      "container was not created), passthrough (an internal error let the spec through untouched), warning.\n"
      "# TYPE shmkeeper_container_decisions_total counter\n";
  for (std::string_view by : kBy) {
    for (std::string_view action : kActions) {  // every series from the start: increase() sees the first one
      auto it = decisions_.find({std::string(by), std::string(action)});
      out += "shmkeeper_container_decisions_total{by=\"" + std::string(by) + "\",action=\"" + std::string(action) +
             "\"} " + std::to_string(it == decisions_.end() ? 0 : it->second) + "\n";
    }
  }
  auto skipped = preload_skipped_.find("runtime");
  out +=
      "# HELP shmkeeper_preload_skipped_total Containers the runtime wrapper gave no preload library (the decision "
      "log's preload: skip: <why>).\n# TYPE shmkeeper_preload_skipped_total counter\n"
      "shmkeeper_preload_skipped_total " +
      std::to_string(skipped == preload_skipped_.end() ? 0 : skipped->second) +
      "\n# HELP shmkeeper_decision_log_readable Whether the agent can read the decision log (log.path) it counts "
      "decisions from (0: not configured, missing or unreadable).\n# TYPE shmkeeper_decision_log_readable gauge\n"
      "shmkeeper_decision_log_readable " +
      std::string(readable_ ? "1" : "0") +
      "\n# HELP shmkeeper_decision_log_lines_unparsed_total Lines of the decision log that are no decision.\n"
      "# TYPE shmkeeper_decision_log_lines_unparsed_total counter\nshmkeeper_decision_log_lines_unparsed_total " +
      std::to_string(unparsed_) + "\n";
  return out;
}

std::map<std::pair<std::string, std::string>, int64_t> DecisionTally::decisions() const {
  MutexLock lock(&mu_);
  return decisions_;
}

std::map<std::string, int64_t> DecisionTally::preload_skipped() const {
  MutexLock lock(&mu_);
  return preload_skipped_;
}

}  // namespace shmkeeper

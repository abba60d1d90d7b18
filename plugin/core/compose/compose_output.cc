// Output of a compose check: the finding codes' strings, JSON and text.
#include <sstream>

#include "base/term_escape.h"
#include "compose/compose.h"

namespace shmkeeper {
namespace {

constexpr const char* kSeverity[] = {"info", "warning", "error"};

const char* SeverityName(Severity s) { return kSeverity[static_cast<int>(s)]; }

}  // namespace

const char* FindingCodeName(FindingCode code) {
  switch (code) {
    case FindingCode::kMisspelledKey:
      return "misspelled-key";
    case FindingCode::kInvalidSize:
      return "invalid-size";
    case FindingCode::kMisplacedShmSize:
      return "misplaced-shm-size";
    case FindingCode::kSizeTooSmall:
      return "size-too-small";
    case FindingCode::kHostShmBind:
      return "host-shm-bind";
    case FindingCode::kIpcHostForShm:
      return "ipc-host-for-shm";
    case FindingCode::kMissingShmSize:
      return "missing-shm-size";
    case FindingCode::kBuildShmSize:
      return "build-shm-size";
  }
  return "unknown";
}

std::string SourcePos::ToString() const {
  if (line == 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

Json ComposeReportToJson(const ComposeReport& r) {
  Json findings = Json::array();
  for (const ComposeFinding& f : r.findings) {
    findings.push_back({{"code", FindingCodeName(f.code)},
                        {"severity", SeverityName(f.severity)},
                        {"service", f.service},
                        {"file", f.pos.file},
                        {"line", f.pos.line},
                        {"column", f.pos.column},
                        {"message", f.message},
                        {"suggestion", f.suggestion},
                        {"because", f.because}});
  }
  Json sugg = Json::object();
  for (const auto& [svc, v] : r.suggestions) sugg[svc] = {{"shmSize", v.first}, {"reason", v.second}};
  return {{"schemaVersion", kJsonSchemaVersion},
          {"files", r.files},
          {"project", r.project},
          {"services", r.services},
          {"findings", findings},
          {"suggestions", sugg}};
}

std::string ComposeReportToText(const ComposeReport& r) {
  std::ostringstream out;
  for (const ComposeFinding& x : r.findings) {
    // Service names and values come from compose files (possibly downloaded): escaped for the terminal.
    out << TermEscape(x.pos.ToString()) << ": " << SeverityName(x.severity) << ": "
        << TermEscape((x.service.empty() ? "" : "service '" + x.service + "': ") + x.message);
    if (!x.because.empty()) out << " (because: " << TermEscape(x.because) << ")";
    if (!x.suggestion.empty()) out << " (fix: " << TermEscape(x.suggestion) << ")";
    out << " [" << FindingCodeName(x.code) << "]\n";
  }
  if (r.findings.empty() && r.services.empty()) {
    out << "no service found in " << r.files.size() << " file(s): nothing was checked\n";
  } else if (r.findings.empty()) {
    out << "ok: no /dev/shm problems in " << r.files.size() << " file(s)\n";
  }
  return out.str();
}

}  // namespace shmkeeper

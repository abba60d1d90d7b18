// The public entry points of compose.h: the check and the fix, errors made one line.
#include "compose/compose.h"

#include "base/fileutil.h"
#include "compose/compose_fix.h"
#include "compose/compose_rules.h"

namespace shmkeeper {
namespace {

// Errors quote user values, which may hold newlines or control bytes: escape
// them so every error stays one line.
Status OneLine(const Status& s) {
  std::string out = EscapeControl(s.message());
  return s.IsUserError() ? Status::Invalid(out) : Status::Internal(out);
}

// Reads only `name`, whose text is `text`, as ReadComposeFileFromDisk would.
ComposeFileReader InMemoryReader(const std::string& name, const std::string& text) {
  return [&name, &text](const std::string& path, size_t max_bytes) -> Result<std::string> {
    if (path != name) return Status::NotFound(path + ": not found");
    if (text.size() > max_bytes) return Status::Invalid(path + ": larger than 4 MiB");
    return text;
  };
}

}  // namespace

Result<ComposeReport> CheckCompose(const ComposeCheckOptions& options) {
  Result<compose::Checked> c = compose::ReadAndCheck(options);
  if (!c.ok()) return OneLine(c.status());
  return c->report;
}

namespace {

Status CheckSizeFlag(const std::string& size) {
  if (size.empty()) return Status::Ok();
  if (Result<int64_t> b = ParseComposeSize(size); !b.ok() || *b < (1 << 20)) {
    return Status::Invalid("--size \"" + size + "\" is not a size docker-compose accepts (like 2gb, 512m)");
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<ComposeFix>> PlanComposeFixes(const ComposeCheckOptions& options, const std::string& size) {
  SHMK_RETURN_IF_ERROR(CheckSizeFlag(size));
  Result<compose::Checked> checked = compose::ReadAndCheck(options);
  if (!checked.ok()) return OneLine(checked.status());
  return compose::PlanFixes(*checked, size);
}

Result<ComposeFix> PlanComposeFix(const ComposeCheckOptions& options, const std::string& file,
                                  const std::string& size) {
  SHMK_RETURN_IF_ERROR(CheckSizeFlag(size));
  Result<compose::Checked> checked = compose::ReadAndCheck(options);
  if (!checked.ok()) return OneLine(checked.status());
  return compose::PlanFix(*checked, file, size);
}

Result<ComposeFix> FixComposeText(const std::string& name, const std::string& text, const std::string& size) {
  ComposeCheckOptions o;
  o.files = {name};
  o.read_file = InMemoryReader(name, text);
  o.read_side_files = false;
  return PlanComposeFix(o, name, size);
}

}  // namespace shmkeeper

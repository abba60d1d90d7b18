// The fix planner: one small planner per finding code, each turning its
// finding into line edits of one file (or a line in `skipped`), then only the
// edits whose result still parses.
#include "compose/compose_fix.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include "base/bytes.h"
#include "compose/compose.h"
#include "compose/compose_edit.h"
#include "compose/compose_rules.h"

namespace shmkeeper {
namespace compose {
namespace {

// The fix of one file in the making: what every planner reads and adds to.
class FixPlan {
 public:
  FixPlan(const Checked& c, const LoadedFile& lf, const std::string& size, ComposeFix* fix,
          std::set<std::string>* sized)
      : c_(c), lf_(lf), size_(size), fix_(*fix), sized_(*sized) {
    bool crlf = false;
    lines_ = SplitLines(lf.text, &crlf);
    eol_ = crlf ? "\r\n" : "\n";
  }

  const std::string& file() const { return fix_.file; }
  const std::vector<std::string>& lines() const { return lines_; }
  const std::string& eol() const { return eol_; }
  std::vector<Edit>& edits() { return edits_; }
  bool sized(const std::string& svc) const { return sized_.count(svc) > 0; }
  void MarkSized(const std::string& svc) { sized_.insert(svc); }
  // The group of the next change: the index it gets in fix.changes.
  size_t group() const { return fix_.changes.size(); }
  void Change(std::string what) { fix_.changes.push_back(std::move(what)); }
  void Skip(std::string why) {
    // Services that merge one anchor share its findings: said once.
    if (std::find(fix_.skipped.begin(), fix_.skipped.end(), why) == fix_.skipped.end())
      fix_.skipped.push_back(std::move(why));
  }

  // The 0-based line `li` of the file, or null when it has none.
  const std::string* Line(int li) const {
    return li >= 0 && li < static_cast<int>(lines_.size()) ? &lines_[static_cast<size_t>(li)] : nullptr;
  }

  // The size to give `svc`: --size, else its suggestion, else 2gb.
  std::string SizeFor(const std::string& svc) const {
    if (!size_.empty()) return size_;
    auto it = c_.report.suggestions.find(svc);
    return it != c_.report.suggestions.end() ? it->second.first : std::string("2gb");
  }

  // The mapping of service `svc` in this file (null when it has none here).
  YAML::Node ServiceNode(const std::string& svc) const {
    auto it = c_.project.services.find(svc);
    if (it == c_.project.services.end()) return YAML::Node();
    auto n = it->second.nodes.find(fix_.file);
    return n == it->second.nodes.end() ? YAML::Node() : n->second;
  }

  // The line and indentation where a new key goes into a block mapping.
  bool InsertPoint(const YAML::Node& map, int* line, std::string* indent) const {
    if (!map || !map.IsMap() || map.Style() == YAML::EmitterStyle::Flow || map.size() == 0) return false;
    YAML::Mark m = map.begin()->first.Mark();
    if (m.is_null() || m.line >= static_cast<int>(lines_.size())) return false;
    *line = m.line;
    *indent = std::string(static_cast<size_t>(m.column), ' ');
    return lines_[static_cast<size_t>(m.line)].compare(0, static_cast<size_t>(m.column), *indent) == 0;
  }

  // shm_size for a service that loses its host bind or ipc: host (none when it has one).
  bool AddShmSize(const std::string& svc, size_t group, std::string* note) {
    auto it = c_.project.services.find(svc);
    if (sized(svc) || (it != c_.project.services.end() && it->second.keys.count("shm_size"))) return true;
    int at = 0;
    std::string indent;
    if (IsAlias(svc) || !InsertPoint(ServiceNode(svc), &at, &indent)) return false;
    edits_.push_back({at, Edit::kInsertBefore, 0, 0, indent + "shm_size: " + Quote(SizeFor(svc)) + eol_, group});
    *note = MergedBy(svc);
    MarkSized(svc);
    for (const std::string& m : Mergers(svc)) MarkSized(m);
    return true;
  }

  // Whether service `svc` is written here as an alias (`svc: *anchor`): a key
  // added to it would go into the anchor, which others may share.
  bool IsAlias(const std::string& svc) const {
    YAML::Node services = ServicesNode(lf_.root);
    if (!services || !services.IsMap()) return false;
    for (const auto& kv : services) {
      if (kv.first.IsScalar() && kv.first.Scalar() == svc && kv.second.IsMap() && !kv.second.Mark().is_null())
        return kv.second.Mark().line < kv.first.Mark().line;  // the anchor's own place, above
    }
    return false;
  }

  // The services of this file that merge service `svc`'s mapping (its anchor)
  // or are aliases of it, and set no shm_size of their own: a key added to `svc` reaches them too.
  // Said as " (also ...)", or "" when none.
  std::string MergedBy(const std::string& svc) const {
    std::string names;
    for (const std::string& n : Mergers(svc)) names += (names.empty() ? "'" : ", '") + n + "'";
    if (names.empty()) return "";
    return " (its anchor is merged by " + names + ", which get this shm_size too)";
  }

  std::vector<std::string> Mergers(const std::string& svc) const {
    std::vector<std::string> out;
    YAML::Node mine = ServiceNode(svc), services = ServicesNode(lf_.root);
    if (!mine || !services || !services.IsMap()) return out;
    for (const auto& kv : services) {
      if (!kv.first.IsScalar() || kv.first.Scalar() == svc || !kv.second.IsMap()) continue;
      YAML::Node merge = kv.second["<<"];
      bool merges = kv.second.is(mine) ||
                    (merge && (merge.is(mine) ||
                               (merge.IsSequence() && std::any_of(merge.begin(), merge.end(),
                                                                  [&](const YAML::Node& m) { return m.is(mine); }))));
      auto other = c_.project.services.find(kv.first.Scalar());
      bool own = other != c_.project.services.end() && other->second.keys.count("shm_size") &&
                 !other->second.keys.at("shm_size").key.is(KeyNode(mine, "shm_size"));
      if (merges && !own) out.push_back(kv.first.Scalar());
    }
    return out;
  }

  // Whether the edit at `line`:`col` was planned already (an anchor that
  // several services merge gives each of them the same finding): then the
  // service joins that change's line.
  bool Joined(int line, int col, const std::string& svc) {
    auto it = done_.find({line, col});
    if (it == done_.end()) {
      done_[{line, col}] = group();
      return false;
    }
    fix_.changes[it->second] += "; the same line serves '" + svc + "'";
    return true;
  }

 private:
  const Checked& c_;
  const LoadedFile& lf_;
  const std::string& size_;
  ComposeFix& fix_;
  std::set<std::string>& sized_;  // shared by the plans of every file
  std::vector<std::string> lines_;
  std::string eol_;
  std::vector<Edit> edits_;
  std::map<std::pair<int, int>, size_t> done_;  // position -> its change
};

// The finding's position as 0-based line and column.
int LineOf(const ComposeFinding& f) { return f.pos.line - 1; }
int ColumnOf(const ComposeFinding& f) { return f.pos.column - 1; }

// misspelled-key: the key's own text (plain up to the ':', or a quoted scalar) becomes shm_size.
void PlanRename(const ComposeFinding& f, const std::string& line, FixPlan* p) {
  int li = LineOf(f), col = ColumnOf(f);
  if (p->Joined(li, col, f.service)) return p->MarkSized(f.service);
  size_t colon = line.find(':', static_cast<size_t>(col));
  char q = line[static_cast<size_t>(col)];
  int len = q == '"' || q == '\'' ? ScalarLength(line, col)
                                  : static_cast<int>((colon == std::string::npos ? line.size() : colon)) - col;
  std::string old = line.substr(static_cast<size_t>(col), static_cast<size_t>(len));
  while (!old.empty() && (old.back() == ' ' || old.back() == '\t')) old.pop_back();
  len = static_cast<int>(old.size());
  p->edits().push_back(
      {li, Edit::kReplace, col, len, old[0] == '"' || old[0] == '\'' ? Quote("shm_size") : "shm_size", p->group()});
  p->Change(f.pos.ToString() + ": renamed " + old + " to shm_size in service '" + f.service + "'");
  p->MarkSized(f.service);
}

// invalid-size, size-too-small: the value is replaced by the service's size.
void PlanResize(const ComposeFinding& f, const std::string& line, FixPlan* p) {
  if (p->Joined(LineOf(f), ColumnOf(f), f.service)) return;
  int len = ScalarLength(line, ColumnOf(f));
  if (len == 0) return p->Skip(f.pos.ToString() + ": " + f.message);
  p->edits().push_back({LineOf(f), Edit::kReplace, ColumnOf(f), len, Quote(p->SizeFor(f.service)), p->group()});
  p->Change(f.pos.ToString() + ": shm_size of '" + f.service + "' set to " + p->SizeFor(f.service));
}

// missing-shm-size: shm_size goes in as the service's first key.
void PlanAddShmSize(const ComposeFinding& f, FixPlan* p) {
  int at = 0;
  std::string indent;
  if (p->IsAlias(f.service)) {
    return p->Skip(f.pos.ToString() + ": service '" + f.service +
                   "' is an alias of an anchor (svc: *anchor) that other services may share; write it as a mapping "
                   "that merges the anchor (<<: *anchor) and add shm_size there by hand");
  }
  if (!p->InsertPoint(p->ServiceNode(f.service), &at, &indent)) {
    return p->Skip(f.pos.ToString() + ": service '" + f.service + "' is not a block mapping in " + p->file() +
                   "; add shm_size by hand");
  }
  p->edits().push_back(
      {at, Edit::kInsertBefore, 0, 0, indent + "shm_size: " + Quote(p->SizeFor(f.service)) + p->eol(), p->group()});
  p->Change(p->file() + ":" + std::to_string(at + 1) + ": added shm_size " + p->SizeFor(f.service) + " to service '" +
            f.service + "'" + p->MergedBy(f.service));
  p->MarkSized(f.service);
  for (const std::string& m : p->Mergers(f.service)) p->MarkSized(m);
}

// host-shm-bind: the bind's lines go (deletes first: an insert on a deleted
// line's index then lands after it), shm_size comes in.
void PlanDropHostBind(const ComposeFinding& f, FixPlan* p) {
  YAML::Node svc = p->ServiceNode(f.service);
  std::vector<int> drop =
      ItemLines(KeyNode(svc, "volumes"), svc ? svc["volumes"] : YAML::Node(), LineOf(f), ColumnOf(f), p->lines());
  std::vector<Edit> kept = p->edits();
  for (int d : drop) p->edits().push_back({d, Edit::kDelete, 0, 0, "", p->group()});
  std::string note;
  if (drop.empty() || !p->AddShmSize(f.service, p->group(), &note)) {
    p->edits() = std::move(kept);
    return p->Skip(f.pos.ToString() + ": " + f.message + "; replace it by shm_size by hand");
  }
  p->Change(f.pos.ToString() + ": removed the host /dev/shm bind of service '" + f.service + "'; its shm_size is " +
            p->SizeFor(f.service) + note);
}

// ipc-host-for-shm: in place, so a comment after it stays: "ipc: host  # x" -> "shm_size: \"2gb\"  # x".
void PlanReplaceIpcHost(const ComposeFinding& f, const std::string& line, FixPlan* p) {
  int li = LineOf(f), col = ColumnOf(f);
  YAML::Node key = KeyNode(p->ServiceNode(f.service), "ipc");
  int len = ScalarLength(line, col);
  if (!key || key.Mark().line != li || len == 0) return p->Skip(f.pos.ToString() + ": " + f.message);
  int kcol = key.Mark().column;
  p->edits().push_back(
      {li, Edit::kReplace, kcol, col + len - kcol, "shm_size: " + Quote(p->SizeFor(f.service)), p->group()});
  p->MarkSized(f.service);
  p->Change(f.pos.ToString() + ": replaced ipc: host of service '" + f.service + "' by shm_size " +
            p->SizeFor(f.service) +
            " (it leaves the host's IPC namespace: SysV IPC and CUDA IPC with processes "
            "outside the container stop)");
}

// misplaced-shm-size under deploy: only a one-line scalar under a deploy that
// keeps other keys can move up to the service without touching anything else.
void PlanMoveOutOfDeploy(const ComposeFinding& f, const std::string& line, FixPlan* p) {
  int li = LineOf(f);
  YAML::Node svc = p->ServiceNode(f.service);
  YAML::Node deploy = svc ? svc["deploy"] : YAML::Node();
  int at = 0;
  std::string indent;
  bool movable = deploy && deploy.IsMap() && deploy.size() >= 2 && deploy["shm_size"] &&
                 deploy["shm_size"].IsScalar() && deploy["shm_size"].Mark().line == li && !svc["shm_size"];
  if (!movable || !p->InsertPoint(svc, &at, &indent)) return p->Skip(f.pos.ToString() + ": " + f.message);
  int vcol = deploy["shm_size"].Mark().column;
  std::string value = line.substr(static_cast<size_t>(vcol), static_cast<size_t>(ScalarLength(line, vcol)));
  p->edits().push_back({li, Edit::kDelete, 0, 0, "", p->group()});
  p->edits().push_back({at, Edit::kInsertBefore, 0, 0, indent + "shm_size: " + value + p->eol(), p->group()});
  p->MarkSized(f.service);
  p->Change(f.pos.ToString() + ": moved shm_size out of deploy in service '" + f.service + "'");
}

// The planner of the finding's code, where the finding has what it needs
// (a line in this file); anything else is skipped.
void PlanFinding(const ComposeFinding& f, FixPlan* p) {
  const std::string* line = p->Line(LineOf(f));
  switch (f.code) {
    case FindingCode::kMisspelledKey:
      if (line) return PlanRename(f, *line, p);
      break;
    case FindingCode::kInvalidSize:
    case FindingCode::kSizeTooSmall:
      if (line) return PlanResize(f, *line, p);
      break;
    case FindingCode::kMissingShmSize:
      return PlanAddShmSize(f, p);
    case FindingCode::kHostShmBind:
      if (line) return PlanDropHostBind(f, p);
      break;
    case FindingCode::kIpcHostForShm:
      if (line && f.pos.file == p->file()) return PlanReplaceIpcHost(f, *line, p);
      break;
    case FindingCode::kMisplacedShmSize:
      if (line && !f.service.empty()) return PlanMoveOutOfDeploy(f, *line, p);
      break;
    case FindingCode::kBuildShmSize:
      break;
  }
  p->Skip(f.pos.ToString() + ": " + f.message);
}

// Renames and moves first: a service that gets its shm_size that way needs no new one.
std::vector<const ComposeFinding*> InFixOrder(const std::vector<ComposeFinding>& findings) {
  std::vector<const ComposeFinding*> ordered;
  for (const ComposeFinding& f : findings) {
    if (f.code != FindingCode::kMissingShmSize) ordered.push_back(&f);
  }
  for (const ComposeFinding& f : findings) {
    if (f.code == FindingCode::kMissingShmSize) ordered.push_back(&f);
  }
  return ordered;
}

// Whether the planner of `f` runs for this file: findings of other files only
// where they add to this one, and a service sized already needs no new size.
bool Applies(const ComposeFinding& f, const FixPlan& p) {
  if (f.pos.file != p.file()) return false;
  return !(f.code == FindingCode::kMissingShmSize && p.sized(f.service));
}

// Whether the reader itself accepts `text`.
bool Parses(const std::string& text) { return ParseComposeText("", text).ok(); }

// A line edit can meet YAML it cannot see from one line (a plain scalar
// continued below, say): keeps only the groups of edits whose result still parses.
void KeepWhatParses(const std::vector<std::string>& lines, const std::vector<Edit>& edits, const std::string& eol,
                    ComposeFix* fix) {
  fix->fixed = ApplyEdits(lines, edits, eol);
  if (Parses(fix->fixed)) return;
  std::vector<Edit> kept;
  std::vector<std::string> changes;
  for (size_t g = 0; g < fix->changes.size(); ++g) {
    std::vector<Edit> trial = kept;
    for (const Edit& e : edits) {
      if (e.group == g) trial.push_back(e);
    }
    if (Parses(ApplyEdits(lines, trial, eol))) {
      kept = std::move(trial);
      changes.push_back(fix->changes[g]);
    } else {
      fix->skipped.push_back(fix->changes[g] + ": not applied, the result would not parse; fix it by hand");
    }
  }
  fix->changes = std::move(changes);
  fix->fixed = ApplyEdits(lines, kept, eol);
}

// Every file read: the compose files, then the files `extends` read.
std::vector<const LoadedFile*> AllFiles(const Checked& c) {
  std::vector<const LoadedFile*> out;
  for (const LoadedFile& f : c.project.files) out.push_back(&f);
  for (const LoadedFile& f : c.project.extended) out.push_back(&f);
  return out;
}

}  // namespace

Result<std::vector<ComposeFix>> PlanFixes(const Checked& c, const std::string& size) {
  std::vector<const LoadedFile*> files = AllFiles(c);
  std::vector<ComposeFix> fixes(files.size());
  std::vector<std::unique_ptr<FixPlan>> plans;
  std::set<std::string> sized;
  for (size_t i = 0; i < files.size(); ++i) {
    fixes[i].file = files[i]->path;
    fixes[i].original = files[i]->text;
    plans.push_back(std::make_unique<FixPlan>(c, *files[i], size, &fixes[i], &sized));
  }
  // Renames, moves and ipc: host replacements in every file first: a
  // service sized that way in an override file needs no new shm_size in the
  // base file; then what may add one (a host bind's removal), then additions.
  auto phase = [](FindingCode code) {
    switch (code) {
      case FindingCode::kMisspelledKey:
      case FindingCode::kMisplacedShmSize:
      case FindingCode::kIpcHostForShm:
        return 0;
      case FindingCode::kMissingShmSize:
        return 2;
      default:
        return 1;
    }
  };
  std::vector<const ComposeFinding*> ordered = InFixOrder(c.report.findings);
  for (int ph : {0, 1, 2}) {
    for (auto& plan : plans) {
      for (const ComposeFinding* f : ordered) {
        // An info finding states a choice left to the user (ipc: host kept): nothing to fix.
        if (f->severity != Severity::kInfo && phase(f->code) == ph && Applies(*f, *plan)) PlanFinding(*f, plan.get());
      }
    }
  }
  for (size_t i = 0; i < files.size(); ++i)
    KeepWhatParses(plans[i]->lines(), plans[i]->edits(), plans[i]->eol(), &fixes[i]);
  return fixes;
}

Result<ComposeFix> PlanFix(const Checked& c, const std::string& file, const std::string& size) {
  std::string path = file.empty() ? c.report.files.front() : file;
  SHMK_ASSIGN_OR_RETURN(std::vector<ComposeFix> fixes, PlanFixes(c, size));
  for (ComposeFix& f : fixes) {
    if (f.file == path) return std::move(f);
  }
  return Status::Invalid(path + " is not one of the compose files read");
}

}  // namespace compose
}  // namespace shmkeeper

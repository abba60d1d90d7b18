#include "install/containerd_config.h"

#include <toml++/toml.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <sstream>
#include <string_view>

#include "base/fileutil.h"

namespace shmkeeper {
namespace {

constexpr std::string_view kBlockBegin = "# >>> shmkeeper";
constexpr std::string_view kBlockEnd = "# <<< shmkeeper";
constexpr std::string_view kWasMark = "# shmkeeper-was: ";
constexpr std::string_view kInsertedMark = "# shmkeeper-inserted";
constexpr const char* kAbsentFileText = "version = 2\n";

// Where the CRI runtime handlers live for each config version.
struct Layout {
  std::string cri_plugin;
};

Result<toml::table> ParseToml(const std::string& text, const std::string& name) {
  try {
    return toml::parse(text, name);
  } catch (const toml::parse_error& e) {
    const toml::source_position& at = e.source().begin;
    return Status::Invalid(name + ":" + std::to_string(at.line) + ":" + std::to_string(at.column) + ": " +
                           EscapeControl(e.description()));
  }
}

Result<Layout> LayoutOf(const toml::table& t, const std::string& name) {
  int64_t version = t["version"].value_or<int64_t>(1);
  if (version == 2) return Layout{"io.containerd.grpc.v1.cri"};
  if (version == 3) return Layout{"io.containerd.cri.v1.runtime"};
  return Status::Invalid(name + ": containerd config version " + std::to_string(version) +
                         " is not supported (2 or 3; `containerd config migrate` converts older files)");
}

// The CRI plugin's `containerd` table, or null.
toml::table* ContainerdTable(toml::table& root, const Layout& l) {
  return root["plugins"][l.cri_plugin]["containerd"].as_table();
}
const toml::table* ContainerdTable(const toml::table& root, const Layout& l) {
  return root["plugins"][l.cri_plugin]["containerd"].as_table();
}

Status CheckRuntimeName(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 64;
  for (char c : name) ok = ok && (isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_');
  if (ok) return Status::Ok();
  return Status::Invalid("runtime name \"" + name + "\" must be 1-64 letters, digits, '-' or '_'");
}

// A file's lines, each with its own line ending ("" for a last line without
// one), so an edit changes no byte outside the lines it touches.
struct Lines {
  std::vector<std::string> lines;
  std::vector<std::string> ends;
  std::string eol = "\n";  // for lines we add: the file's first ending

  void Insert(size_t at, std::string line) {
    lines.insert(lines.begin() + static_cast<long>(at), std::move(line));
    ends.insert(ends.begin() + static_cast<long>(at), eol);
  }
  void EndWithNewline() {
    if (!ends.empty() && ends.back().empty()) ends.back() = eol;
  }
};

Lines SplitLines(const std::string& text) {
  Lines l;
  size_t first = text.find('\n');
  if (first != std::string::npos && first > 0 && text[first - 1] == '\r') l.eol = "\r\n";
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) {
      l.lines.push_back(text.substr(pos));
      l.ends.emplace_back();
      break;
    }
    bool crlf = nl > pos && text[nl - 1] == '\r';
    l.lines.push_back(text.substr(pos, nl - pos - (crlf ? 1 : 0)));
    l.ends.emplace_back(crlf ? "\r\n" : "\n");
    pos = nl + 1;
  }
  return l;
}

std::string JoinLines(const Lines& l) {
  std::string out;
  for (size_t i = 0; i < l.lines.size(); ++i) out += l.lines[i] + l.ends[i];
  return out;
}

// The text with every shmkeeper edit undone.
std::string StripOurLines(const std::string& text) {
  Lines in = SplitLines(text), out;
  bool in_block = false;
  for (size_t i = 0; i < in.lines.size(); ++i) {
    const std::string& line = in.lines[i];
    if (line.starts_with(kBlockBegin)) in_block = true;
    if (in_block) {
      if (line.starts_with(kBlockEnd)) in_block = false;
      continue;
    }
    if (line.find(kInsertedMark) != std::string::npos) continue;
    size_t was = line.find(kWasMark);
    out.lines.push_back(was == std::string::npos ? line : line.substr(was + kWasMark.size()));
    out.ends.push_back(in.ends[i]);
  }
  return JoinLines(out);
}

std::string WithTrailingNewline(const std::string& text) {
  Lines l = SplitLines(text);
  l.EndWithNewline();
  return JoinLines(l);
}

std::string WithLineEndings(const std::string& text, const std::string& eol) {
  if (eol == "\n") return text;
  std::string out;
  for (char c : text) out += c == '\n' ? eol : std::string(1, c);
  return out;
}

std::string FormatToml(const toml::table& t) {
  std::ostringstream s;
  s << toml::toml_formatter(t);
  return s.str();
}

// The handler: a copy of the base runtime (runc) with our binary and the
// annotations shmkeeper reads passed through.
toml::table HandlerTable(const toml::table* base, const ContainerdInstallOptions& opts) {
  toml::table rt, options;
  if (base) {
    for (auto&& [k, v] : *base) {
      if (k != "options" && k != "pod_annotations" && k != "container_annotations") rt.insert(k, v);
    }
    if (const toml::table* o = (*base)["options"].as_table()) options = *o;
  }
  if (!rt.contains("runtime_type")) rt.insert("runtime_type", "io.containerd.runc.v2");
  toml::array annotations;
  for (const std::string& a : ContainerdPassedAnnotations()) annotations.push_back(a);
  rt.insert_or_assign("pod_annotations", annotations);
  rt.insert_or_assign("container_annotations", annotations);
  options.insert_or_assign("BinaryName", opts.runtime_path);
  rt.insert_or_assign("options", options);
  return rt;
}

std::string BlockText(const Layout& l, const toml::table& handler, const ContainerdInstallOptions& opts,
                      bool with_default_table) {
  toml::table containerd;
  if (with_default_table) containerd.insert("default_runtime_name", opts.runtime_name);
  containerd.insert("runtimes", toml::table{{opts.runtime_name, handler}});
  toml::table root{{"plugins", toml::table{{l.cri_plugin, toml::table{{"containerd", containerd}}}}}};
  return std::string(kBlockBegin) + " (added by `shmkeeper install containerd`; `shmkeeper uninstall containerd` " +
         "removes it)\n" + FormatToml(root) + "\n" + std::string(kBlockEnd) + "\n";
}

// Points an existing default_runtime_name at our handler, keeping the original
// line in a trailing comment. False when the value cannot be edited in place.
bool RewriteDefaultLine(Lines* l, const toml::node& value, const std::string& runtime_name) {
  const toml::source_region& r = value.source();
  if (r.begin.line != r.end.line || r.begin.line == 0 || r.begin.line > l->lines.size()) return false;
  std::string& line = l->lines[r.begin.line - 1];
  size_t b = r.begin.column - 1, e = r.end.column - 1;
  if (e > line.size() || b >= e) return false;
  for (size_t i = 0; i < e; ++i) {
    if (static_cast<unsigned char>(line[i]) >= 0x80) return false;  // columns count code points
  }
  std::string original = line;
  line = line.substr(0, b) + "\"" + runtime_name + "\"" + line.substr(e);
  line += "  " + std::string(kWasMark) + original;
  return true;
}

// Inserts `default_runtime_name = "<name>"` after the header line of the
// containerd table. False when that table has no header line of its own.
bool InsertDefaultLine(Lines* l, const toml::table& containerd, const std::string& runtime_name) {
  size_t header = containerd.source().begin.line;
  if (header == 0 || header > l->lines.size()) return false;
  std::string_view h = l->lines[header - 1];
  h.remove_prefix(std::min(h.find_first_not_of(" \t"), h.size()));
  if (!h.starts_with("[") || h.starts_with("[[")) return false;
  l->Insert(header, "default_runtime_name = \"" + runtime_name + "\"  " + std::string(kInsertedMark));
  return true;
}

// Removes `path` from `t` when it is an empty table that `orig` lacks.
void PruneIfNew(toml::table& t, const toml::table& orig, const std::vector<std::string>& path) {
  for (size_t depth = path.size(); depth > 0; --depth) {
    toml::node_view<toml::node> node = t[path[0]];
    toml::node_view<const toml::node> onode = orig[path[0]];
    for (size_t i = 1; i + 1 < depth; ++i) {
      node = node[path[i]];
      onode = onode[path[i]];
    }
    toml::table* parent = depth == 1 ? &t : node.as_table();
    std::string_view key = path[depth - 1];
    bool orig_has = depth == 1 ? orig.contains(key) : (onode.as_table() && onode.as_table()->contains(key));
    if (!parent || orig_has) return;
    const toml::table* child = (*parent)[key].as_table();
    if (child && child->empty()) parent->erase(key);
  }
}

// True when `got` is `orig` plus exactly our handler (and default).
bool IsOriginalPlusOurs(toml::table got, const toml::table& orig, const Layout& l,
                        const ContainerdInstallOptions& opts) {
  toml::table* containerd = ContainerdTable(got, l);
  if (!containerd) return false;
  toml::table* runtimes = (*containerd)["runtimes"].as_table();
  if (!runtimes) return false;
  if ((*runtimes)[opts.runtime_name]["options"]["BinaryName"].value_or(std::string()) != opts.runtime_path) {
    return false;
  }
  runtimes->erase(opts.runtime_name);
  if (opts.set_as_default) {
    if ((*containerd)["default_runtime_name"].value_or(std::string()) != opts.runtime_name) return false;
    const toml::table* ocd = ContainerdTable(orig, l);
    const toml::node* was = ocd ? ocd->get("default_runtime_name") : nullptr;
    if (was) {
      containerd->insert_or_assign("default_runtime_name", *was);
    } else {
      containerd->erase("default_runtime_name");
    }
  }
  PruneIfNew(got, orig, {"plugins", l.cri_plugin, "containerd", "runtimes"});
  return got == orig;
}

Status CheckOptions(const ContainerdInstallOptions& opts) {
  SHMK_RETURN_IF_ERROR(CheckRuntimeName(opts.runtime_name));
  if (opts.runtime_path.empty() || opts.runtime_path[0] != '/') {
    return Status::Invalid("runtime path \"" + opts.runtime_path + "\" must be absolute");
  }
  return Status::Ok();
}

// Sets default_runtime_name in the clean text's lines; `in_block` when it has
// to go into our block instead.
Status PointDefault(Lines* lines, const toml::table& orig, const Layout& l, const ContainerdInstallOptions& opts,
                    bool* in_block) {
  *in_block = false;
  const toml::table* containerd = ContainerdTable(orig, l);
  const toml::node* current = containerd ? containerd->get("default_runtime_name") : nullptr;
  if (current && current->value_or(std::string()) == opts.runtime_name) return Status::Ok();
  if (current) {
    if (RewriteDefaultLine(lines, *current, opts.runtime_name)) return Status::Ok();
    return Status::Invalid("cannot edit default_runtime_name at line " + std::to_string(current->source().begin.line) +
                           "; set it to \"" + opts.runtime_name + "\" by hand");
  }
  if (containerd && InsertDefaultLine(lines, *containerd, opts.runtime_name)) return Status::Ok();
  *in_block = true;
  return Status::Ok();
}

}  // namespace

std::string WithoutShmkeeperLines(const std::string& text) { return StripOurLines(text); }

std::string ContainerdGrpcAddress(const std::string& text) {
  Result<toml::table> t = ParseToml(text, "config");
  if (!t.ok()) return "";
  return (*t)["grpc"]["address"].value_or<std::string>("");
}

const std::vector<std::string>& ContainerdPassedAnnotations() {
  static const std::vector<std::string> kPassed = {"shmkeeper.io/*", "shm-size.crio.io", "io.kubernetes.cri-o.ShmSize"};
  return kPassed;
}

Result<std::string> WithContainerdRuntime(const std::string& text, const std::string& name,
                                          const ContainerdInstallOptions& opts) {
  SHMK_RETURN_IF_ERROR(CheckOptions(opts));
  std::string clean = StripOurLines(text.empty() ? kAbsentFileText : text);
  SHMK_ASSIGN_OR_RETURN(toml::table orig, ParseToml(clean, name));
  SHMK_ASSIGN_OR_RETURN(Layout l, LayoutOf(orig, name));
  const toml::table* containerd = ContainerdTable(orig, l);
  if (containerd) {
    if (const toml::node* mine = (*containerd)["runtimes"][opts.runtime_name].node()) {
      return Status::Invalid(name + ":" + std::to_string(mine->source().begin.line) + ": runtime handler \"" +
                             opts.runtime_name + "\" exists and was not added by shmkeeper (pick --runtime-name)");
    }
  }
  std::string base_name = containerd ? (*containerd)["default_runtime_name"].value_or(std::string("runc")) : "runc";
  const toml::table* base = containerd ? (*containerd)["runtimes"][base_name].as_table() : nullptr;
  Lines lines = SplitLines(clean);
  bool default_in_block = false;
  if (opts.set_as_default) SHMK_RETURN_IF_ERROR(PointDefault(&lines, orig, l, opts, &default_in_block));
  lines.EndWithNewline();
  std::string out = JoinLines(lines);
  std::string block = BlockText(l, HandlerTable(base, opts), opts, default_in_block);
  out += WithLineEndings(block, lines.eol);
  Result<toml::table> got = ParseToml(out, name + " (as edited)");
  if (!got.ok() || !IsOriginalPlusOurs(*got, orig, l, opts)) {
    return Status::Invalid(name + ": the runtime handler cannot be added without changing other settings " +
                           "(the CRI plugin's tables are written in a form shmkeeper does not edit); add it by hand");
  }
  return out;
}

Result<std::string> WithoutContainerdRuntime(const std::string& text, const std::string& name) {
  std::string clean = StripOurLines(text);
  if (clean == text) return text;
  SHMK_RETURN_IF_ERROR(ParseToml(clean, name + " (with shmkeeper's lines removed)").status());
  return clean;
}

Result<ConfigChange> InstallContainerd(const ContainerdInstallOptions& opts) {
  SHMK_ASSIGN_OR_RETURN(OptionalFile f, ReadOptionalFile(opts.config, 4 << 20));
  SHMK_ASSIGN_OR_RETURN(std::string next, WithContainerdRuntime(f.text, opts.config, opts));
  ConfigChange c;
  c.before = f.text;
  c.after = next;
  c.changed = !f.exists || next != f.text;
  if (!c.changed || opts.dry_run) return c;
  SHMK_RETURN_IF_ERROR(WriteBackupOnce(opts.config, f.exists, f.text).WithContext("back up " + opts.config));
  SHMK_RETURN_IF_ERROR(WriteFileAtomic(opts.config, next, 0644));
  return c;
}

Result<ConfigChange> UninstallContainerd(const ContainerdInstallOptions& opts) {
  SHMK_ASSIGN_OR_RETURN(OptionalFile f, ReadOptionalFile(opts.config, 4 << 20));
  ConfigChange c;
  c.before = c.after = f.text;
  if (!f.exists) return c;
  SHMK_ASSIGN_OR_RETURN(c.after, WithoutContainerdRuntime(f.text, opts.config));
  c.changed = c.after != f.text;
  if (!c.changed) return c;
  Result<OptionalFile> backup = ReadOptionalFile(BackupPath(opts.config), 4 << 20);
  if (backup.ok() && backup->exists && c.after == WithTrailingNewline(backup->text)) c.after = backup->text;
  if (opts.dry_run) return c;
  bool remove = PathExists(AbsentMarkerPath(opts.config)) && c.after == kAbsentFileText;
  if (remove) {
    SHMK_RETURN_IF_ERROR(RemoveFile(opts.config));
    c.after.clear();
  } else {
    SHMK_RETURN_IF_ERROR(WriteFileAtomic(opts.config, c.after, 0644));
  }
  // The change is applied: an error from here on says so.
  SHMK_RETURN_IF_ERROR(RemoveBackups(opts.config).WithContext(opts.config + " is restored, but its backup remains"));
  return c;
}

}  // namespace shmkeeper

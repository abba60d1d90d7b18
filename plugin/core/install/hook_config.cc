#include "install/hook_config.h"

#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <sstream>

#include "base/fileutil.h"
#include "base/json.h"
#include "decide/plan.h"

namespace shmkeeper {
namespace {

constexpr const char* kHookFile = "shmkeeper.json";
constexpr const char* kDropInFile = "99-shmkeeper.conf";
constexpr const char* kCreatedDirsFile = ".shmkeeper-created-dirs";  // not *.json: engines skip it
constexpr const char* kDropInHeader = "# Written by `shmkeeper install crio`; `shmkeeper uninstall crio` removes it.\n";

struct Owned {
  std::string path, content;
};

std::vector<Owned> Files(const HookInstallOptions& o) {
  std::vector<Owned> files = {{o.root + o.hooks_dir + "/" + kHookFile, HookJson(o)}};
  if (o.crio) files.push_back({o.root + o.crio_conf_dir + "/" + kDropInFile, CrioDropIn(o)});
  return files;
}

// Whether an existing file at `path` is one shmkeeper wrote.
bool IsOurs(const std::string& path, const std::string& text) {
  if (path.ends_with(kDropInFile)) return text.starts_with(kDropInHeader);
  Json doc = Json::parse(text, nullptr, false);
  if (!doc.is_object() || !doc.contains("hook") || !doc["hook"].is_object()) return false;
  std::string hook = StringField(doc["hook"], "path");
  return hook.ends_with("/shmkeeper-hook");
}

Status CheckOptions(const HookInstallOptions& o) {
  if (o.hook_path.empty() || o.hook_path[0] != '/') {
    return Status::Invalid("hook path \"" + o.hook_path + "\" must be absolute");
  }
  if (o.crio && (o.runtime_path.empty() || o.runtime_path[0] != '/')) {
    return Status::Invalid("runtime path \"" + o.runtime_path + "\" must be absolute (crun or runc; --runtime-path)");
  }
  for (char c : o.runtime_name) {
    if (!isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') {
      return Status::Invalid("runtime name \"" + o.runtime_name + "\" must be letters, digits, '-' or '_'");
    }
  }
  return o.runtime_name.empty() ? Status::Invalid("runtime name is empty") : Status::Ok();
}

std::string CreatedDirsMarker(const HookInstallOptions& o) { return o.root + o.hooks_dir + "/" + kCreatedDirsFile; }

// The directories above and including each file's that do not exist yet,
// outermost first.
std::vector<std::string> MissingDirs(const std::vector<Owned>& files) {
  std::vector<std::string> out;
  for (const Owned& f : files) {
    std::vector<std::string> chain;
    for (std::string d = f.path.substr(0, f.path.rfind('/')); d.size() > 1 && !PathExists(d);
         d = d.substr(0, d.rfind('/'))) {
      chain.insert(chain.begin(), d);
    }
    for (std::string& d : chain) {
      if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(std::move(d));
    }
  }
  return out;
}

// Removes the directories install created (listed in the marker), innermost
// first, each only when empty and only one that leads to a file shmkeeper owns.
Status RemoveCreatedDirs(const HookInstallOptions& o, const std::vector<Owned>& files) {
  std::string marker = CreatedDirsMarker(o);
  SHMK_ASSIGN_OR_RETURN(OptionalFile listed, ReadOptionalFile(marker, 64 << 10));
  if (!listed.exists) return Status::Ok();
  SHMK_RETURN_IF_ERROR(RemoveFile(marker));
  std::vector<std::string> dirs;
  std::istringstream in(listed.text);
  for (std::string d; std::getline(in, d);) {
    bool leads_to_ours = std::any_of(files.begin(), files.end(), [&](const Owned& f) {
      return !d.empty() && d[0] == '/' && f.path.starts_with(d + "/") && d.find("/..") == std::string::npos;
    });
    if (leads_to_ours) dirs.push_back(d);
  }
  for (auto d = dirs.rbegin(); d != dirs.rend(); ++d) {
    if (::rmdir(d->c_str()) != 0 && errno != ENOENT && errno != ENOTEMPTY && errno != EEXIST) {
      return Status::FromErrno(errno, "rmdir " + *d);
    }
  }
  return Status::Ok();
}

}  // namespace

std::string HookJson(const HookInstallOptions& o) {
  Json args = Json::array({"shmkeeper-hook"});
  if (!o.hook_config.empty()) args.insert(args.end(), {"--config", o.hook_config});
  Json when = Json::object();
  if (o.crio && !o.set_as_default) {
    // Only pods of the shmkeeper runtime handler (RuntimeClass shmkeeper).
    when["annotations"] = {{"^io\\.kubernetes\\.cri-o\\.RuntimeHandler$", "^" + o.runtime_name + "$"}};
  } else {
    when["always"] = true;
  }
  Json doc = {{"version", "1.0.0"},
              {"hook", {{"path", o.hook_path}, {"args", args}, {"timeout", 10}}},
              {"when", when},
              {"stages", Json::array({"createRuntime", "poststop"})}};
  return DumpJson(doc, 2) + "\n";
}

std::string CrioDropIn(const HookInstallOptions& o) {
  toml::table handler{{"runtime_path", o.runtime_path},
                      {"runtime_type", "oci"},
                      {"allowed_annotations", toml::array{kCrioLegacyShmSizeAnnotation}}};
  toml::table runtime{{"runtimes", toml::table{{o.runtime_name, handler}}}};
  if (o.set_as_default) runtime.insert("default_runtime", o.runtime_name);
  // CRI-O's own default list already holds the default directory; setting
  // hooks_dir replaces the list, so only a directory the user chose is named.
  if (o.hooks_dir != kDefaultHooksDir) runtime.insert("hooks_dir", toml::array{o.hooks_dir});
  std::ostringstream s;
  s << kDropInHeader << toml::toml_formatter(toml::table{{"crio", toml::table{{"runtime", runtime}}}}) << "\n";
  return s.str();
}

Result<std::vector<FileChange>> InstallHook(const HookInstallOptions& o) {
  SHMK_RETURN_IF_ERROR(CheckOptions(o));
  std::vector<FileChange> out;
  for (const Owned& f : Files(o)) {
    SHMK_ASSIGN_OR_RETURN(OptionalFile cur, ReadOptionalFile(f.path, 1 << 20));
    if (cur.exists && !IsOurs(f.path, cur.text)) {
      return Status::Invalid(f.path + " exists and was not written by shmkeeper; move it away first");
    }
    out.push_back({f.path, {cur.text != f.content || !cur.exists, cur.text, f.content, false}});
  }
  if (o.dry_run) return out;
  std::vector<std::string> created = MissingDirs(Files(o));
  for (const FileChange& f : out) {
    if (!f.change.changed) continue;
    SHMK_RETURN_IF_ERROR(MakeDirs(f.path.substr(0, f.path.rfind('/'))));
    SHMK_RETURN_IF_ERROR(WriteFileAtomic(f.path, f.change.after, 0644));
  }
  if (!created.empty()) {  // uninstall removes exactly these again
    std::string text;
    for (const std::string& d : created) text += d + "\n";
    SHMK_RETURN_IF_ERROR(WriteFileAtomic(CreatedDirsMarker(o), text, 0644));
  }
  return out;
}

Result<std::vector<FileChange>> UninstallHook(const HookInstallOptions& o) {
  std::vector<FileChange> out;
  for (const Owned& f : Files(o)) {
    SHMK_ASSIGN_OR_RETURN(OptionalFile cur, ReadOptionalFile(f.path, 1 << 20));
    if (cur.exists && !IsOurs(f.path, cur.text)) {
      return Status::Invalid(f.path + " was not written by shmkeeper; left alone");
    }
    out.push_back({f.path, {cur.exists, cur.text, "", false}});
  }
  if (o.dry_run) return out;
  for (const FileChange& f : out) {
    if (f.change.changed) SHMK_RETURN_IF_ERROR(RemoveFile(f.path));
  }
  SHMK_RETURN_IF_ERROR(RemoveCreatedDirs(o, Files(o)));
  return out;
}

}  // namespace shmkeeper

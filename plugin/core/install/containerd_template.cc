#include "install/containerd_template.h"

#include <toml++/toml.h>

#include <string_view>

#include "base/fileutil.h"

namespace shmkeeper {
namespace {

constexpr std::string_view kBlockBegin = "# >>> shmkeeper";
constexpr size_t kMaxConfig = 4 << 20;

std::string WithNewline(std::string s) {
  if (!s.empty() && s.back() != '\n') s += '\n';
  return s;
}

int64_t ConfigVersion(const std::string& text) {
  try {
    return toml::parse(text)["version"].value_or<int64_t>(1);
  } catch (const toml::parse_error&) {
    return 0;  // WithContainerdRuntime reports the error with its position
  }
}

}  // namespace

std::string ContainerdTemplatePath(const std::string& dir, int64_t config_version) {
  std::string v3 = dir + "/config-v3.toml.tmpl", v2 = dir + "/config.toml.tmpl";
  if (PathExists(v3)) return v3;
  if (PathExists(v2)) return v2;
  return config_version == 3 ? v3 : v2;
}

Result<std::string> WithContainerdTemplateRuntime(const std::string& tmpl, const std::string& rendered,
                                                  const std::string& rendered_name,
                                                  const ContainerdInstallOptions& opts) {
  if (opts.set_as_default) {
    return Status::Invalid(
        "--set-as-default cannot change the default runtime of a generated containerd config (it is set in the "
        "distribution's base template); start k3s/RKE2 with --default-runtime " +
        opts.runtime_name + " instead");
  }
  if (opts.runtime_path.find("{{") != std::string::npos || opts.runtime_path.find("}}") != std::string::npos) {
    return Status::Invalid("runtime path \"" + opts.runtime_path + "\" holds \"{{\" or \"}}\", a template action");
  }
  // The block, checked against what the distribution generated last (with
  // any block of ours from an earlier render taken out first).
  SHMK_ASSIGN_OR_RETURN(std::string edited, WithContainerdRuntime(rendered, rendered_name, opts));
  size_t at = edited.rfind(kBlockBegin);
  if (at == std::string::npos || (at > 0 && edited[at - 1] != '\n')) {
    return Status::Internal(rendered_name + ": no handler block in the edited config");
  }
  std::string block = edited.substr(at);
  // The handler copies the default runtime's options: a "{{" there would be
  // a template action and k3s would not start.
  if (block.find("{{") != std::string::npos) {
    return Status::Invalid(rendered_name + ": the default runtime's settings hold \"{{\", which the template would " +
                           "read as an action; add the handler to the template by hand");
  }
  std::string base = tmpl.empty() ? std::string(kContainerdBaseTemplate) : WithNewline(WithoutShmkeeperLines(tmpl));
  return base + block;
}

Result<ConfigChange> InstallContainerdTemplate(const ContainerdInstallOptions& opts, const std::string& dir) {
  SHMK_ASSIGN_OR_RETURN(OptionalFile rendered, ReadOptionalFile(opts.config, kMaxConfig));
  if (!rendered.exists) {
    return Status::NotFound(opts.config +
                            " does not exist: the distribution generates it when it starts; start it once first");
  }
  std::string path = ContainerdTemplatePath(dir, ConfigVersion(rendered.text));
  SHMK_ASSIGN_OR_RETURN(OptionalFile t, ReadOptionalFile(path, kMaxConfig));
  SHMK_ASSIGN_OR_RETURN(std::string next, WithContainerdTemplateRuntime(t.text, rendered.text, opts.config, opts));
  ConfigChange c;
  c.before = t.text;
  c.after = next;
  c.changed = !t.exists || next != t.text;
  if (!c.changed || opts.dry_run) return c;
  SHMK_RETURN_IF_ERROR(WriteBackupOnce(path, t.exists, t.text).WithContext("back up " + path));
  SHMK_RETURN_IF_ERROR(WriteFileAtomic(path, next, 0644));
  return c;
}

Result<ConfigChange> UninstallContainerdTemplate(const ContainerdInstallOptions& opts, const std::string& dir) {
  ConfigChange total;
  for (const std::string& path : {dir + "/config-v3.toml.tmpl", dir + "/config.toml.tmpl"}) {
    SHMK_ASSIGN_OR_RETURN(OptionalFile t, ReadOptionalFile(path, kMaxConfig));
    if (!t.exists) continue;
    std::string clean = WithoutShmkeeperLines(t.text);
    if (clean == t.text) continue;
    Result<OptionalFile> backup = ReadOptionalFile(BackupPath(path), kMaxConfig);
    if (backup.ok() && backup->exists && WithNewline(clean) == WithNewline(backup->text)) clean = backup->text;
    bool remove = PathExists(AbsentMarkerPath(path)) && clean == kContainerdBaseTemplate;
    total.before += t.text;
    total.after += remove ? "" : clean;
    total.changed = true;
    if (opts.dry_run) continue;
    SHMK_RETURN_IF_ERROR(remove ? RemoveFile(path) : WriteFileAtomic(path, clean, 0644));
    // The change is applied: an error from here on says so.
    SHMK_RETURN_IF_ERROR(RemoveBackups(path).WithContext(path + " is restored, but its backup remains"));
  }
  return total;
}

}  // namespace shmkeeper

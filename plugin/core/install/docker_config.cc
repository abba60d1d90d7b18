#include "install/docker_config.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include "base/fileutil.h"
#include "base/os.h"
#include "base/proc_args.h"

namespace shmkeeper {
namespace {

struct DaemonFile {
  bool exists = false;
  std::string text;
  Json doc = Json::object();
};

Result<Json> ParseDaemonJson(const std::string& text, const std::string& path) {
  try {
    Json doc = Json::parse(text.empty() ? "{}" : text);
    if (!doc.is_object()) return Status::Invalid(path + ": the document must be a JSON object");
    return doc;
  } catch (const Json::parse_error& e) {
    return Status::Invalid(path + ": " + e.what());
  }
}

Result<DaemonFile> ReadDaemonFile(const std::string& path) {
  DaemonFile f;
  SHMK_ASSIGN_OR_RETURN(OptionalFile file, ReadOptionalFile(path, 4 << 20));
  if (!file.exists) return f;
  f.exists = true;
  f.text = file.text;
  SHMK_ASSIGN_OR_RETURN(f.doc, ParseDaemonJson(f.text, path));
  return f;
}

std::string Render(const Json& doc) { return DumpJson(doc, 2) + "\n"; }

// Sends SIGHUP to every dockerd whose --config-file is `daemon_json`.
bool ReloadDockerd(const std::string& daemon_json, Os& os) {
  Result<std::string> want_real = os.RealPath(daemon_json);
  std::string want = want_real.ok() ? *want_real : daemon_json;
  bool any = false;
  for (pid_t pid : FindProcessesByComm("dockerd")) {
    Result<std::vector<std::string>> argv = ProcCmdline(pid);
    if (!argv.ok()) continue;
    std::string cfg = FlagValue(*argv, "config-file");
    if (cfg.empty()) cfg = kDockerDaemonJson;
    Result<std::string> real = os.RealPath(cfg);
    if ((real.ok() ? *real : cfg) == want && ::kill(pid, SIGHUP) == 0) any = true;
  }
  return any;
}

}  // namespace

std::string DockerBackupPath(const std::string& daemon_json) { return BackupPath(daemon_json); }
std::string DockerAbsentMarkerPath(const std::string& daemon_json) { return AbsentMarkerPath(daemon_json); }

Json WithDockerRuntime(Json daemon, const DockerInstallOptions& opts) {
  Json entry = {{"path", opts.runtime_path}};
  if (!opts.runtime_config.empty()) entry["runtimeArgs"] = Json::array({"--config", opts.runtime_config});
  if (!daemon["runtimes"].is_object()) daemon["runtimes"] = Json::object();
  daemon["runtimes"][opts.runtime_name] = entry;
  if (opts.set_as_default) daemon["default-runtime"] = opts.runtime_name;
  return daemon;
}

Json WithoutDockerRuntime(Json daemon, const Json& original, const std::string& runtime_name) {
  if (daemon.contains("runtimes") && daemon["runtimes"].is_object()) {
    daemon["runtimes"].erase(runtime_name);
    bool had = original.is_object() && original.contains("runtimes");
    if (daemon["runtimes"].empty() && !had) daemon.erase("runtimes");
  }
  if (StringField(daemon, "default-runtime") == runtime_name) {
    if (original.is_object() && original.contains("default-runtime") && original["default-runtime"] != runtime_name) {
      daemon["default-runtime"] = original["default-runtime"];
    } else {
      daemon.erase("default-runtime");
    }
  }
  return daemon;
}

Result<ConfigChange> InstallDocker(const DockerInstallOptions& opts) {
  if (opts.runtime_path.empty() || opts.runtime_path[0] != '/') {
    return Status::Invalid("runtime path \"" + opts.runtime_path + "\" must be absolute");
  }
  SHMK_ASSIGN_OR_RETURN(DaemonFile f, ReadDaemonFile(opts.daemon_json));
  Json next = WithDockerRuntime(f.doc, opts);
  ConfigChange c;
  c.before = f.text;
  c.after = next == f.doc && f.exists ? f.text : Render(next);
  c.changed = !(next == f.doc && f.exists);
  if (!c.changed || opts.dry_run) return c;
  SHMK_RETURN_IF_ERROR(WriteBackupOnce(opts.daemon_json, f.exists, f.text).WithContext("back up " + opts.daemon_json));
  SHMK_RETURN_IF_ERROR(WriteFileAtomic(opts.daemon_json, c.after, 0644));
  c.reloaded = ReloadDockerd(opts.daemon_json, *Os::Default());
  return c;
}

Result<ConfigChange> UninstallDocker(const DockerInstallOptions& opts) {
  SHMK_ASSIGN_OR_RETURN(DaemonFile f, ReadDaemonFile(opts.daemon_json));
  std::string backup_path = DockerBackupPath(opts.daemon_json);
  bool was_absent = PathExists(DockerAbsentMarkerPath(opts.daemon_json));
  DaemonFile orig;
  if (PathExists(backup_path)) {
    SHMK_ASSIGN_OR_RETURN(orig, ReadDaemonFile(backup_path));
  }
  Json next = WithoutDockerRuntime(f.doc, orig.exists ? orig.doc : Json(), opts.runtime_name);
  ConfigChange c;
  c.before = f.text;
  c.after = f.text;
  if (next == f.doc) return c;  // nothing of ours is there
  c.changed = true;
  bool restore = (orig.exists && next == orig.doc) || (was_absent && next.empty());
  c.after = restore ? orig.text : Render(next);
  if (opts.dry_run) return c;
  if (restore && was_absent) {
    SHMK_RETURN_IF_ERROR(RemoveFile(opts.daemon_json));
  } else {
    SHMK_RETURN_IF_ERROR(WriteFileAtomic(opts.daemon_json, c.after, 0644));
  }
  c.reloaded = ReloadDockerd(opts.daemon_json, *Os::Default());
  // The change is applied: an error from here on says so.
  SHMK_RETURN_IF_ERROR(RemoveBackups(opts.daemon_json)
                           .WithContext(opts.daemon_json + " is restored" +
                                        (c.reloaded ? " and dockerd sent SIGHUP" : "") + ", but its backup remains"));
  return c;
}

}  // namespace shmkeeper

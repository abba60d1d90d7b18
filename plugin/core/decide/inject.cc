#include "decide/inject.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <filesystem>
#include <optional>

#include "base/fileutil.h"
#include "base/safe_path.h"

namespace shmkeeper {
namespace {

bool IsFalse(const std::optional<std::string>& v) { return v && (*v == "false" || *v == "0" || *v == "no"); }
bool IsTrue(const std::optional<std::string>& v) { return v && (*v == "true" || *v == "1" || *v == "yes"); }

InjectResult Skip(std::string why) { return {false, "skip: " + std::move(why), ""}; }

// The library to mount: inject.library if set, else next to the runtime or in
// its ../lib/shmkeeper; "" if that file is not there.
std::string LibraryPath(const Config& config, const std::string& runtime_dir) {
  std::vector<std::string> candidates = {config.inject.library};
  if (config.inject.library.empty()) {
    candidates = {runtime_dir + "/libshmkeeper-preload.so", runtime_dir + "/../lib/shmkeeper/libshmkeeper-preload.so"};
  }
  for (const std::string& p : candidates) {
    if (PathExists(p)) return p;
  }
  return "";
}

// glibc's dynamic loader, looked up inside the image only.
bool HasGlibcLoader(int root_fd) {
  for (const char* loader : {"lib64/ld-linux-x86-64.so.2", "lib/ld-linux-aarch64.so.1"}) {
    if (OpenInRoot(root_fd, loader, O_PATH).ok()) return true;
  }
  return false;
}

// Where the library and the event directory are mounted in the container: the
// first of these that no mount of the spec covers or reaches into.
constexpr const char* kMountDirs[] = {kPreloadDir, kPreloadFallbackDir};

bool Overlaps(const std::string& a, const std::string& b) {
  auto within = [](const std::string& x, const std::string& dir) {
    return x == dir || dir == "/" || x.starts_with(dir + "/");
  };
  return within(a, b) || within(b, a);
}

// "/run (bind from /srv/x)": a mount as the decision log names it.
std::string DescribeMount(const Json& m, const std::string& landing) {
  std::string dest = StringField(m, "destination");
  std::string out = dest;
  if (NormalizePath(dest) != landing) out += " (at " + landing + ")";
  std::string type = StringField(m, "type"), source = StringField(m, "source");
  return out + " (" + (type.empty() ? std::string("bind") : type) + (source.empty() ? "" : " from " + source) + ")";
}

// The first mount of the spec that lands on, above or below `dir` once the
// image's symlinks are resolved inside the rootfs; nullopt if none.
std::optional<std::string> MountOver(const Spec& spec, int root_fd, const std::string& host_root,
                                     const std::string& dir) {
  auto mounts = spec.doc().find("mounts");
  if (mounts == spec.doc().end() || !mounts->is_array()) return std::nullopt;
  for (const Json& m : *mounts) {
    std::string dest = StringField(m, "destination");
    if (dest.empty()) continue;
    std::string landing = LandingPath(root_fd, host_root, dest);
    if (Overlaps(NormalizePath(dest), dir) || Overlaps(landing, dir)) return DescribeMount(m, landing);
  }
  return std::nullopt;
}

// Creates the mount points in the image itself (as runc would, but refusing
// any symlink or non-directory on the way and at the last component), so runc
// finds them there and never creates anything elsewhere.
Status MakeMountPoints(int root_fd, const std::string& dir, bool events) {
  Result<UniqueFd> d = MakeDirsNoSymlinks(root_fd, dir);
  if (!d.ok()) return d.status();
  if (Status s = MakeFileNoSymlinks(d->get(), kPreloadFile); !s.ok()) return Status::Invalid(dir + "/" + s.message());
  if (!events) return Status::Ok();
  Result<UniqueFd> e = MakeDirsNoSymlinks(d->get(), kEventsDir);
  return e.ok() ? Status::Ok() : Status::Invalid(dir + e.status().message());
}

// kCheck: what MakeMountPoints would refuse, found without creating anything.
// A missing component ends the walk: the runtime creates the rest inside the
// rootfs, below a directory that is the image's own.
Status CheckMountPoints(int root_fd, const std::string& dir, bool events) {
  std::vector<std::pair<std::string, bool>> paths;  // relative path, must be a directory
  std::string at;
  for (size_t i = 1, next = 0; i < dir.size(); i = next + 1) {
    next = dir.find('/', i);
    if (next == std::string::npos) next = dir.size();
    at += (at.empty() ? "" : "/") + dir.substr(i, next - i);
    paths.emplace_back(at, true);
  }
  paths.emplace_back(at + "/" + kPreloadFile, false);
  if (events) paths.emplace_back(at + "/" + kEventsDir, true);
  for (const auto& [path, is_dir] : paths) {
    Result<UniqueFd> fd = OpenNoSymlinks(root_fd, path, O_PATH | O_NOFOLLOW);
    if (!fd.ok() && fd.status().err() == ENOENT) {
      if (is_dir) return Status::Ok();
      continue;
    }
    if (!fd.ok()) return Status::Invalid("/" + path + " is not a plain " + (is_dir ? "directory" : "file"));
    struct stat st {};
    if (::fstat(fd->get(), &st) != 0) return Status::FromErrno(errno, "/" + path);
    if (is_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
      return Status::Invalid("/" + path + " is not a plain " + (is_dir ? "directory" : "file"));
    }
  }
  return Status::Ok();
}

Json BindMount(const std::string& dest, const std::string& source, bool noexec) {
  Json opts = Json::array({"bind", "ro", "nosuid", "nodev"});
  if (noexec) opts.push_back("noexec");
  return {{"destination", dest}, {"type", "bind"}, {"source", source}, {"options", opts}};
}

void AppendEnvList(Spec* spec, const std::string& name, const std::string& value) {
  Json& env = spec->doc()["process"]["env"];
  if (!env.is_array()) env = Json::array();
  for (Json& e : env) {
    if (e.is_string() && e.get_ref<const std::string&>().starts_with(name + "=")) {
      std::string cur = e.get<std::string>().substr(name.size() + 1);
      e = name + "=" + (cur.empty() ? value : cur + ":" + value);
      return;
    }
  }
  env.push_back(name + "=" + value);
}

// The host directory holding the agent's event socket, "" if it is not one.
std::string EventsDir(const Config& config) {
  const std::string& events = config.agent.event_socket;
  size_t slash = events.rfind('/');
  std::string dir = slash == std::string::npos ? "" : events.substr(0, slash);
  struct stat st;
  if (dir.empty() || ::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return "";
  return dir;
}

// Whether the spec mounts this library already (a create retried on the same bundle).
bool AlreadyInjected(const Spec& spec, const std::string& library) {
  auto mounts = spec.doc().find("mounts");
  if (mounts == spec.doc().end() || !mounts->is_array()) return false;
  for (const Json& m : *mounts) {
    if (StringField(m, "source") == library &&
        NormalizePath(StringField(m, "destination")).ends_with(std::string("/") + kPreloadFile)) {
      return true;
    }
  }
  return false;
}

// Sets NAME=value in the process env, replacing every NAME= entry.
void SetEnv(Spec* spec, const std::string& name, const std::string& value) {
  Json& env = spec->doc()["process"]["env"];
  if (!env.is_array()) env = Json::array();
  Json kept = Json::array();
  for (const Json& e : env) {
    if (!(e.is_string() && e.get_ref<const std::string&>().starts_with(name + "="))) kept.push_back(e);
  }
  kept.push_back(name + "=" + value);
  env = std::move(kept);
}

// The reservation mode (annotation, then env, then policy), written into the
// env the library reads when the annotation or the policy decides. Returns
// what the decision log says: "" for no reservation.
std::string DecideReserve(Spec* spec, const Config& config) {
  std::string note;
  if (std::optional<std::string> a = spec->Annotation(kPreloadReserveAnnotation)) {
    if (IsTrue(a) || IsFalse(a)) {
      SetEnv(spec, kPreloadReserveEnv, IsTrue(a) ? "1" : "0");
      return IsTrue(a) ? std::string("annotation:") + kPreloadReserveAnnotation : "";
    }
    note = std::string("; ignored annotation ") + kPreloadReserveAnnotation + "=\"" + a->substr(0, 64) +
           "\" (true or false)";
  }
  if (std::optional<std::string> e = spec->Env(kPreloadReserveEnv)) {
    // The library reads it as it is: 1, true and yes reserve, anything else does not.
    if (IsTrue(e)) return std::string("env:") + kPreloadReserveEnv + note;
    if (IsFalse(e)) return note.empty() ? "" : "off" + note;
    note += std::string("; ") + kPreloadReserveEnv + "=\"" + e->substr(0, 64) + "\" read as off (1 or 0)";
    return "off" + note;
  }
  if (config.preload.reserve) {
    SetEnv(spec, kPreloadReserveEnv, "1");
    return "policy" + note;
  }
  return note.empty() ? "" : "off" + note;
}

}  // namespace

InjectResult InjectPreload(Spec* spec, const std::string& bundle, const Config& config, const std::string& runtime_dir,
                           MountPoints mount_points) {
  if (!config.inject.preload) return Skip("inject.preload is off");
  if (IsFalse(spec->Annotation(kInjectAnnotation))) return Skip("annotation shmkeeper.io/inject is false");
  if (IsFalse(spec->Env(kInjectEnv))) return Skip("SHMKEEPER_INJECT=0");
  std::string library = LibraryPath(config, runtime_dir);
  if (library.empty()) return Skip("libshmkeeper-preload.so not found on the host");
  if (AlreadyInjected(*spec, library)) return Skip("already injected");
  std::string root_path = StringField(spec->doc()["root"], "path");
  if (root_path.empty()) return Skip("the spec has no root.path");
  if (root_path[0] != '/') root_path = bundle + "/" + root_path;
  UniqueFd root_fd(::open(root_path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd.valid()) return Skip("cannot open the rootfs " + root_path);
  if (!HasGlibcLoader(root_fd.get())) return Skip("the image has no glibc dynamic loader (static or musl)");
  std::error_code ec;
  std::string host_root = std::filesystem::read_symlink("/proc/self/fd/" + std::to_string(root_fd.get()), ec);
  if (ec) return Skip("cannot resolve the rootfs " + root_path);
  std::string events_dir = EventsDir(config);
  std::string dir, covered;
  for (const char* candidate : kMountDirs) {
    std::optional<std::string> over = MountOver(*spec, root_fd.get(), host_root, candidate);
    if (!over) {
      dir = candidate;
      break;
    }
    covered += (covered.empty() ? "" : "; ") + std::string(candidate) + " is under the container's mount " + *over;
  }
  if (dir.empty()) return Skip(covered + ": nothing is created inside a mount");
  if (Status s = mount_points == MountPoints::kCreate ? MakeMountPoints(root_fd.get(), dir, !events_dir.empty())
                                                      : CheckMountPoints(root_fd.get(), dir, !events_dir.empty());
      !s.ok()) {
    return Skip("refused: " + s.message());
  }
  // First in the list: the mount points are made in the image, before any of
  // the container's own mounts is in place (none covers them, see MountOver).
  Json& mounts = spec->doc()["mounts"];
  if (!mounts.is_array()) mounts = Json::array();
  std::string preload = dir + "/" + kPreloadFile;
  Json ours = Json::array({BindMount(preload, library, /*noexec=*/false)});
  if (!events_dir.empty()) {
    ours.push_back(BindMount(dir + "/" + kEventsDir, events_dir, /*noexec=*/true));
    std::string socket = config.agent.event_socket.substr(events_dir.size());
    spec->doc()["process"]["env"].push_back("SHMKEEPER_EVENT_SOCKET=" + dir + "/" + kEventsDir + socket);
  }
  mounts.insert(mounts.begin(), ours.begin(), ours.end());
  AppendEnvList(spec, "LD_PRELOAD", preload);
  std::string reserve = DecideReserve(spec, config);
  return {true, dir == kPreloadDir ? "preload" : "preload at " + dir + " (" + covered + ")", reserve};
}

}  // namespace shmkeeper

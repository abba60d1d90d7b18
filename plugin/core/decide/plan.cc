#include "decide/plan.h"

#include <array>
#include <charconv>
#include <optional>

#include "base/bytes.h"

namespace shmkeeper {
namespace {

ShmTarget Unmanaged(std::string why) {
  ShmTarget t;
  t.why = std::move(why);
  return t;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool IsBind(const Json& mount) {
  if (StringField(mount, "type") == "bind") return true;
  const Json* opts = mount.contains("options") ? &mount["options"] : nullptr;
  if (!opts || !opts->is_array()) return false;
  for (const Json& o : *opts) {
    if (o == "bind" || o == "rbind") return true;
  }
  return false;
}

// Whether `source` is the per-container (or per-pod) shm tmpfs the engine made
// for this very container: Docker --ipc=shareable, the containerd CRI sandbox,
// or the CRI-O infra container.
bool OwnsShmSource(const Spec& spec, const std::string& source, const std::string& id) {
  if (!id.empty() && EndsWith(source, "/containers/" + id + "/mounts/shm")) return true;
  // podman (libpod): <storage>/<driver>-containers/<id>/userdata/shm.
  if (!id.empty() && EndsWith(source, "-containers/" + id + "/userdata/shm")) return true;
  if (spec.Annotation("io.kubernetes.cri.container-type") == "sandbox") {
    std::string sandbox = spec.Annotation("io.kubernetes.cri.sandbox-id").value_or(id);
    if (!sandbox.empty() && EndsWith(source, "/sandboxes/" + sandbox + "/shm")) return true;
  }
  if (spec.Annotation("io.kubernetes.cri-o.ContainerType") == "sandbox" &&
      spec.Annotation("io.kubernetes.cri-o.ShmPath") == source) {
    return true;
  }
  return false;
}

Result<ShmTarget> ClassifyHostTmpfs(const Spec& spec, const std::string& source, const std::string& id, Os& os) {
  if (source == "/dev/shm") return Unmanaged("/dev/shm is the host's");
  if (!OwnsShmSource(spec, source, id)) {
    if (spec.Annotation("io.kubernetes.cri.container-type") == "container" ||
        spec.Annotation("io.kubernetes.cri-o.ContainerType") == "container") {
      return Unmanaged("/dev/shm is the pod's (" + source + "), sized when the pod sandbox was created");
    }
    return Unmanaged("/dev/shm is a bind mount of " + source +
                     ", which this container does not own (another container's or a user mount)");
  }
  SHMK_ASSIGN_OR_RETURN(std::string real, os.RealPath(source));
  if (real != source) return Unmanaged("shm source " + source + " goes through a symlink to " + real);
  SHMK_ASSIGN_OR_RETURN(FsInfo fs, os.StatFs(source));
  if (!fs.is_tmpfs || !fs.is_mount_root) return Unmanaged("shm source " + source + " is not a tmpfs mount");
  ShmTarget t;
  t.shape = ShmShape::kHostTmpfs;
  t.host_path = source;
  t.st_flags = fs.st_flags;
  t.current_bytes = fs.size_bytes;
  t.used_bytes = fs.used_bytes;
  return t;
}

using Request = ShmRequest;

}  // namespace

int64_t EngineDefaultShmBytes(const Spec& spec) {
  return spec.Annotation("io.container.manager") == "libpod" ? kPodmanDefaultShmBytes : kEngineDefaultShmBytes;
}

Result<std::optional<ShmRequest>> AnnotationShmRequest(const Spec& spec) {
  static constexpr std::array<const char*, 3> kAnnotations = {kShmSizeAnnotation, kCrioShmSizeAnnotation,
                                                              kCrioLegacyShmSizeAnnotation};
  for (const char* key : kAnnotations) {
    if (std::optional<std::string> v = spec.Annotation(key)) {
      Result<int64_t> bytes = ParseSize(*v);
      if (!bytes.ok()) return bytes.status().WithContext(std::string("annotation ") + key);
      return std::optional<Request>(Request{*bytes, std::string("annotation:") + key, *v});
    }
  }
  return std::optional<Request>();
}

Result<std::optional<ShmRequest>> EnvShmRequest(const Spec& spec) {
  if (std::optional<std::string> v = spec.Env(kShmSizeEnv)) {
    Result<int64_t> bytes = ParseSize(*v);
    if (!bytes.ok()) return bytes.status().WithContext(std::string("env ") + kShmSizeEnv);
    return std::optional<Request>(Request{*bytes, std::string("env:") + kShmSizeEnv, *v});
  }
  return std::optional<Request>();
}

// The size the container's own spec asks for: an annotation, else the env.
Result<std::optional<ShmRequest>> UserShmRequest(const Spec& spec) {
  SHMK_ASSIGN_OR_RETURN(std::optional<Request> annotation, AnnotationShmRequest(spec));
  if (annotation) return annotation;
  return EnvShmRequest(spec);
}

namespace {

// A positive decimal byte count, nothing else.
std::optional<int64_t> PositiveBytes(std::string_view text) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v <= 0) return std::nullopt;
  return v;
}

// memory_limit_in_bytes of a CRI LinuxContainerResources in Go's JSON.
std::optional<int64_t> CrioPodMemory(const std::string& text) {
  Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  int64_t v = IntegerField<int64_t>(doc, "memory_limit_in_bytes", 0);
  return v > 0 ? std::optional<int64_t>(v) : std::nullopt;
}

}  // namespace

std::optional<MemoryLimit> SpecMemoryLimit(const Spec& spec) {
  if (std::optional<int64_t> v = spec.MemoryLimit()) return MemoryLimit{*v, "spec:linux.resources.memory.limit"};
  if (std::optional<std::string> a = spec.Annotation(kContainerdSandboxMemoryAnnotation)) {
    if (std::optional<int64_t> v = PositiveBytes(*a)) {
      return MemoryLimit{*v, std::string("annotation:") + kContainerdSandboxMemoryAnnotation};
    }
  }
  for (const char* key : {kCrioPodResourcesAnnotation, kCrioLegacyPodResourcesAnnotation}) {
    if (std::optional<std::string> a = spec.Annotation(key)) {
      if (std::optional<int64_t> v = CrioPodMemory(*a)) return MemoryLimit{*v, std::string("annotation:") + key};
    }
  }
  return std::nullopt;
}

namespace {

Request PolicyRequest(const Spec& spec, const Config& config, Os& os, const std::optional<MemoryLimit>& cri_limit,
                      MemoryLimit* used) {
  if (config.shm.default_bytes) {
    return Request{*config.shm.default_bytes, "policy", FormatSize(*config.shm.default_bytes)};
  }
  std::optional<MemoryLimit> limit = SpecMemoryLimit(spec);
  if (!limit && cri_limit && cri_limit->bytes > 0) limit = cri_limit;
  if (limit) {
    *used = *limit;
    return Request{limit->bytes, "policy", "auto"};
  }
  return Request{os.HostMemoryBytes() / 2, "policy", "auto"};
}

std::string Describe(const Request& r) {
  std::string where = r.source;
  if (where.starts_with("annotation:")) where = "annotation " + where.substr(11);
  if (where.starts_with("env:")) where = "env " + where.substr(4);
  return where + "=\"" + r.raw + "\" (" + FormatSize(r.bytes) + ")";
}

Status CheckMax(const Config& config, Os& os, Request* r, bool* clamped) {
  int64_t max = config.shm.max_bytes.value_or(os.HostMemoryBytes());
  if (r->bytes <= max) return Status::Ok();
  if (r->source == "policy" || config.shm.over_max == OverMax::kClamp) {
    r->bytes = max;
    *clamped = true;
    return Status::Ok();
  }
  return Status::Invalid("shm size " + Describe(*r) + " is over the node's shm.max " + FormatSize(max) +
                         " (shm.overMax: reject)");
}

}  // namespace

Result<ShmTarget> ClassifyShm(const Spec& spec, const std::string& container_id, Os& os) {
  if (!spec.Namespace("ipc")) return Unmanaged("the container shares the host IPC namespace");
  std::optional<size_t> idx = spec.FindMount("/dev/shm");
  if (!idx) return Unmanaged("the spec has no /dev/shm mount");
  const Json& m = spec.Mount(*idx);
  std::string source = StringField(m, "source");
  if (IsBind(m)) return ClassifyHostTmpfs(spec, source, container_id, os);
  if (StringField(m, "type") != "tmpfs") return Unmanaged("/dev/shm has mount type " + StringField(m, "type", "?"));
  if (source != "shm") return Unmanaged("/dev/shm is a user-supplied tmpfs (source \"" + source + "\")");
  ShmTarget t;
  t.shape = ShmShape::kSpecTmpfs;
  t.mount_index = *idx;
  // A tmpfs without size= gets half of RAM from the kernel.
  t.current_bytes = RoundUpToPage(spec.MountSizeOption(*idx).value_or(os.HostMemoryBytes() / 2), os.PageSize());
  return t;
}

Result<ShmPlan> PlanShm(const Spec& spec, const Config& config, const std::string& container_id, Os& os,
                        const std::optional<MemoryLimit>& cri_limit) {
  ShmPlan plan;
  SHMK_ASSIGN_OR_RETURN(plan.target, ClassifyShm(spec, container_id, os));
  plan.old_bytes = plan.target.current_bytes;
  if (plan.target.shape == ShmShape::kUnmanaged) {
    plan.reason = plan.target.why;
    return plan;
  }
  // Precedence (docs/configuration.md#precedence): an explicit per-container
  // request (annotation; --shm-size / compose shm_size, seen as a size other
  // than the engine's default) beats SHMKEEPER_SHM_SIZE (which an image's ENV
  // can set), which beats the node policy. The env is read only when nothing
  // explicit was asked for, so a bad value in an image cannot refuse it.
  SHMK_ASSIGN_OR_RETURN(std::optional<Request> annotation, AnnotationShmRequest(spec));
  Request req;
  std::string overridden;
  if (annotation) {
    req = *annotation;
  } else if (plan.target.current_bytes != EngineDefaultShmBytes(spec)) {
    req = Request{plan.target.current_bytes, "engine", FormatSize(plan.target.current_bytes)};
  } else {
    SHMK_ASSIGN_OR_RETURN(std::optional<Request> env, EnvShmRequest(spec));
    req = env ? *env : PolicyRequest(spec, config, os, cri_limit, &plan.limit);
  }
  if (req.source.starts_with("annotation:") || req.source == "engine") {
    if (std::optional<std::string> v = spec.Env(kShmSizeEnv)) {
      overridden = std::string(kShmSizeEnv) + "=\"" + *v +
                   "\" ignored: " + (req.source == "engine" ? "--shm-size/shm_size" : "the annotation") +
                   " is explicit";
    }
  }
  SHMK_RETURN_IF_ERROR(CheckMax(config, os, &req, &plan.clamped));
  req.bytes = RoundUpToPage(req.bytes, os.PageSize());  // what the tmpfs will report
  if (plan.target.shape == ShmShape::kHostTmpfs && req.bytes < plan.target.used_bytes) {
    return Status::Invalid("shm size " + Describe(req) + " is smaller than the " + FormatSize(plan.target.used_bytes) +
                           " already used in " + plan.target.host_path);
  }
  plan.source = req.source;
  plan.requested = req.raw;
  plan.new_bytes = req.bytes;
  plan.action = plan.new_bytes == plan.old_bytes ? ShmAction::kKeep : ShmAction::kResize;
  plan.reason = plan.clamped ? "clamped to shm.max" : "";
  if (!overridden.empty()) plan.reason += (plan.reason.empty() ? "" : "; ") + overridden;
  return plan;
}

Status ApplyShm(const ShmPlan& plan, Spec* spec, Os& os) {
  if (plan.action != ShmAction::kResize) return Status::Ok();
  switch (plan.target.shape) {
    case ShmShape::kSpecTmpfs:
      spec->SetMountSizeOption(plan.target.mount_index, plan.new_bytes);
      return Status::Ok();
    case ShmShape::kHostTmpfs:
      return os.RemountTmpfs(plan.target.host_path, plan.new_bytes, plan.target.st_flags);
    case ShmShape::kUnmanaged:
      break;
  }
  return Status::Internal("resize planned for an unmanaged /dev/shm");
}

const char* ShmActionName(ShmAction action) {
  switch (action) {
    case ShmAction::kResize:
      return "resize";
    case ShmAction::kKeep:
      return "keep";
    case ShmAction::kSkip:
      return "skip";
  }
  return "?";
}

}  // namespace shmkeeper

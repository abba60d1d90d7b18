#include "nri_decide.h"

#include <sys/stat.h>

#include "base/json.h"
#include "decide/decision_log.h"

namespace shmkeeper::agent {
namespace api = ::nri::pkg::api::v1alpha1;
namespace {

// The pod's memory limit as NRI tells it: the kubelet's pod-level resources
// (LinuxPodSandbox.pod_resources, containerd 2.x), else the container's own
// limit (older runtimes fill only that).
std::optional<MemoryLimit> NriMemoryLimit(const api::PodSandbox& pod, const api::Container& container) {
  if (pod.has_linux() && pod.linux().has_pod_resources() && pod.linux().pod_resources().has_memory() &&
      pod.linux().pod_resources().memory().has_limit() && pod.linux().pod_resources().memory().limit().value() > 0) {
    return MemoryLimit{pod.linux().pod_resources().memory().limit().value(), "nri:pod_resources.memory.limit"};
  }
  if (container.has_linux() && container.linux().has_resources() && container.linux().resources().has_memory() &&
      container.linux().resources().memory().has_limit() &&
      container.linux().resources().memory().limit().value() > 0) {
    return MemoryLimit{container.linux().resources().memory().limit().value(),
                       "nri:container.linux.resources.memory.limit"};
  }
  return std::nullopt;
}

}  // namespace

std::string SandboxBundle(const std::string& shm_source, const std::string& pod_id) {
  const std::string tail = "/io.containerd.grpc.v1.cri/sandboxes/" + pod_id + "/shm";
  if (pod_id.empty() || shm_source.size() <= tail.size() ||
      shm_source.compare(shm_source.size() - tail.size(), tail.size(), tail) != 0) {
    return "";
  }
  std::string bundle =
      shm_source.substr(0, shm_source.size() - tail.size()) + "/io.containerd.runtime.v2.task/k8s.io/" + pod_id;
  struct stat st {};
  if (::lstat(bundle.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return "";
  return bundle;
}

Result<Spec> NriSandboxSpec(const api::PodSandbox& pod, const api::Container& container) {
  Json doc = Json::object();
  Json ann = Json::object();
  for (const auto& [k, v] : pod.annotations()) ann[k] = v;
  for (const auto& [k, v] : container.annotations()) {
    if (!ann.contains(k)) ann[k] = v;
  }
  // Planned as containerd's sandbox, which owns the pod's shm tmpfs.
  ann["io.kubernetes.cri.container-type"] = "sandbox";
  ann["io.kubernetes.cri.sandbox-id"] = pod.id();
  ann.erase(kContainerdSandboxMemoryAnnotation);
  doc["annotations"] = std::move(ann);
  Json mounts = Json::array();
  for (const api::Mount& m : container.mounts()) {
    if (m.destination() != "/dev/shm") continue;
    Json jm = {{"destination", m.destination()}, {"type", m.type()}, {"source", m.source()}};
    jm["options"] = Json::array();
    for (const std::string& o : m.options()) jm["options"].push_back(o);
    mounts.push_back(std::move(jm));
  }
  doc["mounts"] = std::move(mounts);
  Json namespaces = Json::array();
  if (container.has_linux()) {
    for (const api::LinuxNamespace& ns : container.linux().namespaces()) {
      namespaces.push_back({{"type", ns.type()}, {"path", ns.path()}});
    }
  }
  doc["linux"] = {{"namespaces", std::move(namespaces)}};
  return Spec::Parse(DumpJson(doc), "NRI CreateContainer " + container.id());
}

Result<NriDecision> DecideCreateContainer(const api::PodSandbox& pod, const api::Container& container,
                                          const Config& config, Os& os, NriSizer sizer) {
  const char* by = sizer == NriSizer::kCatchUp ? kNriLate : "nri";
  SHMK_ASSIGN_OR_RETURN(Spec spec, NriSandboxSpec(pod, container));
  NriDecision d;
  Result<ShmPlan> plan = PlanShm(spec, config, pod.id(), os, NriMemoryLimit(pod, container));
  if (!plan.ok()) {
    if (plan.status().code() != Code::kInvalidArgument) return plan.status();
    d.refusal = "shmkeeper: " + plan.status().message();
    (void)AppendDecisionLine(config,
                             DecisionFailureRecord(container.id(), "error", by,
                                                   sizer == NriSizer::kCatchUp ? "keep" : "refuse", plan.status()),
                             LogLevel::kError);
    return d;
  }
  d.plan = *plan;
  SHMK_RETURN_IF_ERROR(ApplyShm(d.plan, &spec, os));
  if (d.plan.action == ShmAction::kResize) {
    d.record_bundle = SandboxBundle(d.plan.target.host_path, pod.id());
    // The record is what `shmkeeper pods` shows; a pod without one is still sized.
    if (d.record_bundle.empty()) {
      d.record_error = "the sandbox's bundle is not in the agent's view";
    } else if (Status w = WriteSizingRecord(d.record_bundle, SizingRecordOf(d.plan, by)); !w.ok()) {
      d.record_bundle.clear();
      d.record_error = w.message();
    }
  }
  (void)AppendDecisionLine(config, DecisionRecord(container.id(), d.plan, by), LogLevel::kInfo);
  return d;
}

}  // namespace shmkeeper::agent

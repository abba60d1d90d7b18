#include "node/reconcile.h"

#include "decide/decision_log.h"

namespace shmkeeper {
namespace {

// The sandbox's spec as the runtime got it, with the CRI's pod annotations
// laid over it (the CRI's are the kubelet's, the spec's may be a subset). The
// runtime's own keys (io.kubernetes.cri.*, its sandbox-memory among them) stay
// as the runtime wrote them.
Result<Spec> SandboxSpec(const CriSandbox& sb, const ContainerRecord& c) {
  SHMK_ASSIGN_OR_RETURN(Spec spec, Spec::Load(c.bundle));
  Json& ann = spec.doc()["annotations"];
  if (!ann.is_object()) ann = Json::object();
  for (const auto& [k, v] : sb.annotations) {
    if (!k.starts_with("io.kubernetes.cri.") || !ann.contains(k)) ann[k] = v;
  }
  return spec;
}

ReconcileResult ReconcileOne(const CriSandbox& sb, const ContainerRecord& c, const Config& config, Os& os) {
  ReconcileResult r;
  r.sandbox_id = sb.id;
  r.ns = sb.ns;
  r.name = sb.name;
  Result<Spec> spec = SandboxSpec(sb, c);
  if (!spec.ok()) {
    r.status = spec.status();
    return r;
  }
  Result<ShmPlan> plan = PlanShm(*spec, config, c.id, os, sb.memory_limit);
  if (!plan.ok()) {
    r.status = plan.status();
    return r;
  }
  r.plan = *plan;
  if (plan->action != ShmAction::kResize) return r;
  r.status = ApplyShm(*plan, &*spec, os);
  if (r.status.ok()) r.record = WriteSizingRecord(c.bundle, SizingRecordOf(*plan, "reconcile"));
  return r;
}

}  // namespace

std::optional<MemoryLimit> MemoryLimitFromSandboxInfo(const std::string& info_json) {
  Json info = Json::parse(info_json, nullptr, /*allow_exceptions=*/false);
  if (!info.is_object()) return std::nullopt;
  constexpr const char* kSource = "cri:PodSandboxStatus";
  Json::json_pointer kubelet("/config/linux/resources");
  if (info.contains(kubelet)) {
    int64_t v = IntegerField<int64_t>(info.at(kubelet), "memory_limit_in_bytes", 0);
    if (v > 0) return MemoryLimit{v, kSource};
  }
  if (!info.contains("runtimeSpec") || !info["runtimeSpec"].is_object()) return std::nullopt;
  Result<Spec> spec = Spec::Parse(DumpJson(info["runtimeSpec"]), "PodSandboxStatus runtimeSpec");
  if (!spec.ok()) return std::nullopt;
  std::optional<MemoryLimit> limit = SpecMemoryLimit(*spec);
  if (limit) limit->source = kSource;
  return limit;
}

std::vector<ReconcileResult> ReconcileSandboxes(const std::vector<CriSandbox>& sandboxes,
                                                const std::vector<ContainerRecord>& containers, const Config& config,
                                                Os& os) {
  std::map<std::string, const ContainerRecord*> by_id;
  for (const ContainerRecord& c : containers) by_id[c.id] = &c;
  std::vector<ReconcileResult> out;
  for (const CriSandbox& sb : sandboxes) {
    auto it = by_id.find(sb.id);
    if (!sb.ready || it == by_id.end() || it->second->bundle.empty()) continue;
    out.push_back(ReconcileOne(sb, *it->second, config, os));
  }
  return out;
}

void LabelPodsFromCri(const std::vector<CriSandbox>& sandboxes, std::vector<PodRecord>* pods) {
  if (sandboxes.empty()) return;
  std::map<std::string, const CriSandbox*> by_uid, by_name;
  for (const CriSandbox& sb : sandboxes) {
    if (!sb.uid.empty()) by_uid[sb.uid] = &sb;
    if (sb.ready) by_name[sb.ns + "/" + sb.name] = &sb;
  }
  for (PodRecord& p : *pods) {
    if (p.key.kind != PodKind::kKubernetes) continue;
    const CriSandbox* sb = nullptr;
    if (auto it = by_uid.find(p.key.uid); it != by_uid.end()) {
      sb = it->second;
    } else if (auto n = by_name.find(p.key.ns + "/" + p.key.name); n != by_name.end()) {
      sb = n->second;
    }
    if (sb) p.labels.insert(sb->labels.begin(), sb->labels.end());
  }
}

}  // namespace shmkeeper

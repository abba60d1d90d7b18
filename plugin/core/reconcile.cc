#include "shmkeeper/reconcile.h"

#include "shmkeeper/decision_log.h"

namespace shmkeeper {
namespace {

// The sandbox's spec as the runtime got it, with the CRI's pod annotations
// laid over it (the CRI's are the kubelet's, the spec's may be a subset).
Result<Spec> SandboxSpec(const CriSandbox& sb, const ContainerRecord& c) {
  SHMK_ASSIGN_OR_RETURN(Spec spec, Spec::Load(c.bundle));
  Json& ann = spec.doc()["annotations"];
  if (!ann.is_object()) ann = Json::object();
  for (const auto& [k, v] : sb.annotations) ann[k] = v;
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
  Result<ShmPlan> plan = PlanShm(*spec, config, c.id, os);
  if (!plan.ok()) {
    r.status = plan.status();
    return r;
  }
  r.plan = *plan;
  if (plan->action != ShmAction::kResize) return r;
  r.status = ApplyShm(*plan, &*spec, os);
  if (r.status.ok()) (void)WriteSizingRecord(c.bundle, SizingRecordOf(*plan, "reconcile"));
  return r;
}

}  // namespace

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

}  // namespace shmkeeper

#include "nri_catchup.h"

#include <map>
#include <optional>

#include "decide/decision_log.h"
#include "nri_decide.h"

namespace shmkeeper::agent {
namespace api = ::nri::pkg::api::v1alpha1;
namespace {

bool Live(const api::Container& c) {
  return c.state() == api::CONTAINER_CREATED || c.state() == api::CONTAINER_RUNNING;
}

bool HasShmMount(const api::Container& c) {
  for (const api::Mount& m : c.mounts()) {
    if (m.destination() == "/dev/shm") return true;
  }
  return false;
}

// The sandbox's bundle where the sizing record is (nri_decide.h), from the
// container's /dev/shm source; "" for another layout.
std::string RecordBundle(const api::Container& c, const std::string& pod_id) {
  for (const api::Mount& m : c.mounts()) {
    if (m.destination() == "/dev/shm") return SandboxBundle(m.source(), pod_id);
  }
  return "";
}

bool SizedByNri(const std::string& bundle) {
  if (bundle.empty()) return false;
  std::optional<SizingRecord> rec = ReadSizingRecord(bundle);
  return rec && (rec->by == "nri" || rec->by == kNriLate);
}

std::optional<NriCatchUp> CatchUpOne(const api::PodSandbox& pod, const api::Container& c, const Config& config,
                                     Os& os) {
  NriCatchUp out;
  out.pod_id = pod.id();
  out.who = pod.namespace_() + "/" + pod.name();
  Result<NriDecision> d = DecideCreateContainer(pod, c, config, os, NriSizer::kCatchUp);
  if (!d.ok()) {
    out.outcome = "failed";
    out.message = d.status().message();
    return out;
  }
  if (!d->refusal.empty()) {
    out.outcome = "refused";
    out.message = d->refusal;
    return out;
  }
  if (d->plan.action != ShmAction::kResize) return std::nullopt;  // sized already, or not the sandbox's tmpfs
  out.outcome = "resized";
  out.plan = d->plan;
  out.message = "/dev/shm " + std::to_string(d->plan.old_bytes) + " -> " + std::to_string(d->plan.new_bytes) +
                " bytes (" + d->plan.source + "), after its first process started";
  if (!d->record_error.empty()) out.message += "; no sizing record: " + d->record_error;
  return out;
}

}  // namespace

std::vector<NriCatchUp> CatchUpPods(const api::SynchronizeRequest& sync, const Config& config, Os& os) {
  // The first live container of each pod with a /dev/shm mount: the pod's
  // tmpfs is one, shared by all of them.
  std::map<std::string, const api::Container*> first;
  for (const api::Container& c : sync.containers()) {
    if (Live(c) && HasShmMount(c)) first.emplace(c.pod_sandbox_id(), &c);
  }
  std::vector<NriCatchUp> out;
  for (const api::PodSandbox& pod : sync.pods()) {
    auto it = first.find(pod.id());
    if (it == first.end() || SizedByNri(RecordBundle(*it->second, pod.id()))) continue;
    if (std::optional<NriCatchUp> r = CatchUpOne(pod, *it->second, config, os)) out.push_back(std::move(*r));
  }
  return out;
}

}  // namespace shmkeeper::agent

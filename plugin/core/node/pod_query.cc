#include "node/pod_query.h"

#include "node/selectors.h"

namespace shmkeeper {
namespace {

bool PodMatches(const PodKey& k, const std::string& ns, const std::string& pod) {
  if (!ns.empty() && k.ns != ns) return false;
  return pod.empty() || k.name == pod || k.uid == pod;
}

}  // namespace

std::string PodName(const PodKey& k) { return k.ns.empty() ? k.name : k.ns + "/" + k.name; }

Result<std::vector<PodRecord>> QueryPods(const NodeSnapshot* snap, const PodFilter& f) {
  SHMK_ASSIGN_OR_RETURN(std::vector<SelectorTerm> terms, ParseSelector(f.selector));
  std::vector<PodRecord> out;
  if (!snap) return Status::Precondition("the first scan has not finished");
  for (const PodRecord& p : snap->pods) {
    if (!f.ns.empty() && p.key.ns != f.ns) continue;
    if (f.only_with_leaks && p.leaked_bytes == 0) continue;
    if (!MatchesSelector(p, terms)) continue;
    out.push_back(p);
  }
  return out;
}

Result<PodRecord> QueryPod(const NodeSnapshot* snap, const std::string& uid, const std::string& name,
                           const std::string& container_id) {
  if (!snap) return Status::Precondition("the first scan has not finished");
  if (uid.empty() && name.empty() && container_id.empty()) {
    return Status::Invalid("give a pod uid, a namespace/name, or a container id");
  }
  if (!container_id.empty() && container_id.size() < 4) {
    return Status::Invalid("container id prefix \"" + container_id + "\" is shorter than 4 characters");
  }
  std::vector<const PodRecord*> hits;
  for (const PodRecord& p : snap->pods) {
    bool hit = (!uid.empty() && p.key.uid == uid) || (!name.empty() && PodName(p.key) == name);
    for (const ContainerRecord& c : p.containers) {
      if (!container_id.empty() && c.id.starts_with(container_id)) hit = true;
    }
    if (hit) hits.push_back(&p);
  }
  std::string what = !uid.empty() ? "uid " + uid : !name.empty() ? "name " + name : "container " + container_id;
  if (hits.empty()) return Status::NotFound("no pod with " + what);
  if (hits.size() > 1) return Status::Invalid(what + " matches " + std::to_string(hits.size()) + " pods");
  return *hits.front();
}

std::vector<LeakRecord> QueryLeaks(const NodeSnapshot* snap, const std::string& ns, const std::string& pod) {
  std::vector<LeakRecord> out;
  if (!snap) return out;
  for (const LeakRecord& l : snap->leaks) {
    if (PodMatches(l.pod, ns, pod)) out.push_back(l);
  }
  return out;
}

}  // namespace shmkeeper

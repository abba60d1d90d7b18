#include "node/metrics.h"

#include <sstream>

#include "base/status.h"
#include "node/exposition.h"
#include "shmkeeper/version.h"

namespace shmkeeper {

namespace {

// A label value as exposition text: valid UTF-8 (bytes that are not: the
// text \xNN, as the gRPC API shows them), backslash, quote and newline escaped.
std::string Escape(const std::string& v) {
  std::string out;
  for (char c : EscapeInvalidUtf8(v)) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string PodLabels(const PodKey& k) {
  return "namespace=\"" + Escape(k.ns) + "\",pod=\"" + Escape(k.name) + "\",uid=\"" + Escape(k.uid) + "\",kind=\"" +
         PodKindName(k.kind) + "\"";
}

template <typename Help>
void RenderNriMetrics(const NriState& n, Help& help, std::ostringstream& o) {
  if (n.socket.empty()) return;  // agent.nri.socket off: no series
  help("shmkeeper_nri_connected", "gauge",
       "1 while the agent is registered as an NRI plugin with the runtime (agent.nri.socket).");
  o << "shmkeeper_nri_connected{runtime=\"" << Escape(n.runtime_name) << "\",version=\"" << Escape(n.runtime_version)
    << "\"} " << (n.connected ? 1 : 0) << "\n";
  help("shmkeeper_nri_connections_total", "counter",
       "NRI registrations that succeeded (the first, then one per reconnection after the runtime restarted).");
  o << "shmkeeper_nri_connections_total " << n.connections << "\n";
  help("shmkeeper_nri_connect_failures_total", "counter", "NRI connects or registrations that failed.");
  o << "shmkeeper_nri_connect_failures_total " << n.connect_failures << "\n";
  help("shmkeeper_nri_decisions_total", "counter",
       "CreateContainer calls answered with a decision, by action (resize, keep, skip).");
  for (const char* action : {"resize", "keep", "skip"}) {
    auto it = n.decisions.find(action);
    o << "shmkeeper_nri_decisions_total{action=\"" << action << "\"} " << (it == n.decisions.end() ? 0 : it->second)
      << "\n";
  }
  help("shmkeeper_nri_refusals_total", "counter",
       "CreateContainer calls refused (a bad size): the container fails to create with the wrapper's reason.");
  o << "shmkeeper_nri_refusals_total " << n.refusals << "\n";
  help("shmkeeper_nri_failures_total", "counter",
       "CreateContainer calls that failed inside the agent, answered per onInternalError (no adjustment, or refused).");
  o << "shmkeeper_nri_failures_total " << n.failures << "\n";
  help("shmkeeper_nri_late_total", "counter",
       "Pods created while the agent was away (stopped, restarting, too slow for the runtime's timeout), caught up "
       "at a (re)connection, by outcome: resized (after their first process started: sized by nri-late), refused "
       "(a bad size, left as it is), failed.");
  for (const char* outcome : {"resized", "refused", "failed"}) {
    auto it = n.late.find(outcome);
    o << "shmkeeper_nri_late_total{outcome=\"" << outcome << "\"} " << (it == n.late.end() ? 0 : it->second) << "\n";
  }
  help("shmkeeper_nri_abandoned_total", "counter",
       "CreateContainer calls the runtime stopped waiting for (its plugin request timeout): not decided; the pod is "
       "caught up at the next connection.");
  o << "shmkeeper_nri_abandoned_total " << n.abandoned << "\n";
}

}  // namespace

std::string RenderMetrics(const NodeSnapshot* snap, const Agent& agent) {
  std::ostringstream o;
  auto help = [&](const char* name, const char* type, const char* text) {
    o << "# HELP " << name << " " << text << "\n# TYPE " << name << " " << type << "\n";
  };
  help("shmkeeper_build_info", "gauge", "Always 1; the agent's version and the commit it was built from.");
  o << "shmkeeper_build_info{version=\"" << Escape(SHMKEEPER_VERSION) << "\",commit=\"" << Escape(SHMKEEPER_COMMIT)
    << "\"} 1\n";
  ConfigFileState cfg = agent.config_file_state();
  help("shmkeeper_config_valid", "gauge",
       "1 when the policy file parsed at the last load or reload (SIGHUP); 0: it is invalid and the previous policy "
       "runs on.");
  o << "shmkeeper_config_valid " << (cfg.valid ? 1 : 0) << "\n";
  help("shmkeeper_config_last_reload_success_timestamp_seconds", "gauge", "Unix time the running policy was read.");
  o << "shmkeeper_config_last_reload_success_timestamp_seconds "
    << PromFloat(std::chrono::duration<double>(cfg.loaded.time_since_epoch()).count()) << "\n";
  help("shmkeeper_up", "gauge", "1 once the agent has completed a scan.");
  o << "shmkeeper_up " << (snap ? 1 : 0) << "\n";
  help("shmkeeper_reclaimed_segments_total", "counter", "Segments reclaimed by the agent.");
  o << "shmkeeper_reclaimed_segments_total " << agent.reclaimed_total() << "\n";
  help("shmkeeper_reclaimed_bytes_total", "counter", "Bytes freed by reclaim.");
  o << "shmkeeper_reclaimed_bytes_total " << agent.reclaimed_bytes_total() << "\n";
  AgentCounters c = agent.counters();
  help("shmkeeper_event_datagrams_rejected_total", "counter",
       "Event datagrams refused (creator claims that failed verification, malformed messages), by reason.");
  for (ClaimRejection r : kAllClaimRejections) {
    o << "shmkeeper_event_datagrams_rejected_total{reason=\"" << ClaimRejectionName(r) << "\"} "
      << c.datagrams_rejected[ClaimRejectionName(r)] << "\n";
  }
  const Reporter& rep = agent.reporter();
  help("shmkeeper_event_datagrams_dropped_total", "counter",
       "Event datagrams dropped before they could be read (no sender credentials, a receive error), by reason.");
  o << "shmkeeper_event_datagrams_dropped_total{reason=\"no_credentials\"} " << rep.Count(kDatagramsNoCredentials)
    << "\n";
  o << "shmkeeper_event_datagrams_dropped_total{reason=\"receive_error\"} " << rep.Count(kDatagramsReceiveErrors)
    << "\n";
  o << "shmkeeper_event_datagrams_dropped_total{reason=\"rate_limited\"} " << rep.Count(kDatagramsRateLimited) << "\n";
  help("shmkeeper_enrichment_errors_total", "counter",
       "Scans whose container names and labels could not be read from a runtime API, by source.");
  o << "shmkeeper_enrichment_errors_total{source=\"docker\"} " << rep.Count(kDockerEnrichmentErrors) << "\n";
  help("shmkeeper_watcher_errors_total", "counter",
       "inotify failures (the watcher not started, a directory that cannot be watched): changes wait for the "
       "periodic scan.");
  o << "shmkeeper_watcher_errors_total " << rep.Count(kWatcherErrors) << "\n";
  help("shmkeeper_reclaim_kept_total", "counter",
       "Reclaim candidates kept because the protocol found a holder, a change or an error, or the caller's "
       "deadline passed before their removal, by reason.");
  for (SkipReason r : {SkipReason::kHeld, SkipReason::kOpened, SkipReason::kChanged, SkipReason::kLinked,
                       SkipReason::kError, SkipReason::kDeadline}) {
    auto it = c.reclaim_kept.find(r);
    o << "shmkeeper_reclaim_kept_total{reason=\"" << SkipReasonName(r) << "\"} "
      << (it == c.reclaim_kept.end() ? 0 : it->second) << "\n";
  }
  help("shmkeeper_reclaim_pinned_total", "counter",
       "Removed files whose inode outlived the reclaim: a reference /proc does not show (an O_PATH descriptor in "
       "flight) still pins their memory, which was not counted as freed.");
  o << "shmkeeper_reclaim_pinned_total " << c.reclaim_pinned << "\n";
  help("shmkeeper_reclaim_errors_total", "counter", "Reclaim removals that failed with an error.");
  o << "shmkeeper_reclaim_errors_total " << c.reclaim_errors << "\n";
  help("shmkeeper_reclaim_raced_total", "counter",
       "Removed files that an open(2) begun before the quarantine rename reached afterwards.");
  o << "shmkeeper_reclaim_raced_total " << c.reclaim_raced << "\n";
  help("shmkeeper_quarantine_restored_total", "counter", "Files renamed back from an interrupted reclaim.");
  o << "shmkeeper_quarantine_restored_total " << c.restored_from_quarantine << "\n";
  help("shmkeeper_observer_mode", "gauge",
       "How the agent learns who holds shared memory: fanotify (kernel events and lease probes) or scan (walking "
       "/proc on every scan; fanotify unavailable or agent.observer: scan).");
  for (const char* m : {"fanotify", "scan"}) {
    o << "shmkeeper_observer_mode{mode=\"" << m << "\"} " << (std::string(agent.observer_mode()) == m ? 1 : 0) << "\n";
  }
  ObserverCounters oc = agent.observer_counters();
  help("shmkeeper_observer_events_total", "counter", "fanotify events read (the kernel merges them).");
  o << "shmkeeper_observer_events_total " << oc.events << "\n";
  help("shmkeeper_observer_overflows_total", "counter",
       "fanotify queue overflows (events lost): each is followed by a walk of /proc.");
  o << "shmkeeper_observer_overflows_total " << oc.overflows << "\n";
  help("shmkeeper_observer_probes_total", "counter", "Lease probes of files that events named (or never probed).");
  o << "shmkeeper_observer_probes_total " << oc.probes << "\n";
  help("shmkeeper_observer_other_agents", "gauge",
       "Other shmkeeperd processes on this node registered as probers in the state directory (a --read-only agent "
       "beside this one): their lease probes are not use. 0 while one runs beside: it is not recognised (another pid "
       "namespace or state directory) and its probes keep files in use.");
  o << "shmkeeper_observer_other_agents " << oc.other_agents << "\n";
  help("shmkeeper_observer_prober_events_total", "counter",
       "Opens and closes by the other agents' lease probes and reclaims, not taken for use.");
  o << "shmkeeper_observer_prober_events_total " << oc.prober_events << "\n";
  help("shmkeeper_observer_inode_marks", "gauge",
       "fanotify inode marks on files the observer tracks (each probed file's opens and closes are events).");
  o << "shmkeeper_observer_inode_marks " << oc.inode_marks << "\n";
  help("shmkeeper_observer_mark_fallbacks_total", "counter",
       "tmpfs where an inode mark could not be added (mark limit, error): watched for every open and close "
       "instead.");
  o << "shmkeeper_observer_mark_fallbacks_total " << oc.mark_fallbacks << "\n";
  help("shmkeeper_observer_holder_walks_total", "counter",
       "Walks of /proc for files probed held whose holder no event and no recent creator named (at most one per 10 s, "
       "for all such files together).");
  o << "shmkeeper_observer_holder_walks_total " << oc.holder_walks << "\n";
  help("shmkeeper_observer_create_disarms_total", "counter",
       "Creates that disarmed their tmpfs's create events until the next scan re-armed them (one create event "
       "per scan per tmpfs).");
  o << "shmkeeper_observer_create_disarms_total " << oc.disarms << "\n";
  help("shmkeeper_observer_superblock_changes_total", "counter",
       "Watched device numbers found on a new tmpfs (the kernel reused the number of one that went): everything "
       "known under the number was dropped and the new tmpfs marked afresh.");
  o << "shmkeeper_observer_superblock_changes_total " << oc.superblock_changes << "\n";
  help("shmkeeper_observer_unmarked_filesystems", "gauge",
       "Pod tmpfs whose filesystem mark failed at the last try (retried every scan; their files are kept, "
       "shmkeeper_node_segments_kept{reason=\"unobserved\"}).");
  o << "shmkeeper_observer_unmarked_filesystems " << oc.unmarked << "\n";
  help("shmkeeper_observer_mark_retries_total", "counter",
       "Filesystem marks that succeeded at a later scan after one failed.");
  o << "shmkeeper_observer_mark_retries_total " << oc.mark_retries << "\n";
  help("shmkeeper_observer_audit_disagreements_total", "counter",
       "Files where the slow audit's walk of /proc disagreed with the observer: missed_event (the event-derived "
       "verdict was wrong), walk_only (a holder only /proc shows, e.g. an O_PATH descriptor).");
  o << "shmkeeper_observer_audit_disagreements_total{kind=\"missed_event\"} " << rep.Count(kAuditMissedEvent) << "\n";
  o << "shmkeeper_observer_audit_disagreements_total{kind=\"walk_only\"} " << rep.Count(kAuditWalkOnly) << "\n";
  help("shmkeeper_observer_errors_total", "counter",
       "Observer failures the agent survives: a tmpfs that cannot be marked (its files are kept; retried every "
       "scan), a lease "
       "probe that fails (the file is kept as held), the prober registry that cannot be read (other agents' probes "
       "count as use).");
  o << "shmkeeper_observer_errors_total{kind=\"mark\"} " << rep.Count(kObserverMarkErrors) << "\n";
  o << "shmkeeper_observer_errors_total{kind=\"probe\"} " << rep.Count(kObserverProbeErrors) << "\n";
  o << "shmkeeper_observer_errors_total{kind=\"probers\"} " << rep.Count(kObserverProberErrors) << "\n";
  help("shmkeeper_proc_walks_total", "counter",
       "Scans that walked every task in /proc for holders, by reason (startup, overflow, audit, request; scan: "
       "every scan in scan mode).");
  for (const char* r : {"startup", "overflow", "audit", "request", "scan"}) {
    o << "shmkeeper_proc_walks_total{reason=\"" << r << "\"} " << c.walks[r] << "\n";
  }
  if (!snap) return o.str();
  help("shmkeeper_scan_duration_seconds", "gauge", "Duration of the last full scan.");
  o << "shmkeeper_scan_duration_seconds " << PromFloat(std::chrono::duration<double>(snap->duration).count()) << "\n";
  help("shmkeeper_scans_total", "counter", "Full scans completed.");
  o << "shmkeeper_scans_total " << snap->scans << "\n";
  help("shmkeeper_last_scan_timestamp_seconds", "gauge", "Unix time of the last completed scan.");
  o << "shmkeeper_last_scan_timestamp_seconds "
    << PromFloat(std::chrono::duration<double>(snap->time.time_since_epoch()).count()) << "\n";
  help("shmkeeper_node_shm_size_bytes", "gauge", "Size of the host's /dev/shm.");
  o << "shmkeeper_node_shm_size_bytes " << snap->host_shm_size_bytes << "\n";
  help("shmkeeper_node_shm_used_bytes", "gauge", "Used bytes of the host's /dev/shm.");
  o << "shmkeeper_node_shm_used_bytes " << snap->host_shm_used_bytes << "\n";
  help("shmkeeper_node_leaked_bytes", "gauge", "Bytes in segments whose verdict is leaked, node-wide.");
  o << "shmkeeper_node_leaked_bytes " << snap->leaked_bytes << "\n";
  help("shmkeeper_node_unheld_bytes", "gauge", "Bytes in segments nobody holds (unheld or leaked), node-wide.");
  o << "shmkeeper_node_unheld_bytes " << snap->unheld_bytes << "\n";
  help("shmkeeper_node_segments_kept", "gauge",
       "Segments no process holds that the last scan did not call leaked, by reason: a mount or loop device holds "
       "it, the pid in its name runs in another pid namespace reaching its tmpfs, or those namespaces are unknown, "
       "or its tmpfs is not observed yet (unobserved); files_over_limit: every file of a tmpfs over "
       "agent.maxFilesPerPod (not judged).");
  for (const char* r : {"mount", "loop_device", "lease", "creator_in_other_pid_ns", "pid_namespaces_unknown",
                        "unobserved", "files_over_limit"}) {
    auto it = snap->kept_by_reason.find(r);
    o << "shmkeeper_node_segments_kept{reason=\"" << r << "\"} " << (it == snap->kept_by_reason.end() ? 0 : it->second)
      << "\n";
  }
  struct Series {
    const char* name;
    const char* help;
    int64_t PodRecord::*field;
  };
  static constexpr Series kSeries[] = {
      {"shmkeeper_pod_shm_size_bytes", "Size of the pod's /dev/shm tmpfs.", &PodRecord::size_bytes},
      {"shmkeeper_pod_shm_used_bytes", "Used bytes of the pod's /dev/shm (statfs).", &PodRecord::used_bytes},
      {"shmkeeper_pod_shm_unlinked_bytes", "Bytes held by unlinked files.", &PodRecord::unlinked_bytes},
      {"shmkeeper_pod_sysv_bytes", "SysV shared memory in the pod's IPC namespace.", &PodRecord::sysv_bytes},
      {"shmkeeper_pod_memcg_shmem_bytes", "shmem charged to the pod's memory cgroup.", &PodRecord::memcg_shmem_bytes},
      {"shmkeeper_pod_leaked_bytes", "Bytes in the pod's segments whose verdict is leaked.", &PodRecord::leaked_bytes},
      {"shmkeeper_pod_unheld_bytes", "Bytes in the pod's segments that nobody holds (unheld or leaked).",
       &PodRecord::unheld_bytes},
  };
  for (const Series& s : kSeries) {
    help(s.name, "gauge", s.help);
    for (const PodRecord& p : snap->pods) o << s.name << "{" << PodLabels(p.key) << "} " << p.*s.field << "\n";
  }
  help("shmkeeper_pod_shm_files", "gauge", "Files in the pod's /dev/shm.");
  for (const PodRecord& p : snap->pods) o << "shmkeeper_pod_shm_files{" << PodLabels(p.key) << "} " << p.files << "\n";
  help("shmkeeper_pod_files_over_limit", "gauge",
       "1 when the pod's /dev/shm holds more entries than agent.maxFilesPerPod: it is not listed further and none of "
       "its files is judged (all kept).");
  for (const PodRecord& p : snap->pods) {
    o << "shmkeeper_pod_files_over_limit{" << PodLabels(p.key) << "} " << (p.files_over_limit ? 1 : 0) << "\n";
  }
  RenderNriMetrics(agent.nri_stats().state(), help, o);
  return o.str();
}

}  // namespace shmkeeper

#include "convert.h"

#include <google/protobuf/util/time_util.h>

#include "base/os.h"
#include "shmkeeper/version.h"

namespace shmkeeper::agent {
namespace {

using google::protobuf::util::TimeUtil;

void Duration(double seconds, google::protobuf::Duration* out) {
  *out = TimeUtil::NanosecondsToDuration(static_cast<int64_t>(seconds * 1e9));
}

void Timestamp(std::chrono::system_clock::time_point t, google::protobuf::Timestamp* out) {
  *out = TimeUtil::NanosecondsToTimestamp(
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

void ToProto(const PodKey& in, v1::PodRef* out) {
  out->set_kind(static_cast<v1::PodKind>(in.kind));
  out->set_namespace_(in.ns);
  out->set_name(in.name);
  out->set_uid(in.uid);
}

}  // namespace

grpc::Status ToGrpc(const Status& s) {
  switch (s.code()) {
    case Code::kOk:
      return grpc::Status::OK;
    case Code::kInvalidArgument:
      return {grpc::StatusCode::INVALID_ARGUMENT, s.message()};
    case Code::kNotFound:
      return {grpc::StatusCode::NOT_FOUND, s.message()};
    case Code::kFailedPrecondition:
      return {grpc::StatusCode::UNAVAILABLE, s.message()};
    default:
      return {grpc::StatusCode::INTERNAL, s.message()};
  }
}

void ToProto(const PodRecord& in, v1::Pod* out) {
  out->set_kind(static_cast<v1::PodKind>(in.key.kind));
  out->set_namespace_(in.key.ns);
  out->set_name(EscapeInvalidUtf8(in.key.name));
  out->set_uid(in.key.uid);
  for (const ContainerRecord& c : in.containers) {
    v1::Container* pc = out->add_containers();
    pc->set_id(c.id);
    pc->set_name(c.name);
    pc->set_pid(c.pid);
    pc->set_runtime_root(c.runtime_root);
  }
  out->set_compose_project(in.compose_project);
  out->set_compose_service(in.compose_service);
  v1::ShmUsage* shm = out->mutable_shm();
  shm->set_size_bytes(in.size_bytes);
  shm->set_used_bytes(in.used_bytes);
  shm->set_files(in.files);
  shm->set_unlinked_bytes(in.unlinked_bytes);
  shm->set_sysv_bytes(in.sysv_bytes);
  shm->set_sysv_segments(in.sysv_segments);
  shm->set_memcg_shmem_bytes(in.memcg_shmem_bytes);
  shm->set_requested_bytes(in.requested_bytes);
  shm->set_requested_source(in.requested_source);
  shm->set_peak_used_bytes(in.peak_used_bytes);
  shm->set_sized_by(in.sized_by);
  shm->set_memory_limit_bytes(in.memory_limit_bytes);
  shm->set_memory_limit_source(in.memory_limit_source);
  shm->set_files_over_limit(in.files_over_limit);
  shm->set_files_limit(in.files_limit);
  for (const SegmentRecord& s : in.top_segments) {
    v1::Segment* ps = out->add_top_segments();
    ps->set_path(EscapeInvalidUtf8(s.path));
    ps->set_bytes(s.bytes);
    ps->set_unlinked(s.unlinked);
    ps->set_state(static_cast<v1::LeakState>(s.state));
    for (const HolderInfo& h : s.holders) {
      v1::Holder* ph = ps->add_holders();
      ph->set_pid(h.pid);
      ph->set_command(EscapeInvalidUtf8(h.command));
      ph->set_mapped(h.mapped);
      ph->set_reference(EscapeInvalidUtf8(h.reference));
    }
  }
  out->set_leaked_bytes(in.leaked_bytes);
  out->set_unheld_bytes(in.unheld_bytes);
  out->set_shm_counted_elsewhere(in.shm_counted_elsewhere);
  for (const auto& [k, v] : in.labels) (*out->mutable_labels())[EscapeInvalidUtf8(k)] = EscapeInvalidUtf8(v);
  for (const auto& [k, v] : in.annotations) {
    (*out->mutable_annotations())[EscapeInvalidUtf8(k)] = EscapeInvalidUtf8(v);
  }
  if (in.started_sec) *out->mutable_started() = TimeUtil::SecondsToTimestamp(in.started_sec);
}

void ToProto(const LeakRecord& in, v1::Leak* out) {
  ToProto(in.pod, out->mutable_pod());
  out->set_path(EscapeInvalidUtf8(in.path));
  out->set_sysv_id(in.sysv_id);
  out->set_bytes(in.bytes);
  Duration(static_cast<double>(in.age_sec), out->mutable_age());
  Duration(in.unheld_for_sec, out->mutable_unheld_for());
  out->set_state(static_cast<v1::LeakState>(in.state));
  v1::LeakEvidence* ev = out->mutable_evidence();
  ev->set_creator_pid(in.creator_pid);
  ev->set_creator_source(in.creator_source);
  ev->set_creator_dead(in.creator_dead);
  ev->set_creator_command(EscapeInvalidUtf8(in.creator_command));
  ev->set_name_pattern(in.name_pattern);
  ev->set_last_holder_pid(in.last_holder_pid);
  ev->set_last_holder_command(EscapeInvalidUtf8(in.last_holder_command));
  out->set_reclaimable(in.reclaimable);
}

// The proto's SkipReason is the core's, value for value.
static_assert(static_cast<int>(SkipReason::kHeld) == v1::SKIP_REASON_HELD);
static_assert(static_cast<int>(SkipReason::kOpened) == v1::SKIP_REASON_OPENED);
static_assert(static_cast<int>(SkipReason::kChanged) == v1::SKIP_REASON_CHANGED);
static_assert(static_cast<int>(SkipReason::kLinked) == v1::SKIP_REASON_LINKED);
static_assert(static_cast<int>(SkipReason::kError) == v1::SKIP_REASON_ERROR);
static_assert(static_cast<int>(SkipReason::kPinned) == v1::SKIP_REASON_PINNED);
static_assert(static_cast<int>(SkipReason::kVerdict) == v1::SKIP_REASON_VERDICT);
static_assert(static_cast<int>(SkipReason::kDeadline) == v1::SKIP_REASON_DEADLINE);
static_assert(v1::SkipReason_MAX == v1::SKIP_REASON_DEADLINE, "a new v1::SkipReason needs its core SkipReason");

void ToProto(const SkippedLeak& in, v1::SkippedLeak* out) {
  ToProto(in.leak, out->mutable_leak());
  out->set_kind(static_cast<v1::SkipReason>(in.reason));
  out->set_message(EscapeInvalidUtf8(in.message));
  out->set_reason(EscapeInvalidUtf8(std::string(SkipReasonName(in.reason)) + ": " + in.message));
}

void ToProto(const AgentEvent& in, v1::Event* out) {
  Timestamp(in.time, out->mutable_time());
  out->set_type(static_cast<v1::EventType>(in.kind));
  ToProto(in.pod, out->mutable_pod());
  out->set_message(EscapeInvalidUtf8(in.message));
  out->set_bytes(in.bytes);
  out->set_threshold_percent(in.threshold_percent);
  out->set_path(EscapeInvalidUtf8(in.path));
}

void ToProto(const NodeSnapshot& in, const Config& config, v1::Node* out) {
  out->set_hostname(in.hostname);
  out->set_host_shm_size_bytes(in.host_shm_size_bytes);
  out->set_host_shm_used_bytes(in.host_shm_used_bytes);
  out->set_pods_shm_used_bytes(in.pods_shm_used_bytes);
  out->set_leaked_bytes(in.leaked_bytes);
  out->set_unheld_bytes(in.unheld_bytes);
  out->set_pod_count(static_cast<int32_t>(in.pods.size()));
  v1::Policy* pol = out->mutable_policy();
  pol->set_shm_default_bytes(config.shm.default_bytes.value_or(0));
  pol->set_shm_max_bytes(config.shm.max_bytes.value_or(Os::Default()->HostMemoryBytes()));
  pol->set_shm_over_max(config.shm.over_max == OverMax::kClamp ? "clamp" : "reject");
  pol->set_leaks_reclaim(LeakReclaimName(config.leaks.reclaim));
  Duration(static_cast<double>(config.leaks.grace.count()), pol->mutable_leaks_grace());
  Duration(std::chrono::duration<double>(config.agent.scan_interval).count(), pol->mutable_scan_interval());
  out->set_agent_version(SHMKEEPER_VERSION);
  Timestamp(in.time, out->mutable_last_scan_time());
  *out->mutable_last_scan_duration() = TimeUtil::NanosecondsToDuration(in.duration.count());
  out->set_scans(in.scans);
}

}  // namespace shmkeeper::agent

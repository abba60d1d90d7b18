#include "decide/size_container.h"

#include <unistd.h>

#include <climits>

#include "decide/cuda_ipc.h"
#include "decide/decision_log.h"
#include "decide/inject.h"
#include "decide/plan.h"
#include "decide/spec.h"

namespace shmkeeper {
std::string ExecutableDir() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "/usr/local/bin";
  std::string self(buf, static_cast<size_t>(n));
  return self.substr(0, self.rfind('/'));
}

Status SizeContainerShm(const std::string& bundle, const std::string& container_id, const Config& config, Applier who,
                        Os& os, std::vector<Status>* warnings) {
  SHMK_ASSIGN_OR_RETURN(Spec spec, Spec::Load(bundle));
  SHMK_ASSIGN_OR_RETURN(ShmPlan plan, PlanShm(spec, config, container_id, os));
  if (who == Applier::kHook && plan.target.shape == ShmShape::kSpecTmpfs) {
    // The runtime has already mounted it from the spec; only the wrapper can size it.
    plan.action = ShmAction::kSkip;
    plan.reason = "/dev/shm is a tmpfs in the spec, mounted before hooks run; use shmkeeper-runtime to size it";
  }
  SHMK_RETURN_IF_ERROR(ApplyShm(plan, &spec, os));
  bool edited = plan.action == ShmAction::kResize && plan.target.shape == ShmShape::kSpecTmpfs;
  Json record = DecisionRecord(container_id, plan, who == Applier::kHook ? "hook" : "runtime");
  if (who == Applier::kRuntime) {  // the spec can change only before the real runtime reads it
    std::vector<std::string> notes;
    InjectResult preload = InjectPreload(&spec, bundle, config, ExecutableDir());
    InjectResult cuda = InjectCudaIpc(&spec, config, &notes);
    edited = edited || preload.changed || cuda.changed;
    record["preload"] = preload.what;
    record["preloadReserve"] = preload.reserve;
    record["cuda"] = cuda.what;
    record["notes"] = notes;
  } else {  // the same CUDA IPC decision, said, never applied (decide/cuda_ipc.h)
    std::vector<std::string> notes;
    InjectResult cuda = ExplainCudaIpc(spec, config, &notes);
    if (!cuda.what.empty()) {
      record["cuda"] = cuda.what;
      record["notes"] = notes;
    }
  }
  if (edited) SHMK_RETURN_IF_ERROR(spec.Save());
  if (plan.action != ShmAction::kSkip) {
    Status written = WriteSizingRecord(bundle, SizingRecordOf(plan, who == Applier::kHook ? "hook" : "runtime"));
    if (!written.ok()) warnings->push_back(written.WithContext("sizing record (the agent shows no sizedBy)"));
  }
  Status logged = AppendDecisionLine(config, record, LogLevel::kInfo);
  if (!logged.ok()) warnings->push_back(logged.WithContext("decision log"));
  return Status::Ok();
}

FailureOutcome OutcomeOfFailure(const Status& failure, bool config_loaded, const Config& config) {
  if (failure.IsUserError() && config_loaded) return FailureOutcome::kRefuse;
  return config.on_internal_error == OnInternalError::kFail ? FailureOutcome::kRefuse : FailureOutcome::kPassThrough;
}

}  // namespace shmkeeper

#include "shmkeeper/sizing.h"

#include "shmkeeper/decision_log.h"
#include "shmkeeper/shm_plan.h"
#include "shmkeeper/spec.h"

namespace shmkeeper {

Status SizeContainerShm(const std::string& bundle, const std::string& container_id, const Config& config, Applier who,
                        Os& os) {
  SHMK_ASSIGN_OR_RETURN(Spec spec, Spec::Load(bundle));
  SHMK_ASSIGN_OR_RETURN(ShmPlan plan, PlanShm(spec, config, container_id, os));
  if (who == Applier::kHook && plan.target.shape == ShmShape::kSpecTmpfs) {
    // The runtime has already mounted it from the spec; only the wrapper can size it.
    plan.action = ShmAction::kSkip;
    plan.reason = "/dev/shm is a tmpfs in the spec, mounted before hooks run; use shmkeeper-runtime to size it";
  }
  SHMK_RETURN_IF_ERROR(ApplyShm(plan, &spec, os));
  if (plan.action == ShmAction::kResize && plan.target.shape == ShmShape::kSpecTmpfs) {
    SHMK_RETURN_IF_ERROR(spec.Save());
  }
  if (plan.action != ShmAction::kSkip) {
    (void)WriteSizingRecord(bundle, SizingRecordOf(plan, who == Applier::kHook ? "hook" : "runtime"));
  }
  (void)AppendJsonLine(config.log.path, DecisionRecord(container_id, plan), LogLevel::kInfo, config.log.level);
  return Status::Ok();
}

}  // namespace shmkeeper

// The NRI API's generated messages (proto/nri/api.proto), included through
// here only: the API's LinuxSchedulerPolicy and LinuxSchedulerFlag values
// (SCHED_OTHER, SCHED_FLAG_RESET_ON_FORK, ...) are also libc's and the
// kernel's macros, which would rewrite the generated enums. The macros are
// undefined before the generated header; code that includes this header must
// not need them (none of the agent does). The generated api.pb.cc is
// compiled with this header forced in first (plugin/CMakeLists.txt).
#pragma once

#include <linux/sched.h>
#include <sched.h>

#undef SCHED_NORMAL
#undef SCHED_OTHER
#undef SCHED_FIFO
#undef SCHED_RR
#undef SCHED_BATCH
#undef SCHED_ISO
#undef SCHED_IDLE
#undef SCHED_DEADLINE
#undef SCHED_FLAG_RESET_ON_FORK
#undef SCHED_FLAG_RECLAIM
#undef SCHED_FLAG_DL_OVERRUN
#undef SCHED_FLAG_KEEP_POLICY
#undef SCHED_FLAG_KEEP_PARAMS
#undef SCHED_FLAG_UTIL_CLAMP_MIN
#undef SCHED_FLAG_UTIL_CLAMP_MAX

#ifndef SHMKEEPER_NRI_API_UNDEF_ONLY
#include "nri/api.pb.h"
#endif

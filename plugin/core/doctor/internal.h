// doctor's parts (doctor.cc gathers and reports; where.cc: host or
// container, and the engine; fixes.cc: the fixes). Internal to shmkeeper_doctor.
#pragma once

#include <sys/types.h>

#include <string>

#include "doctor/doctor.h"

namespace shmkeeper {

// The inode of <proc>/self/ns/<ns>, 0 when it cannot be read.
ino_t NsInode(const std::string& proc, const char* ns);

// Fills report->in_container and report->engine.
void DetectEngine(const DoctorOptions& options, DoctorReport* report);

// Fills report->fixes for report->engine. REQUIRES: the findings are known.
void Fixes(DoctorReport* report);

}  // namespace shmkeeper

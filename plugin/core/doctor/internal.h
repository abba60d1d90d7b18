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

// Fills report->fixes: only fixes that change what was found. Sizes for the
// engine when report->size_problem (and, for Docker, a node-wide fix that
// follows what doctor sees of shmkeeper); reclaim when files are leaked.
// REQUIRES: the findings are known.
void Fixes(DoctorReport* report);

}  // namespace shmkeeper

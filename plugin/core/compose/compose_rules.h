// The compose rules (internal to shmkeeper_compose): the /dev/shm checks of
// every service of a read project, as findings and suggested sizes.
#pragma once

#include "compose/compose.h"
#include "compose/compose_reader.h"

namespace shmkeeper::compose {

// A project as read, and what the rules found in it.
struct Checked {
  ComposeProject project;
  ComposeReport report;
};

// Reads the options' project and checks it; findings sorted by position.
Result<Checked> ReadAndCheck(const ComposeCheckOptions& options);

}  // namespace shmkeeper::compose

// shmkeeper doctor: the shared memory situation here, and the fix.
#include <iostream>
#include <memory>

#include "cli.h"
#include "doctor/doctor.h"

namespace shmkeeper::cli {

void RegisterDoctor(CLI::App& app, Outcome& outcome) {
  auto output = std::make_shared<std::string>("table");
  auto shm = std::make_shared<std::string>("/dev/shm");
  CLI::App* cmd = app.add_subcommand("doctor",
                                     "Diagnose /dev/shm on this host or in this container "
                                     "(also a static binary: shmkeeper-doctor)");
  cmd->add_option("-o,--output", *output, "table or json")->check(CLI::IsMember({"table", "json"}));
  cmd->add_option("--shm", *shm, "The shared memory directory to examine");
  cmd->callback([output, shm, &outcome] {
    DoctorOptions o;
    o.shm_path = *shm;
    Result<DoctorReport> r = RunDoctor(o);
    if (!r.ok()) {
      outcome.status = r.status();
      return;
    }
    std::cout << (*output == "json" ? DumpJson(DoctorToJson(*r), 2) + "\n" : DoctorToText(*r));
  });
}

}  // namespace shmkeeper::cli

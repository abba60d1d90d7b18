// shmkeeper-doctor: `shmkeeper doctor` as a static binary, to run inside any
// container (docker cp it in, or bind-mount it read-only).
#include <CLI/CLI.hpp>
#include <iostream>

#include "doctor/doctor.h"
#include "shmkeeper/version.h"

int main(int argc, char** argv) {
  CLI::App app{"shmkeeper-doctor: diagnose /dev/shm here and print the fix", "shmkeeper-doctor"};
  app.set_version_flag("--version", std::string("shmkeeper-doctor ") + SHMKEEPER_VERSION);
  std::string output = "table";
  shmkeeper::DoctorOptions o;
  app.add_option("-o,--output", output, "table or json")->check(CLI::IsMember({"table", "json"}));
  app.add_option("--shm", o.shm_path, "The shared memory directory to examine");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "shmkeeper-doctor: " << e.what() << "\n";
    return 2;
  }
  shmkeeper::Result<shmkeeper::DoctorReport> r = shmkeeper::RunDoctor(o);
  if (!r.ok()) {
    std::cerr << "shmkeeper-doctor: " << r.status().message() << "\n";
    return 1;
  }
  std::cout << (output == "json" ? shmkeeper::DumpJson(shmkeeper::DoctorToJson(*r), 2) + "\n"
                                 : shmkeeper::DoctorToText(*r));
  return 0;
}

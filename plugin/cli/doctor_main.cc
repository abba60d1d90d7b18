// shmkeeper-doctor: `shmkeeper doctor` as a static binary, to run inside any
// container (docker cp it in, or bind-mount it read-only).
#include <CLI/CLI.hpp>
#include <iostream>

#include "clidefs.h"
#include "doctor/doctor.h"

int main(int argc, char** argv) {
  CLI::App app;
  shmkeeper::cli::DoctorFlags flags;
  shmkeeper::cli::DefineDoctorCli(app, &flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "shmkeeper-doctor: " << e.what() << "\n";
    return 2;
  }
  shmkeeper::DoctorOptions o;
  o.shm_path = flags.shm_path;
  shmkeeper::Result<shmkeeper::DoctorReport> r = shmkeeper::RunDoctor(o);
  if (!r.ok()) {
    std::cerr << "shmkeeper-doctor: " << r.status().message() << "\n";
    return 1;
  }
  std::cout << (flags.output == "json" ? shmkeeper::DumpJson(shmkeeper::DoctorToJson(*r), 2) + "\n"
                                       : shmkeeper::DoctorToText(*r));
  return 0;
}

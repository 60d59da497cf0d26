// Uses the installed trainer and launch libraries the way a user's training program would:
// one MPI session (a singleton here: no launcher, one instance), a collective, and the
// instance detection, checking answers known in advance.

#include <tilefeed/launch/launch.h>
#include <tilefeed/trainer/mpi_session.h>

#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <vector>

namespace launch = tilefeed::launch;
namespace trainer = tilefeed::trainer;

namespace {

int Check(bool ok, const char* what) {
  if (!ok) std::fprintf(stderr, "trainer_consumer: expected %s\n", what);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const launch::InstanceInfo launched =
        launch::DetectInstance([](const std::string&) { return std::optional<std::string>(); });
    int failures = Check(launched == launch::InstanceInfo{0, 1, 0, 1}, "instance 0 of 1");

    // MPI through the trainer's session: the link that failed in a C++-only project.
    trainer::MpiSession session(&argc, &argv);
    std::vector<float> values{1.5F, -2.0F};
    session.AllreduceSum(values);
    failures += Check(session.rank() == 0 && session.size() == 1, "MPI rank 0 of 1");
    failures += Check(values[0] == 1.5F && values[1] == -2.0F, "a sum over one instance");
    std::printf("trainer_consumer: MPI rank %d of %d, all-reduce [%g, %g]\n", session.rank(),
                session.size(), static_cast<double>(values[0]), static_cast<double>(values[1]));
    if (failures != 0) return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainer_consumer: %s\n", e.what());
    return 1;
  }
  std::printf("trainer_consumer: OK\n");
  return 0;
}

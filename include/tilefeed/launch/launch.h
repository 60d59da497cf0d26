#pragma once

// The mpirun command line behind `poprun`: how many processes, on which hosts, bound to
// which cores, with which environment. Building it is a pure function of a LaunchPlan (what
// the user asked for) and HostFacts (what main found out about this machine), so tests
// check the command without running anything; tools/poprun.cc only gathers the facts,
// prints or execs the result. Thread-safe: no state.
//
// DetectInstance: which instance of a multi-instance (poprun / mpirun) job this process is.
//
// mpirun tells each process its rank through the environment (OpenMPI:
// OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE; MPICH and other PMI launchers:
// PMI_RANK/PMI_SIZE, MPI_LOCALRANKID/MPI_LOCALNRANKS), so an instance can find its slice
// without initializing MPI. The library never reads the environment itself: `main` passes
// a lookup (ProcessEnvironment() or its own, e.g. a map in tests). Pure functions;
// thread-safe if the lookup is.

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tilefeed/loader/sampler.h"

namespace tilefeed::launch {

// A plan or fact that makes no valid command. what() is one line for the user.
class LaunchError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct LaunchPlan {
  int instances = 1;                 // MPI processes (-np)
  std::vector<std::string> hosts;    // empty = this host only
  int replicas_per_instance = 1;     // exported as TILEFEED_REPLICAS_PER_INSTANCE
  int cores_per_instance = 0;        // cores bound to each instance; 0 = share cores evenly
  std::vector<std::string> program;  // the program and its arguments
};

struct HostFacts {
  int cores = 1;            // cores this process may run on; hosts are assumed alike
  bool is_root = false;     // OpenMPI refuses root without --allow-run-as-root
  std::string mpirun_path;  // absolute path of mpirun; empty = not found
};

struct MpirunCommand {
  std::vector<std::string> argv;  // argv[0] is HostFacts::mpirun_path
  bool oversubscribed = false;    // more instances (x cores each) per host than cores
  std::string warning;            // one line for stderr, or empty
};

// The mpirun command for `plan`. Throws LaunchError for instances < 1, replicas < 1,
// cores_per_instance < 0, an empty program, an empty host name, or a missing mpirun.
MpirunCommand BuildMpirunCommand(const LaunchPlan& plan, const HostFacts& facts);

// Splits "a,b,c" into host names. Throws LaunchError for an empty list or an empty name
// ("a,,b", "a,").
std::vector<std::string> ParseHostList(std::string_view text);

// `word` quoted for a POSIX shell (unchanged when it needs no quoting).
std::string ShellQuote(std::string_view word);
// The words quoted and joined with spaces: a line a shell runs as `argv`.
std::string ShellJoin(const std::vector<std::string>& argv);

// The first executable `name` in the colon-separated `path` (as $PATH), or "" if none.
std::string FindInPath(std::string_view name, std::string_view path);

// Returns the value of an environment variable, or nullopt when it is not set.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

struct InstanceInfo {
  int index = 0;        // this instance, in [0, count)
  int count = 1;        // instances in the job
  int local_index = 0;  // this instance among those on its host
  int local_count = 1;  // instances on this host
  friend bool operator==(const InstanceInfo&, const InstanceInfo&) = default;
};

// The instance layout from the launcher's variables; a single instance (0 of 1) when none
// is set. If poprun's TILEFEED_INSTANCES is set it must agree with the launcher's size.
// Throws std::invalid_argument naming the variable for a value that is not an integer,
// out of range, or inconsistent with the others.
InstanceInfo DetectInstance(const EnvLookup& env);

// This instance's slice of every epoch, for LoaderOptions::slice.
loader::InstanceSlice SliceOf(const InstanceInfo& instance);

// A lookup over this process's environment (getenv). For `main` only: libraries take an
// EnvLookup from their caller.
EnvLookup ProcessEnvironment();

}  // namespace tilefeed::launch

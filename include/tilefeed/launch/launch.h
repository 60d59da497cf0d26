#pragma once

// The mpirun command line behind `poprun`: how many processes, on which hosts, bound to
// which cores, with which environment. Building it is a pure function of a LaunchPlan (what
// the user asked for) and HostFacts (what main found out about this machine), so tests
// check the command without running anything; tools/poprun.cc only gathers the facts,
// prints or execs the result. Thread-safe: no state.

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

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

}  // namespace tilefeed::launch

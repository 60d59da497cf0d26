#include "tilefeed/launch/launch.h"

#include <unistd.h>

#include <algorithm>

namespace tilefeed::launch {

std::vector<std::string> ParseHostList(std::string_view text) {
  if (text.empty()) throw LaunchError("--hosts: the host list is empty");
  std::vector<std::string> hosts;
  std::size_t begin = 0;
  while (true) {
    const std::size_t comma = text.find(',', begin);
    const std::string_view name = text.substr(
        begin, comma == std::string_view::npos ? std::string_view::npos : comma - begin);
    if (name.empty()) {
      throw LaunchError("--hosts: empty host name in '" + std::string(text) + "'");
    }
    if (name.find_first_of(" \t\n:") != std::string_view::npos) {
      throw LaunchError("--hosts: bad host name '" + std::string(name) + "'");
    }
    hosts.emplace_back(name);
    if (comma == std::string_view::npos) break;
    begin = comma + 1;
  }
  return hosts;
}

MpirunCommand BuildMpirunCommand(const LaunchPlan& plan, const HostFacts& facts) {
  if (plan.instances < 1) {
    throw LaunchError("--instances must be at least 1, got " + std::to_string(plan.instances));
  }
  if (plan.replicas_per_instance < 1) {
    throw LaunchError("--replicas-per-instance must be at least 1, got " +
                      std::to_string(plan.replicas_per_instance));
  }
  if (plan.cores_per_instance < 0) {
    throw LaunchError("--cores-per-instance must not be negative");
  }
  if (plan.program.empty() || plan.program.front().empty()) {
    throw LaunchError("no PROGRAM to run (poprun [options] -- PROGRAM ARGS...)");
  }
  for (const std::string& host : plan.hosts) {
    if (host.empty()) throw LaunchError("--hosts: empty host name");
  }
  if (facts.mpirun_path.empty())
    throw LaunchError("mpirun not found in PATH (apt-get install openmpi-bin)");

  const int host_count = plan.hosts.empty() ? 1 : static_cast<int>(plan.hosts.size());
  // Instances per host, rounding up: mpirun fills hosts in order, slot by slot.
  const int per_host = (plan.instances + host_count - 1) / host_count;
  const int cores = std::max(facts.cores, 1);
  const int cores_per_instance =
      plan.cores_per_instance > 0 ? plan.cores_per_instance : std::max(1, cores / per_host);
  const bool oversubscribed = static_cast<long>(per_host) * cores_per_instance > cores;

  MpirunCommand command;
  command.oversubscribed = oversubscribed;
  std::vector<std::string>& argv = command.argv;
  argv.push_back(facts.mpirun_path);
  if (facts.is_root) argv.push_back("--allow-run-as-root");
  argv.insert(argv.end(), {"-np", std::to_string(plan.instances)});
  if (!plan.hosts.empty()) {
    // host:slots so that mpirun places per_host instances on each host.
    std::string list;
    for (const std::string& host : plan.hosts) {
      if (!list.empty()) list += ',';
      list += host + ':' + std::to_string(per_host);
    }
    argv.insert(argv.end(), {"--host", list});
  }
  if (oversubscribed) {
    // Binding would stack instances on the same cores; let the kernel spread them.
    argv.insert(argv.end(), {"--oversubscribe", "--map-by", "slot", "--bind-to", "none"});
    command.warning = "poprun: warning: " + std::to_string(per_host) + " instance(s) x " +
                      std::to_string(cores_per_instance) + " core(s) per host but only " +
                      std::to_string(cores) + " core(s): oversubscribing, not binding";
  } else {
    argv.insert(argv.end(),
                {"--map-by", "slot:PE=" + std::to_string(cores_per_instance), "--bind-to", "core"});
  }
  // Ranks blocked in MPI (MPI_Init, MPI_Finalize, any blocking call) yield the core instead
  // of spinning on it; the trainer's collectives wait in their own sleeping loop
  // (tilefeed/trainer/mpi_session.h).
  argv.insert(argv.end(), {"--mca", "mpi_yield_when_idle", "1"});
  argv.insert(argv.end(),
              {"-x", "TILEFEED_INSTANCES=" + std::to_string(plan.instances), "-x",
               "TILEFEED_REPLICAS_PER_INSTANCE=" + std::to_string(plan.replicas_per_instance), "-x",
               "TILEFEED_CORES_PER_INSTANCE=" + std::to_string(cores_per_instance)});
  argv.insert(argv.end(), plan.program.begin(), plan.program.end());
  return command;
}

std::string ShellQuote(std::string_view word) {
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("@%+=:,./_-").find(c) != std::string_view::npos;
  });
  if (plain) return std::string(word);
  std::string quoted = "'";
  for (const char c : word) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  quoted += '\'';
  return quoted;
}

std::string ShellJoin(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& word : argv) {
    if (!line.empty()) line += ' ';
    line += ShellQuote(word);
  }
  return line;
}

std::string FindInPath(std::string_view name, std::string_view path) {
  if (name.find('/') != std::string_view::npos) {
    return access(std::string(name).c_str(), X_OK) == 0 ? std::string(name) : std::string();
  }
  std::size_t begin = 0;
  while (begin <= path.size()) {
    std::size_t colon = path.find(':', begin);
    if (colon == std::string_view::npos) colon = path.size();
    // An empty entry means the working directory, as in execvp. (Built without assigning
    // to `dir`: GCC 12 -O3 warns falsely (-Wrestrict) on std::string::operator= here.)
    const std::string_view dir =
        colon == begin ? std::string_view(".") : path.substr(begin, colon - begin);
    std::string candidate;
    candidate.reserve(dir.size() + 1 + name.size());
    candidate.append(dir).append(1, '/').append(name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    begin = colon + 1;
  }
  return {};
}

}  // namespace tilefeed::launch

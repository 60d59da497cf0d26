// poprun: launches N instances of a training program through OpenMPI's mpirun, each bound
// to its own cores and told the layout through the environment. The command itself is built
// by launch::BuildMpirunCommand; this file gathers the facts (cores, root, mpirun's path),
// then prints or execs. It never starts processes itself.
//
//   poprun --instances 4 [--hosts a,b] [--replicas-per-instance 2] [--cores-per-instance 8]
//          [--print-command] [--] ./train --epochs 90
//
// Errors are one line on stderr and exit code 2: a PROGRAM that is missing or not
// executable is one of them (checked here for a job on this host, before mpirun prints its
// banner). mpirun runs as poprun's child; poprun exits with its exit code. SIGINT and
// SIGTERM of poprun are forwarded to mpirun (which ends the job) with one line saying so,
// and poprun then exits 128 + the signal's number.

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "loader/file_io.h"
#include "tilefeed/launch/launch.h"
#include "tools/cli_checks.h"

namespace {

constexpr int kUsageError = 2;

int Fail(const std::string& message) {
  std::cerr << "poprun: " << message << '\n';
  return kUsageError;
}

// Why `program` cannot be run on this host, or "" when it can: a name with a '/' is a
// path, any other is looked up in PATH, as mpirun does.
std::string ProgramProblem(const std::string& program, const std::string& path) {
  const std::string file = program.find('/') != std::string::npos
                               ? program
                               : tilefeed::launch::FindInPath(program, path);
  if (file.empty()) return program + ": not found in PATH";
  struct stat st {};
  if (stat(file.c_str(), &st) != 0) return file + ": " + std::strerror(errno);
  if (S_ISDIR(st.st_mode)) return file + ": is a directory, not a program";
  if (access(file.c_str(), X_OK) != 0)
    return file + ": not executable (" + std::strerror(errno) + ")";
  return {};
}

// Runs argv as a child with SIGINT/SIGTERM forwarded to it; returns poprun's exit code.
// The signals (and SIGCHLD) are blocked before the fork and taken with sigwait, so no
// handler runs; the child gets the original mask back before it execs.
int RunForwardingSignals(std::vector<std::string>& argv) {
  std::vector<char*> exec_argv;
  exec_argv.reserve(argv.size() + 1);
  for (std::string& word : argv) exec_argv.push_back(word.data());
  exec_argv.push_back(nullptr);
  sigset_t set;
  sigset_t original;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGCHLD);
  sigprocmask(SIG_BLOCK, &set, &original);
  std::cout.flush();
  const pid_t child = fork();
  if (child < 0) return Fail(std::string("fork: ") + std::strerror(errno));
  if (child == 0) {
    sigprocmask(SIG_SETMASK, &original, nullptr);
    execv(exec_argv[0], exec_argv.data());
    std::fprintf(stderr, "poprun: exec %s: %s\n", exec_argv[0], std::strerror(errno));
    _exit(127);
  }
  int forwarded = 0;
  while (true) {
    int status = 0;
    const pid_t done = waitpid(child, &status, WNOHANG);
    if (done == child) {
      if (forwarded != 0) return 128 + forwarded;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    int signal = 0;
    if (sigwait(&set, &signal) != 0 || signal == SIGCHLD) continue;
    if (kill(child, signal) == 0 && forwarded == 0) {
      std::fprintf(stderr, "poprun: %s: forwarded to mpirun (pid %d), which ends the job\n",
                   signal == SIGINT ? "SIGINT" : "SIGTERM", static_cast<int>(child));
    }
    forwarded = signal;
  }
}

int Main(int argc, char** argv) {
  using namespace tilefeed::launch;
  CLI::App app{
      "poprun: run N instances of PROGRAM with mpirun, one shard of the data each.\n"
      "usage: poprun --instances N [--hosts h1,h2] [options] [--] PROGRAM ARGS..."};
  LaunchPlan plan;
  std::string hosts;
  bool print_command = false;
  app.add_option("--instances,-n", plan.instances, "instances (MPI processes)")
      ->required()
      ->check(tilefeed::tools::AtLeast(1));
  app.add_option("--hosts", hosts, "comma-separated host names (default: this host)");
  app.add_option("--replicas-per-instance", plan.replicas_per_instance,
                 "replicas each instance feeds")
      ->check(tilefeed::tools::AtLeast(1))
      ->capture_default_str();
  app.add_option("--cores-per-instance", plan.cores_per_instance,
                 "cores bound to each instance (0: share this host's cores evenly)")
      ->check(tilefeed::tools::AtLeast(0))
      ->capture_default_str();
  app.add_flag("--print-command", print_command, "print the mpirun command line, do not run it");
  // Everything from PROGRAM on belongs to the program, options included.
  app.prefix_command();
  if (const auto rc = tilefeed::tools::ParseArgs(app, argc, argv, "poprun")) return *rc;
  plan.program = app.remaining();
  if (!plan.program.empty() && plan.program.front() == "--") {
    plan.program.erase(plan.program.begin());
  } else if (!plan.program.empty() && plan.program.front().size() > 1 &&
             plan.program.front().front() == '-') {
    // An option poprun does not know is a typo to report here, under poprun's name; passed on,
    // it would reach mpirun as "the program".
    return Fail("unknown option " + plan.program.front() +
                " (poprun's options come before PROGRAM; see poprun --help, or put -- before "
                "a PROGRAM whose name starts with -)");
  }

  const EnvLookup env = ProcessEnvironment();
  HostFacts facts;
  facts.cores = tilefeed::loader::detail::UsableCores();
  facts.is_root = geteuid() == 0;
  facts.mpirun_path = FindInPath("mpirun", env("PATH").value_or(""));
  MpirunCommand command;
  try {
    if (app.count("--hosts") > 0) plan.hosts = ParseHostList(hosts);
    command = BuildMpirunCommand(plan, facts);
  } catch (const LaunchError& e) {
    return Fail(e.what());
  }
  if (!command.warning.empty()) std::cerr << command.warning << '\n';
  if (print_command) {
    std::cout << ShellJoin(command.argv) << '\n';
    return 0;
  }
  // On other hosts the program is mpirun's to find; on this one a typo gets one line.
  if (plan.hosts.empty() && !plan.program.empty()) {
    const std::string problem = ProgramProblem(plan.program.front(), env("PATH").value_or(""));
    if (!problem.empty()) return Fail(problem);
  }
  return RunForwardingSignals(command.argv);
}

}  // namespace

int main(int argc, char** argv) { return tilefeed::tools::RunMain("poprun", Main, argc, argv); }

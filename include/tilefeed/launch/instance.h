#pragma once

// Which instance of a multi-instance (poprun / mpirun) job this process is.
//
// mpirun tells each process its rank through the environment (OpenMPI:
// OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE; MPICH and other PMI launchers:
// PMI_RANK/PMI_SIZE, MPI_LOCALRANKID/MPI_LOCALNRANKS), so an instance can find its slice
// without initializing MPI. The library never reads the environment itself: `main` passes
// a lookup (ProcessEnvironment() or its own, e.g. a map in tests). Pure functions;
// thread-safe if the lookup is.

#include <functional>
#include <optional>
#include <string>

#include "tilefeed/loader/sampler.h"

namespace tilefeed::launch {

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

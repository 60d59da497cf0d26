#include <charconv>
#include <cstdlib>
#include <stdexcept>

#include "tilefeed/launch/launch.h"

namespace tilefeed::launch {
namespace {

// The value of `name` as an int in [min, max], or nullopt when unset.
std::optional<int> ReadInt(const EnvLookup& env, const std::string& name, int min, int max) {
  const std::optional<std::string> text = env(name);
  if (!text) return std::nullopt;
  int value = 0;
  const char* end = text->data() + text->size();
  const auto [ptr, ec] = std::from_chars(text->data(), end, value);
  if (ec != std::errc() || ptr != end || text->empty()) {
    throw std::invalid_argument(name + "='" + *text + "' is not an integer");
  }
  if (value < min || value > max) {
    throw std::invalid_argument(name + "=" + *text + " is out of range [" + std::to_string(min) +
                                ", " + std::to_string(max) + "]");
  }
  return value;
}

constexpr int kMaxInstances = 1 << 20;

// One launcher's naming scheme.
struct Scheme {
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};
constexpr Scheme kSchemes[] = {
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
};

}  // namespace

InstanceInfo DetectInstance(const EnvLookup& env) {
  InstanceInfo info;
  const char* size_name = nullptr;
  for (const Scheme& scheme : kSchemes) {
    const std::optional<int> size = ReadInt(env, scheme.size, 1, kMaxInstances);
    if (!size) continue;
    const std::optional<int> rank = ReadInt(env, scheme.rank, 0, *size - 1);
    if (!rank) {
      throw std::invalid_argument(std::string(scheme.size) + " is set but " + scheme.rank +
                                  " is not");
    }
    info.index = *rank;
    info.count = *size;
    // Without local variables, assume every instance shares this host.
    info.local_count = ReadInt(env, scheme.local_size, 1, *size).value_or(*size);
    info.local_index = ReadInt(env, scheme.local_rank, 0, info.local_count - 1).value_or(*rank);
    if (info.local_index >= info.local_count) {
      throw std::invalid_argument(std::string(scheme.local_rank) + " is outside " +
                                  scheme.local_size);
    }
    size_name = scheme.size;
    break;
  }
  if (const std::optional<int> instances = ReadInt(env, "TILEFEED_INSTANCES", 1, kMaxInstances)) {
    if (size_name != nullptr && *instances != info.count) {
      throw std::invalid_argument("TILEFEED_INSTANCES=" + std::to_string(*instances) +
                                  " disagrees with " + size_name + "=" +
                                  std::to_string(info.count));
    }
    if (size_name == nullptr && *instances != 1) {
      throw std::invalid_argument("TILEFEED_INSTANCES=" + std::to_string(*instances) +
                                  " but no launcher rank variable is set (run under poprun)");
    }
  }
  return info;
}

loader::InstanceSlice SliceOf(const InstanceInfo& instance) {
  return loader::InstanceSlice{instance.index, instance.count};
}

EnvLookup ProcessEnvironment() {
  return [](const std::string& name) -> std::optional<std::string> {
    // getenv is safe here: nothing in tilefeed calls setenv.
    const char* value = std::getenv(name.c_str());  // NOLINT(concurrency-mt-unsafe)
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

}  // namespace tilefeed::launch

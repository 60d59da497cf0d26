#include "trainer/checkpoint.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <span>
#include <sstream>

#include "loader/file_io.h"

namespace tilefeed::trainer {
namespace {

// Layout: a text header line, the raw little-endian floats, then a text trailer with
// the FNV-1a 64 hash of everything before it. The header says how many floats follow.
constexpr char kMagic[] = "tilefeed-checkpoint v1";
// The data position line train wrote for remote readers until the streams carried one
// position: it has no seed or dataset size, so it cannot become a LoaderState.
constexpr char kRetiredRemoteState[] = "tilefeed-remote-state v1";

std::uint64_t Fnv1a(std::span<const char> bytes) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

[[noreturn]] void Fail(const std::filesystem::path& path, const std::string& what) {
  throw CheckpointError("checkpoint " + path.string() + ": " + what);
}

loader::LoaderState ParseDataPosition(const std::string& line, const std::filesystem::path& path) {
  if (line.rfind(kRetiredRemoteState, 0) == 0) {
    Fail(path, "its data position is in the retired format '" + line.substr(0, 120) +
                   "' (no seed or dataset size), which this version no longer reads; start "
                   "the run afresh, or resume it with the tilefeed that wrote it");
  }
  try {
    return loader::LoaderState::Parse(line);
  } catch (const std::invalid_argument& e) {
    Fail(path, "data position: " + std::string(e.what()).substr(0, 300));
  }
}

constexpr char kTempPrefix[] = ".checkpoint.tfck.tmp.";

// The temporary file this process writes: DIR/.checkpoint.tfck.tmp.<host>.<pid>.
std::filesystem::path TempPath(const std::filesystem::path& dir) {
  return dir / (kTempPrefix + loader::detail::HostName() + "." + std::to_string(::getpid()));
}

// Removes the temporary files that writers killed mid-write (SIGKILL, a crash) left in
// `dir`: those of this host whose pid is gone, and those named .checkpoint.tfck.tmp.<pid>
// by earlier versions (no host) whose pid is gone here. A file of another host, or of a
// live pid, stays: on a shared folder its writer may be running (a reused pid only keeps
// a stale file longer). Best effort: errors are ignored.
void RemoveStaleTemps(const std::filesystem::path& dir) {
  const std::string host = loader::detail::HostName();
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(kTempPrefix, 0) != 0) continue;
    const std::string rest = name.substr(sizeof(kTempPrefix) - 1);
    const std::size_t dot = rest.rfind('.');
    const std::string pid_text = dot == std::string::npos ? rest : rest.substr(dot + 1);
    const bool ours = dot == std::string::npos || rest.substr(0, dot) == host;
    if (!ours || pid_text.empty() || pid_text.size() > 9 ||
        pid_text.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    const long pid = std::stol(pid_text);
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code remove_ec;
    std::filesystem::remove(it->path(), remove_ec);
  }
}

}  // namespace

std::filesystem::path CheckpointPath(const std::filesystem::path& dir) {
  return dir / "checkpoint.tfck";
}

void WriteCheckpoint(const std::filesystem::path& dir, const Checkpoint& checkpoint) {
  const std::filesystem::path path = CheckpointPath(dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) Fail(path, "create directory: " + ec.message());
  if (checkpoint.core.find_first_of(" \n") != std::string::npos) {
    Fail(path, "core name holds a separator");
  }
  std::string bytes = std::string(kMagic) + " step=" + std::to_string(checkpoint.step) +
                      " epoch=" + std::to_string(checkpoint.epoch) + " core=" + checkpoint.core +
                      " parameters=" + std::to_string(checkpoint.parameters.size()) +
                      " velocity=" + std::to_string(checkpoint.velocity.size()) +
                      " global_batch=" + std::to_string(checkpoint.global_batch) +
                      " dataset_digest=" + std::to_string(checkpoint.dataset_digest) + "\n" +
                      checkpoint.data_position.Serialize() + "\n";
  auto append = [&bytes](const std::vector<float>& values) {
    bytes.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  };
  append(checkpoint.parameters);
  append(checkpoint.velocity);
  bytes += "\nfnv1a64=" + std::to_string(Fnv1a(bytes)) + "\n";
  // The temporary name is unique per host and process; those of dead writers go first, so a
  // writer killed mid-write does not leave a model-sized file behind for good.
  RemoveStaleTemps(dir);
  const std::filesystem::path temp = TempPath(dir);
  if (auto reason = loader::detail::ReplaceFile(path, temp, {std::as_bytes(std::span(bytes))},
                                                /*durable=*/true)) {
    Fail(path, *reason);
  }
}

std::optional<Checkpoint> ReadCheckpoint(const std::filesystem::path& dir) {
  const std::filesystem::path path = CheckpointPath(dir);
  RemoveStaleTemps(dir);
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return std::nullopt;
    Fail(path, "cannot open");
  }
  const std::string bytes{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  return ParseCheckpoint(bytes, path);
}

Checkpoint ParseCheckpoint(const std::string& bytes, const std::filesystem::path& path) {
  const std::size_t trailer = bytes.rfind("\nfnv1a64=");
  if (trailer == std::string::npos) Fail(path, "no checksum trailer (truncated?)");
  const std::string expected = std::to_string(Fnv1a(std::span(bytes.data(), trailer)));
  if (bytes.compare(trailer + 9, std::string::npos, expected + "\n") != 0) {
    Fail(path, "checksum mismatch (damaged file)");
  }
  const std::size_t header_end = bytes.find('\n');
  const std::size_t state_end = bytes.find('\n', header_end + 1);
  if (header_end == std::string::npos || state_end == std::string::npos) Fail(path, "no header");
  std::istringstream header(bytes.substr(0, header_end));
  std::string magic_a, magic_b, step, epoch, core, parameters, velocity, global_batch, digest;
  header >> magic_a >> magic_b >> step >> epoch >> core >> parameters >> velocity;
  header >> global_batch >> digest;  // absent in older checkpoints
  if (magic_a + " " + magic_b != kMagic) Fail(path, "not a tilefeed checkpoint (v1)");
  auto field = [&](const std::string& text, const std::string& key) -> std::string {
    if (text.rfind(key + "=", 0) != 0) Fail(path, "header field " + key + " missing");
    return text.substr(key.size() + 1);
  };
  Checkpoint checkpoint;
  std::size_t parameter_count = 0;
  std::size_t velocity_count = 0;
  try {
    checkpoint.step = std::stoull(field(step, "step"));
    checkpoint.epoch = std::stoull(field(epoch, "epoch"));
    checkpoint.core = field(core, "core");
    parameter_count = std::stoull(field(parameters, "parameters"));
    velocity_count = std::stoull(field(velocity, "velocity"));
    if (!global_batch.empty()) {
      checkpoint.global_batch = std::stoull(field(global_batch, "global_batch"));
    }
    if (!digest.empty()) checkpoint.dataset_digest = std::stoull(field(digest, "dataset_digest"));
  } catch (const std::logic_error&) {
    Fail(path, "bad number in header");
  }
  checkpoint.data_position =
      ParseDataPosition(bytes.substr(header_end + 1, state_end - header_end - 1), path);
  const std::size_t data_begin = state_end + 1;
  // Counts are bounded by the bytes there before any arithmetic: a header may lie.
  const std::size_t floats = data_begin <= trailer ? (trailer - data_begin) / sizeof(float) : 0;
  if (data_begin > trailer || parameter_count > floats ||
      velocity_count > floats - parameter_count ||
      (parameter_count + velocity_count) * sizeof(float) != trailer - data_begin) {
    Fail(path, "size does not match the header");
  }
  checkpoint.parameters.resize(parameter_count);
  checkpoint.velocity.resize(velocity_count);
  // memcpy of 0 bytes from an empty vector's null data() is undefined: skip it.
  if (parameter_count > 0) {
    std::memcpy(checkpoint.parameters.data(), bytes.data() + data_begin,
                parameter_count * sizeof(float));
  }
  if (velocity_count > 0) {
    std::memcpy(checkpoint.velocity.data(),
                bytes.data() + data_begin + parameter_count * sizeof(float),
                velocity_count * sizeof(float));
  }
  return checkpoint;
}

}  // namespace tilefeed::trainer

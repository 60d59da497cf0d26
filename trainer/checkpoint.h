#pragma once

// Checkpoints: the model, the optimizer state and where the data stands, written by
// instance 0 and read by every instance on --resume. A checkpoint is one file,
// DIR/checkpoint.tfck, replaced atomically: the new contents go to a temporary file in DIR,
// which is fsync'ed and renamed over the old one, and DIR is fsync'ed, so a crash leaves
// either the old or the new checkpoint, never a torn one. The file carries a checksum of
// everything in it; a damaged file is refused, not half-loaded. The temporary file is
// DIR/.checkpoint.tfck.tmp.<host>.<pid>; writing or reading a checkpoint removes those that
// writers of this host killed mid-write left (their pid is gone).
//
// Where the data stands is stored as the one data position every BatchStream reports
// (loader::LoaderState, in its one serialization), whether the run read a local dataset or
// remote readers. A checkpoint written with the retired "tilefeed-remote-state v1" line is
// refused, naming the file and why.
//
// Thread safety: plain functions; concurrent writers to one DIR are not supported.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tilefeed/loader/loader.h"

namespace tilefeed::trainer {

// A checkpoint that cannot be written or read; what() names the file and the reason.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Checkpoint {
  std::uint64_t step = 0;             // optimizer steps done
  std::uint64_t epoch = 0;            // the epoch the next step belongs to
  std::string core;                   // the core's name; resume refuses another core
  loader::LoaderState data_position;  // the stream's position() after the last step
  std::vector<float> parameters;
  std::vector<float> velocity;  // the optimizer's state
  // local batch x replicas x instances x gradient accumulation of the run that wrote it;
  // 0 in checkpoints written before it was recorded (unknown).
  std::uint64_t global_batch = 0;
  // loader::Identify's digest of the dataset the run trained on (it covers the content);
  // resume refuses other data. 0 = unknown (no --data, or written before it was recorded).
  std::uint64_t dataset_digest = 0;

  friend bool operator==(const Checkpoint&, const Checkpoint&) = default;
};

// The checkpoint file's path in `dir`.
std::filesystem::path CheckpointPath(const std::filesystem::path& dir);

// Writes `checkpoint` to CheckpointPath(dir) atomically, creating `dir` if needed.
// Throws CheckpointError.
void WriteCheckpoint(const std::filesystem::path& dir, const Checkpoint& checkpoint);

// Reads the checkpoint in `dir`; nullopt when there is none. Throws CheckpointError for a
// file that is damaged or not a checkpoint.
std::optional<Checkpoint> ReadCheckpoint(const std::filesystem::path& dir);

// Parses a checkpoint file's bytes; `path` names it in errors. Throws CheckpointError for
// bytes that are damaged or not a checkpoint; never trusts a size the bytes state.
Checkpoint ParseCheckpoint(const std::string& bytes, const std::filesystem::path& path);

}  // namespace tilefeed::trainer

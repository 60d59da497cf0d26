// cxx_digest: runs the C++ loader and prints one FNV-1a-64 digest per epoch of what it
// delivered, so the Python tests can check that tilefeed.Loader yields the same bytes.
//
//   cxx_digest --data DIR [--source imagefolder|cifar10-train|cifar10-test] [--batch N]
//              [--size S] [--mode train|eval] [--layout nhwc|nchw] [--seed N] [--workers N]
//              [--first-epoch E] [--epochs K]
//
// Each batch adds to the digest, in order: epoch, index and size as little-endian uint64,
// the image bytes, the labels as little-endian int32 and the sample indices as
// little-endian uint64 (tests/test_loader.py computes the same). Output, one line per
// epoch: "epoch=E batches=B digest=<16 hex digits>".

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "loader/cifar.h"
#include "loader/image_folder.h"
#include "tilefeed/loader/loader.h"

namespace {

namespace loader = tilefeed::loader;

static_assert(std::endian::native == std::endian::little, "the digest stream is little-endian");

class Fnv1a64 {
 public:
  void Add(std::span<const std::byte> bytes) {
    for (std::byte b : bytes) {
      hash_ ^= static_cast<std::uint64_t>(b);
      hash_ *= 0x100000001b3ULL;
    }
  }
  template <typename T>
  void AddSpan(std::span<T> values) {
    Add(std::as_bytes(values));
  }
  void AddU64(std::uint64_t value) { AddSpan(std::span<const std::uint64_t>(&value, 1)); }
  std::uint64_t value() const { return hash_; }

 private:
  std::uint64_t hash_ = 0xcbf29ce484222325ULL;
};

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args = {
      {"--source", "imagefolder"}, {"--batch", "8"},       {"--size", "32"},
      {"--mode", "train"},         {"--layout", "nhwc"},   {"--seed", "0"},
      {"--workers", "1"},          {"--first-epoch", "0"}, {"--epochs", "1"},
  };
  for (int i = 1; i + 1 < argc; i += 2) {
    if (args.count(argv[i]) == 0 && std::strcmp(argv[i], "--data") != 0) {
      std::fprintf(stderr, "cxx_digest: unknown option %s\n", argv[i]);
      return 2;
    }
    args[argv[i]] = argv[i + 1];
  }
  if (args.count("--data") == 0) {
    std::fprintf(stderr, "cxx_digest: --data DIR is required\n");
    return 2;
  }
  try {
    loader::LoaderOptions options;
    options.batch_size = std::stoul(args["--batch"]);
    options.image_size = std::stoi(args["--size"]);
    options.mode = args["--mode"] == "eval" ? loader::Mode::kEval : loader::Mode::kTrain;
    options.output.layout =
        args["--layout"] == "nchw" ? loader::Layout::kNchw : loader::Layout::kNhwc;
    options.seed = std::stoull(args["--seed"]);
    options.workers = std::stoi(args["--workers"]);
    const std::uint64_t first_epoch = std::stoull(args["--first-epoch"]);
    options.epochs = std::stoull(args["--epochs"]);
    const std::string& kind = args["--source"];
    std::unique_ptr<loader::Source> source;
    if (kind == "cifar10-train") {
      source = loader::Cifar10::Open(args["--data"], loader::Split::kTrain);
    } else if (kind == "cifar10-test") {
      source = loader::Cifar10::Open(args["--data"], loader::Split::kTest);
    } else {
      source = loader::ImageFolder::Open(args["--data"]);
    }
    const std::uint64_t size = source->size();
    loader::Loader run(std::move(source), options,
                       loader::LoaderState{options.seed, first_epoch, 0, size});
    for (std::uint64_t e = 0; e < options.epochs; ++e) {
      Fnv1a64 digest;
      std::size_t batches = 0;
      while (auto batch = run.Next()) {
        digest.AddU64(batch->epoch());
        digest.AddU64(batch->index());
        digest.AddU64(batch->size());
        digest.AddSpan(batch->images());
        digest.AddSpan(batch->labels());
        digest.AddSpan(batch->sample_indices());
        ++batches;
      }
      std::printf("epoch=%llu batches=%zu digest=%016llx\n",
                  static_cast<unsigned long long>(first_epoch) + e, batches,
                  static_cast<unsigned long long>(digest.value()));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cxx_digest: %s\n", e.what());
    return 1;
  }
  return 0;
}

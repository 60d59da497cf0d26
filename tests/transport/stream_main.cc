// The trainer half of the two-host test (two_hosts_test.sh): connects a ZmqBatchStream to a
// tilefeed-serve, optionally with CURVE, reads `--epochs` epochs and checks that each one
// delivers every sample id in [0, --samples) exactly once. Prints "stream_main: OK" and
// exits 0, or names what failed and exits 1.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "tilefeed/transport/context.h"
#include "tilefeed/transport/session.h"
#include "tilefeed/transport/streams.h"

namespace {

using namespace tilefeed;

int Run(int argc, char** argv) {
  CLI::App app{"stream_main: read epochs from a tilefeed-serve and check them"};
  transport::StreamOptions options;
  std::size_t epochs = 1;
  std::uint64_t samples = 0;
  int timeout_ms = 10000;
  app.add_option("--connect", options.endpoint, "the reader's endpoint")->required();
  app.add_option("--curve-server-key", options.curve_server_key_file,
                 "CURVE: key file with the reader's public key");
  app.add_option("--curve-key", options.curve_client_key_file,
                 "CURVE: this trainer's own key file (for a reader with an allow-list)");
  app.add_option("--epochs", epochs, "epochs to read")->capture_default_str();
  app.add_option("--samples", samples, "samples per epoch")->required();
  app.add_option("--timeout-ms", timeout_ms, "reader silent this long is an error")
      ->capture_default_str();
  // The session terms (tilefeed/transport/session.h) the reader must agree to; the dataset's
  // identity is left unknown.
  transport::SessionTerms terms;
  terms.batch_size = 8;
  terms.image_size = 32;
  app.add_option("--batch-size", terms.batch_size, "the reader's --batch-size")
      ->capture_default_str();
  std::string image_size = "32";
  app.add_option("--image-size", image_size, "the reader's --image-size")->capture_default_str();
  app.add_flag("--drop-last", terms.drop_last, "the reader drops each epoch's partial batch");
  CLI11_PARSE(app, argc, argv);
  terms.image_size = loader::SizeSchedule::Parse(image_size);
  terms.epochs = epochs;
  options.terms = terms;
  options.peer_timeout = std::chrono::milliseconds(timeout_ms);
  transport::Context context;
  transport::ZmqBatchStream stream(context, options);
  std::size_t batches = 0;
  for (std::size_t epoch = 0; epoch < epochs; ++epoch) {
    std::vector<std::uint64_t> seen;
    while (std::optional<transport::ReceivedBatch> batch = stream.Next()) {
      seen.insert(seen.end(), batch->sample_indices().begin(), batch->sample_indices().end());
      ++batches;
    }
    if (stream.ended() && epoch + 1 < epochs) {
      std::printf("stream_main: FAILED: the stream ended after %zu epochs\n", epoch);
      return 1;
    }
    std::sort(seen.begin(), seen.end());
    std::vector<std::uint64_t> want(samples);
    for (std::uint64_t i = 0; i < samples; ++i) want[i] = i;
    if (seen != want) {
      std::printf("stream_main: FAILED: epoch %zu delivered %zu ids, not each of %llu once\n",
                  epoch, seen.size(), static_cast<unsigned long long>(samples));
      return 1;
    }
  }
  // The reader's bye follows the last epoch; waiting for it lets the reader finish first.
  if (stream.Next().has_value() || !stream.ended()) {
    std::printf("stream_main: FAILED: the stream goes on after %zu epochs\n", epochs);
    return 1;
  }
  std::printf("stream_main: %zu epochs, %zu batches from %s%s: OK\n", epochs, batches,
              options.endpoint.c_str(), options.curve_server_key_file.empty() ? "" : " (CURVE)");
  return 0;
}

}  // namespace

// Run's errors (a refused connection, a broken session) are a failed check, reported on the
// line that says FAILED.
int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::printf("stream_main: FAILED: %s\n", e.what());
    return 1;
  }
}

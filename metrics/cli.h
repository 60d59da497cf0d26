#pragma once

// The metrics options every tool takes, in one place: the values of the group flag
// --metrics file=PATH,interval=SECONDS,port=[HOST:]PORT,bind=ADDR (loader::kMetrics; port and
// bind for tools that serve; tools/option_flags.h registers it), where the exporter listens,
// and the config record's option list taken from the parsed command line. A tool registers the
// flag before parsing, then calls Open() once it knows its instance and dataset.
//
// Thread safety: plain values and functions of the caller's thread.

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "metrics/metrics.h"
#include "metrics/prometheus.h"

namespace tilefeed::metrics {

struct Flags {
  std::string path;  // file= ("" = off)
  double interval_seconds = 10;
  std::string port;  // port= ("" = off): PORT, or HOST:PORT
  // bind=: the address a bare port=PORT listens on instead of 127.0.0.1, loopback or not
  // ("" = 127.0.0.1). The endpoint has no authentication: this is the word that opens it
  // beyond the host.
  std::string bind;
  // Added to a non-zero port: this instance's index among those of its host (the tool sets
  // it from the launcher, launch::InstanceInfo::local_index), so that the instances of one
  // host started with one port=P listen on P, P+1, ... and each prints its URL.
  int port_offset = 0;
};

// The "HOST:PORT" the exporter listens on: port's HOST, else bind, else 127.0.0.1; and its
// PORT plus port_offset when it is not 0. HOST:PORT is read by the readers' parser with the
// readers' loopback rule (loader/address.h), so what tilefeed-serve --bind tcp://HOST:PORT
// refuses, --metrics port=HOST:PORT refuses with the same line; only bind= names another
// address, and only with port=. Throws MetricsError with that one line, "--metrics port=...: ".
std::string ListenAddress(const Flags& flags);

// Every option of the parsed `app` with its value (given or default), "--name" -> "value";
// --metrics and --help are left out.
std::vector<std::pair<std::string, std::string>> OptionsOf(const CLI::App& app);

// The tool's metrics: a Writer when file= was given, and an exporter when port= was (which
// needs figures, so it gets a Writer of its own to /dev/null-like use: the JSON lines then go
// to nowhere unless file= is given too). Members are null when off.
struct Session {
  std::unique_ptr<Writer> writer;
  std::unique_ptr<PrometheusExporter> exporter;
  // Forwarders that do nothing when metrics are off, so tools call them unconditionally.
  void SetLoader(std::function<loader::LoaderMetrics()> probe) {
    if (writer) writer->SetLoader(std::move(probe));
  }
  void Finish(const std::string& exit, const std::string& error = "") {
    if (writer) writer->Finish(exit, error);
  }
  // Detaches the loader probe when it goes out of scope: declare it right after the Loader
  // it reads, so it is gone before the Loader is, however the scope is left.
  class ScopedLoader {
   public:
    ScopedLoader(Session& session, std::function<loader::LoaderMetrics()> probe)
        : session_(session) {
      session_.SetLoader(std::move(probe));
    }
    ~ScopedLoader() { session_.SetLoader({}); }
    ScopedLoader(const ScopedLoader&) = delete;
    ScopedLoader& operator=(const ScopedLoader&) = delete;

   private:
    Session& session_;
  };
  // Writes an epoch record (see Writer::EndEpoch) when metrics are on.
  void EndEpoch(std::uint64_t epoch, std::optional<double> loss = {},
                std::optional<double> accuracy = {}, std::optional<double> val_accuracy = {}) {
    if (writer) writer->EndEpoch(epoch, loss, accuracy, val_accuracy);
  }
  void AddStep(std::uint64_t epoch, std::uint64_t images, double wait_seconds,
               double busy_seconds) {
    if (writer) writer->AddStep(epoch, images, wait_seconds, busy_seconds);
  }
  explicit operator bool() const { return writer != nullptr; }
};

// Opens what `flags` ask for (the tool name and options go in `info`), and prints the
// endpoint's URL with the address actually bound on stderr. Throws MetricsError.
Session Open(const Flags& flags, RunInfo info);

}  // namespace tilefeed::metrics

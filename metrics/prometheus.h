#pragma once

// A Prometheus endpoint for a Writer's figures: GET http://HOST:PORT/metrics answers in the
// Prometheus text exposition format 0.0.4 (written here) from a small server thread of the
// exporter's own, serving up to 64 connections at once (each closed 5 s after it opened), with
// the Writer's Totals taken at the moment of the scrape. Counters (tilefeed_images_total, ...) only
// grow; gauges (tilefeed_rss_bytes, ...) are the value now. Every series carries a
// `tilefeed_instance` label with the tool's instance index and a `tool` label; not
// `instance`, which Prometheus reserves for the scrape target (and renames to
// `exported_instance`). Any other path than /metrics answers 404, any other method than GET
// (and HEAD) 405, a request head over 8 KiB 431; the endpoint stays up.
//
// Thread safety: scrapes run on the server's thread and read the Writer through
// Writer::totals(), which is thread-safe. The Writer must outlive the exporter.

#include <memory>
#include <string>

#include "metrics/metrics.h"

namespace tilefeed::metrics {

class PrometheusExporter {
 public:
  // Listens on `address` ("HOST:PORT", "[IPv6]:PORT"; port 0 picks a free one). Throws
  // MetricsError naming the address when it cannot listen.
  PrometheusExporter(const std::string& address, const std::string& tool, const Writer& writer);
  ~PrometheusExporter();
  PrometheusExporter(const PrometheusExporter&) = delete;
  PrometheusExporter& operator=(const PrometheusExporter&) = delete;

  // The port it listens on (the one chosen, for port 0).
  int port() const;
  // "HOST:PORT" as bound: the host asked for and port().
  std::string address() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tilefeed::metrics

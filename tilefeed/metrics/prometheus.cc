#include "tilefeed/metrics/prometheus.h"

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>

#include <exception>
#include <vector>

namespace tilefeed::metrics {
namespace {

// Builds the families from the Writer's Totals on every scrape: nothing is stored, so the
// endpoint can never disagree with the JSON lines.
class TotalsCollectable final : public prometheus::Collectable {
 public:
  TotalsCollectable(const Writer& writer, std::string tool)
      : writer_(writer), tool_(std::move(tool)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    const Totals t = writer_.totals();
    std::vector<prometheus::MetricFamily> out;
    using prometheus::MetricType;
    Add(out, "tilefeed_images_total", "Images consumed", MetricType::Counter, double(t.images));
    Add(out, "tilefeed_batches_total", "Batches handed out by the loader", MetricType::Counter,
        double(t.batches));
    Add(out, "tilefeed_steps_total", "Steps (or batches) the consumer finished",
        MetricType::Counter, double(t.step));
    Add(out, "tilefeed_read_bytes_total", "Encoded bytes read from the dataset",
        MetricType::Counter, double(t.bytes_read));
    Add(out, "tilefeed_input_wait_seconds_total", "Consumer time blocked waiting for input",
        MetricType::Counter, t.wait_seconds);
    Add(out, "tilefeed_busy_seconds_total", "Consumer time in its own work", MetricType::Counter,
        t.busy_seconds);
    Add(out, "tilefeed_read_seconds_total", "Loader worker time reading, summed over workers",
        MetricType::Counter, t.read_seconds);
    Add(out, "tilefeed_decode_seconds_total", "Loader worker time decoding, summed over workers",
        MetricType::Counter, t.decode_seconds);
    Add(out, "tilefeed_resize_seconds_total", "Loader worker time resizing, summed over workers",
        MetricType::Counter, t.resize_seconds);
    Add(out, "tilefeed_bad_samples_total", "Samples reported bad", MetricType::Counter,
        double(t.bad_samples));
    Add(out, "tilefeed_elapsed_seconds", "Seconds since the metrics started", MetricType::Gauge,
        t.elapsed_seconds);
    Add(out, "tilefeed_epoch", "The epoch the consumer is in", MetricType::Gauge, double(t.epoch));
    Add(out, "tilefeed_ring_slots", "Prefetch ring capacity in batches", MetricType::Gauge,
        double(t.ring_slots));
    Add(out, "tilefeed_rss_bytes", "Resident memory", MetricType::Gauge, t.rss_mib * (1 << 20));
    Add(out, "tilefeed_open_fds", "Open file descriptors", MetricType::Gauge, double(t.open_fds));
    return out;
  }

 private:
  void Add(std::vector<prometheus::MetricFamily>& out, const char* name, const char* help,
           prometheus::MetricType type, double value) const {
    prometheus::ClientMetric metric;
    metric.label = {{"instance", std::to_string(writer_.instance())}, {"tool", tool_}};
    if (type == prometheus::MetricType::Counter) {
      metric.counter.value = value;
    } else {
      metric.gauge.value = value;
    }
    out.push_back({name, help, type, {metric}});
  }

  const Writer& writer_;
  std::string tool_;
};

}  // namespace

struct PrometheusExporter::Impl {
  std::shared_ptr<TotalsCollectable> collectable;
  std::unique_ptr<prometheus::Exposer> exposer;
};

PrometheusExporter::PrometheusExporter(const std::string& address, const std::string& tool,
                                       const Writer& writer)
    : impl_(std::make_unique<Impl>()) {
  impl_->collectable = std::make_shared<TotalsCollectable>(writer, tool);
  try {
    // civetweb takes "PORT" (all interfaces) or "HOST:PORT".
    impl_->exposer = std::make_unique<prometheus::Exposer>(address, 1);
  } catch (const std::exception& e) {
    throw MetricsError("cannot serve Prometheus metrics on " + address + ": " + e.what());
  }
  impl_->exposer->RegisterCollectable(impl_->collectable);
}

PrometheusExporter::~PrometheusExporter() = default;

int PrometheusExporter::port() const {
  const std::vector<int> ports = impl_->exposer->GetListeningPorts();
  return ports.empty() ? 0 : ports.front();
}

}  // namespace tilefeed::metrics

#include "trainer/stall.h"

#include <cassert>
#include <cmath>
#include <cstdio>

namespace tilefeed::trainer {

void StallMeter::AddStep(double wait_seconds, double busy_seconds) {
  assert(wait_seconds >= 0 && busy_seconds >= 0);
  ++steps_;
  wait_seconds_ += wait_seconds;
  busy_seconds_ += busy_seconds;
}

double StallMeter::stall_fraction() const {
  const double total = step_seconds();
  return total > 0 ? wait_seconds_ / total : 0.0;
}

void StallMeter::Merge(const StallMeter& other) {
  steps_ += other.steps_;
  wait_seconds_ += other.wait_seconds_;
  busy_seconds_ += other.busy_seconds_;
  fill_seconds_ += other.fill_seconds_;
}

namespace {

std::string Number(double value) {
  if (!std::isfinite(value)) return "null";
  char text[40];
  std::snprintf(text, sizeof(text), "%.6g", value);
  return text;
}

std::string Optional(const std::optional<double>& value) { return value ? Number(*value) : "null"; }

}  // namespace

std::string ToJsonLine(const EpochReport& r) {
  return "{\"epoch\":" + std::to_string(r.epoch) + ",\"steps\":" + std::to_string(r.steps) +
         ",\"global_step\":" + std::to_string(r.global_step) +
         ",\"images\":" + std::to_string(r.images) +
         ",\"bad_samples\":" + std::to_string(r.bad_samples) + ",\"seconds\":" + Number(r.seconds) +
         ",\"images_per_second\":" + Number(r.images_per_second) + ",\"loss\":" + Number(r.loss) +
         ",\"accuracy\":" + Optional(r.accuracy) + ",\"stall_percent\":" + Number(r.stall_percent) +
         ",\"wait_seconds\":" + Number(r.wait_seconds) +
         ",\"fill_seconds\":" + Number(r.fill_seconds) + ",\"step_ms\":" +
         Number(r.steps > 0 ? 1e3 * r.seconds / static_cast<double>(r.steps) : 0) +
         ",\"allreduce\":\"" + r.allreduce +
         "\",\"allreduce_exposed_seconds\":" + Number(r.allreduce_exposed_seconds) +
         ",\"val_loss\":" + Optional(r.val_loss) + ",\"val_accuracy\":" + Optional(r.val_accuracy) +
         ",\"val_images\":" + std::to_string(r.val_images) + "}";
}

}  // namespace tilefeed::trainer

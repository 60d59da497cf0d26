#pragma once

// tilefeed.Batch, the one batch type of the Python module: a loader slot's images, labels and
// sample indices as numpy and DLPack views that hold the slot (python/tilefeed_module.cc's
// design note), or a GPU batch's tensors (tilefeed.cuda).

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <span>

#include "tilefeed/loader/loader.h"

namespace tilefeed::python {

// One batch's memory: a loader slot. Holds no Python object.
struct BatchData {
  // The owner of the Loader (the module's Core), declared first: the slot goes back before
  // the Loader can go.
  std::shared_ptr<const void> owner;
  loader::Batch batch;
  std::span<std::uint8_t> images;
  std::span<std::byte> output;  // LoaderOptions::output's conversion; empty for uint8
  loader::OutputDType dtype = loader::OutputDType::kUint8;  // of `output`, or uint8 `images`
  loader::Layout layout = loader::Layout::kNhwc;            // of the pixels exposed
  std::span<const std::int32_t> labels;
  std::span<const std::uint64_t> indices;
};

// A tilefeed.Batch of `data`'s slot.
pybind11::object MakeBatch(std::shared_ptr<BatchData> data);

// Adds Batch to `m`.
void RegisterBatch(pybind11::module_& m);

}  // namespace tilefeed::python

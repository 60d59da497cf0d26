#pragma once

// The Python module's pieces for tilefeed.cuda (python/tilefeed/cuda.py): slot memory the
// Python side owns (page-locked by PyTorch's pinned allocator), and the device conversion
// (tilefeed::cuda::ConvertOnDevice) where the module was built with CUDA.

#include <pybind11/pybind11.h>

#include <memory>

#include "tilefeed/loader/loader.h"

namespace tilefeed::python {

// SlotMemory over caller-owned regions: `regions` is a sequence of prefetch_depth pairs
// (address, bytes), one per slot, each at least _slot_layout(samples, image_bytes)[2] bytes.
// The caller keeps the memory alive and unused by anything else while the Loader lives.
// Throws ValueError (std::invalid_argument) naming a region that is too short.
std::shared_ptr<loader::SlotMemory> ExternalSlotMemory(const pybind11::handle& regions);

// Adds _slot_layout, _cuda_built, _cuda_available and (with CUDA) _cuda_convert to `m`.
void RegisterCuda(pybind11::module_& m);

}  // namespace tilefeed::python

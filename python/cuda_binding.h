#pragma once

// The Python module's pieces for tilefeed.cuda (python/tilefeed/cuda.py). Where the module
// was built with CUDA: _PinnedSlotMemory, the loader's slots in page-locked memory
// (cuda::PinnedSlotMemory), and _DeviceFeed, cuda::DeviceFeed over a CudaDevice fed by a
// Python Loader's batches: the one GPU feed, its protocol all in C++.

#include <pybind11/pybind11.h>

#include "tilefeed/loader/output_format.h"
#include "tilefeed/transport/batch_stream.h"

namespace tilefeed::python {

// A tilefeed Batch as a ReceivedBatch that holds the batch's loader slot until destroyed,
// whatever Python does with the Batch (defined beside the Batch, in batch_binding.cc).
// Throws TypeError for another object, ValueError for a released Batch.
transport::ReceivedBatch ReceiveBatch(const pybind11::handle& batch);

// The consumer's output format in Loader keywords (dtype, mean, std, layout), parsed and
// checked by the module's one parser of Loader options (tilefeed_module.cc). Throws
// ValueError or TypeError naming a bad one.
loader::OutputFormat ParseOutputFormat(const pybind11::dict& options);

// Adds _SlotMemory (what Loader's _slot_memory takes), _cuda_built and, with CUDA,
// _PinnedSlotMemory and _DeviceFeed to `m`.
void RegisterCuda(pybind11::module_& m);

}  // namespace tilefeed::python

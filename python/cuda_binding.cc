#include "cuda_binding.h"

#include <pybind11/stl.h>

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tilefeed/loader/output_format.h"
#ifdef TILEFEED_HAVE_CUDA
#include "tilefeed/cuda/device.h"
#endif

namespace py = pybind11;

namespace tilefeed::python {
namespace {

// Where a slot's parts lie in one region: images at 0, then labels and indices, each
// 64-byte aligned. Returns (labels offset, indices offset, total bytes).
std::tuple<std::size_t, std::size_t, std::size_t> SlotLayout(std::size_t samples,
                                                             std::size_t image_bytes) {
  const std::size_t labels = (samples * image_bytes + 63) / 64 * 64;
  const std::size_t indices = labels + (samples * sizeof(std::int32_t) + 63) / 64 * 64;
  return {labels, indices, indices + samples * sizeof(std::uint64_t)};
}

class RegionSlotMemory : public loader::SlotMemory {
 public:
  explicit RegionSlotMemory(std::vector<std::pair<std::uintptr_t, std::size_t>> regions)
      : regions_(std::move(regions)) {}

  Spans Slot(std::size_t slot, std::size_t slots, std::size_t samples,
             std::size_t image_bytes) override {
    if (regions_.size() != slots) {
      throw std::invalid_argument("slot_memory: " + std::to_string(regions_.size()) +
                                  " regions for prefetch_depth=" + std::to_string(slots));
    }
    const auto [labels, indices, total] = SlotLayout(samples, image_bytes);
    const auto [address, bytes] = regions_[slot];
    if (bytes < total || address % 64 != 0) {
      throw std::invalid_argument("slot_memory: region " + std::to_string(slot) + " has " +
                                  std::to_string(bytes) + " bytes at address " +
                                  std::to_string(address) + "; needs " + std::to_string(total) +
                                  ", 64-byte aligned");
    }
    // The caller's memory, given by address (a pinned torch tensor's data_ptr()).
    auto* base = reinterpret_cast<std::uint8_t*>(address);  // NOLINT(performance-no-int-to-ptr)
    return Spans{{base, samples * image_bytes},
                 {reinterpret_cast<std::int32_t*>(base + labels), samples},
                 {reinterpret_cast<std::uint64_t*>(base + indices), samples}};
  }

 private:
  std::vector<std::pair<std::uintptr_t, std::size_t>> regions_;
};

#ifdef TILEFEED_HAVE_CUDA
loader::OutputFormat ParseFormat(const std::string& dtype, const std::string& layout,
                                 const std::array<float, 3>& mean,
                                 const std::array<float, 3>& std) {
  loader::OutputFormat format;
  if (dtype == "float16") {
    format.dtype = loader::OutputDType::kFloat16;
  } else if (dtype == "bfloat16") {
    format.dtype = loader::OutputDType::kBFloat16;
  } else if (dtype == "float32") {
    format.dtype = loader::OutputDType::kFloat32;
  } else if (dtype == "uint8") {
    format.dtype = loader::OutputDType::kUint8;
  } else {
    throw std::invalid_argument("dtype must be uint8, float16, bfloat16 or float32, got " + dtype);
  }
  if (layout != "nchw" && layout != "nhwc") {
    throw std::invalid_argument("layout must be nchw or nhwc, got " + layout);
  }
  format.layout = layout == "nchw" ? loader::OutputLayout::kNCHW : loader::OutputLayout::kNHWC;
  format.mean = mean;
  format.std = std;
  cuda::CheckFormat(format);
  return format;
}

// Enqueues the conversion of `src` into `dst` (device addresses) on `stream` (a
// cudaStream_t as an integer, e.g. torch.cuda.Stream.cuda_stream).
void Convert(std::uintptr_t src, std::uintptr_t dst, std::size_t samples, int height, int width,
             const std::string& dtype, const std::string& layout, const std::array<float, 3>& mean,
             const std::array<float, 3>& std, std::uintptr_t stream) {
  const loader::OutputFormat format = ParseFormat(dtype, layout, mean, std);
  // Device addresses and a stream handle as Python hands them over: integers.
  // NOLINTBEGIN(performance-no-int-to-ptr)
  cuda::ConvertOnDevice(reinterpret_cast<const std::uint8_t*>(src), reinterpret_cast<void*>(dst),
                        cuda::BatchShape{samples, height, width}, format,
                        reinterpret_cast<cuda::StreamHandle>(stream));
  // NOLINTEND(performance-no-int-to-ptr)
}
#endif

}  // namespace

std::shared_ptr<loader::SlotMemory> ExternalSlotMemory(const py::handle& regions) {
  auto parsed = regions.cast<std::vector<std::pair<std::uintptr_t, std::size_t>>>();
  return std::make_shared<RegionSlotMemory>(std::move(parsed));
}

void RegisterCuda(py::module_& m) {
  m.def("_slot_layout", &SlotLayout, py::arg("samples"), py::arg("image_bytes"),
        "(labels offset, indices offset, total bytes) of one slot region for slot_memory");
#ifdef TILEFEED_HAVE_CUDA
  m.attr("_cuda_built") = true;
  m.def("_cuda_available", [] {
    std::string why;
    const bool ok = cuda::DeviceAvailable(&why);
    return py::make_tuple(ok, why);
  });
  py::register_exception<cuda::CudaError>(m, "_CudaError", PyExc_RuntimeError);
  m.def("_cuda_convert", &Convert, py::arg("src"), py::arg("dst"), py::arg("samples"),
        py::arg("height"), py::arg("width"), py::arg("dtype"), py::arg("layout"), py::arg("mean"),
        py::arg("std"), py::arg("stream"),
        "enqueues tilefeed::cuda::ConvertOnDevice on a stream (device addresses as ints)");
#else
  m.attr("_cuda_built") = false;
#endif
}

}  // namespace tilefeed::python

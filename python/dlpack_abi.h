#pragma once

// The DLPack 0.x ABI (dlpack.h v0.6/0.7) that torch 1.13's from_dlpack consumes from a
// capsule named "dltensor": the structs a tilefeed.Batch hands torch its images in,
// declared here rather than vendoring the header.

#include <cstdint>

namespace tilefeed::python {

struct DLDevice {
  std::int32_t device_type;  // kDLCPU = 1
  std::int32_t device_id;
};
struct DLDataType {
  std::uint8_t code;  // kDLInt = 0, kDLUInt = 1, kDLFloat = 2
  std::uint8_t bits;
  std::uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  std::int32_t ndim;
  DLDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;  // in elements
  std::uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};
constexpr std::int32_t kDLCPU = 1;
constexpr std::uint8_t kDLUInt = 1;
constexpr std::uint8_t kDLFloat = 2;
constexpr std::uint8_t kDLBfloat = 4;

}  // namespace tilefeed::python

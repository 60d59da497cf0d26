#include "cuda_binding.h"

#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>

#include "tilefeed/loader/loader.h"
#include "tilefeed/loader/output_format.h"
#ifdef TILEFEED_HAVE_CUDA
#include "tilefeed/cuda/device.h"
#include "tilefeed/cuda/feed.h"
#endif

namespace py = pybind11;

namespace tilefeed::python {
namespace {

#ifdef TILEFEED_HAVE_CUDA
// A Python Loader's batches as a BatchStream. The Python Loader keeps what it owns (epochs,
// state_dict, Ctrl-C while waiting, bad-sample warnings); each of its Batches comes over
// zero-copy, its slot held by the ReceivedBatch. `source`, set for each Next() of the feed,
// returns the next Batch or None at the end of the epoch. Used with the GIL held.
class PythonLoaderStream final : public transport::BatchStream {
 public:
  std::optional<transport::ReceivedBatch> Next() override {
    py::object batch = source_();
    if (batch.is_none()) return std::nullopt;
    return ReceiveBatch(batch);
  }
  bool ended() const override { return false; }  // the Python Loader says so
  std::size_t batches_per_epoch() const override { return 0; }
  loader::LoaderState position() const override { return {}; }  // the Python Loader's
  py::object source_;
};

// cuda::DeviceFeed on the current CUDA device, fed by a PythonLoaderStream.
class PyDeviceFeed {
 public:
  PyDeviceFeed(std::size_t buffers, std::size_t max_host_batches, std::size_t samples, int height,
               int width, const py::dict& output)
      : format_(ParseOutputFormat(output)),
        device_(buffers, cuda::BatchShape{samples, height, width}, format_),
        feed_(stream_, device_, buffers, max_host_batches) {}

  // The next batch, handed over to `consumer` (a cudaStream_t as an int), or None at the end
  // of the epoch.
  std::optional<cuda::DeviceBatch> Next(const py::object& source, std::uintptr_t consumer) {
    stream_.source_ = source;
    struct Reset {
      py::object& source;
      ~Reset() { source = py::object(); }
    } reset{stream_.source_};
    // NOLINTNEXTLINE(performance-no-int-to-ptr): a stream handle as Python holds it
    return feed_.Next(reinterpret_cast<cuda::StreamHandle>(consumer));
  }

  std::uintptr_t images(const cuda::DeviceBatch& batch) const {
    return reinterpret_cast<std::uintptr_t>(device_.images(batch.buffer()));
  }
  std::uintptr_t labels(const cuda::DeviceBatch& batch) const {
    return reinterpret_cast<std::uintptr_t>(device_.labels(batch.buffer()));
  }
  std::size_t images_bytes(const cuda::DeviceBatch& batch) const {
    return cuda::ConvertedBytes(batch.shape(), format_);
  }
  std::uintptr_t copy_stream() const {
    return reinterpret_cast<std::uintptr_t>(device_.copy_stream());
  }

 private:
  loader::OutputFormat format_;
  PythonLoaderStream stream_;
  cuda::CudaDevice device_;
  cuda::DeviceFeed feed_;  // last: destroyed first, waiting for its copies
};

void RegisterFeed(py::module_& m) {
  py::register_exception<cuda::CudaError>(m, "_CudaError", PyExc_RuntimeError);
  m.def(
      "_PinnedSlotMemory",
      []() -> std::shared_ptr<loader::SlotMemory> {
        return std::make_shared<cuda::PinnedSlotMemory>();
      },
      "loader slots in page-locked memory (cudaHostAlloc), for Loader(_slot_memory=...)");
  py::class_<cuda::DeviceBatch>(m, "_DeviceBatch")
      .def_property_readonly("epoch", &cuda::DeviceBatch::epoch)
      .def_property_readonly("index", &cuda::DeviceBatch::index)
      .def_property_readonly("size", [](const cuda::DeviceBatch& b) { return b.shape().samples; })
      .def_property_readonly("height", [](const cuda::DeviceBatch& b) { return b.shape().height; })
      .def_property_readonly("width", [](const cuda::DeviceBatch& b) { return b.shape().width; })
      .def("release", &cuda::DeviceBatch::Release,
           "marks the device buffer released on the consumer stream, after the work enqueued "
           "there so far");
  py::class_<PyDeviceFeed>(m, "_DeviceFeed")
      .def(py::init<std::size_t, std::size_t, std::size_t, int, int, const py::dict&>(),
           py::arg("buffers"), py::arg("max_host_batches"), py::arg("samples"), py::arg("height"),
           py::arg("width"), py::arg("output"),
           "output: dtype, mean, std and layout as Loader keywords")
      .def("next", &PyDeviceFeed::Next, py::arg("source"), py::arg("consumer"),
           py::keep_alive<0, 1>(),  // a DeviceBatch must not outlive its feed
           "cuda::DeviceFeed::Next: source() gives the next tilefeed Batch or None")
      .def("images", &PyDeviceFeed::images, "device address of a batch's converted images")
      .def("labels", &PyDeviceFeed::labels, "device address of a batch's int32 labels")
      .def("images_bytes", &PyDeviceFeed::images_bytes)
      .def_property_readonly("copy_stream", &PyDeviceFeed::copy_stream,
                             "the cudaStream_t the feed copies and converts on, as an int");
}
#endif

}  // namespace

void RegisterCuda(py::module_& m) {
  py::class_<loader::SlotMemory, std::shared_ptr<loader::SlotMemory>>(m, "_SlotMemory")
      .attr("__doc__") = "loader::SlotMemory: where a Loader's slots live (_slot_memory=)";
#ifdef TILEFEED_HAVE_CUDA
  m.attr("_cuda_built") = true;
  RegisterFeed(m);
#else
  m.attr("_cuda_built") = false;
#endif
}

}  // namespace tilefeed::python

#include "batch_binding.h"

#include <pybind11/numpy.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cuda_binding.h"
#include "dlpack_abi.h"
#include "options_binding.h"

namespace tilefeed::python {
namespace py = pybind11;
namespace {

// What numpy and DLPack need to describe the images.
struct ImageShape {
  std::int64_t shape[4];
  std::int64_t strides[4];  // in elements
};

ImageShape ShapeOf(std::size_t size, int height, int width, loader::Layout layout) {
  const std::int64_t n = static_cast<std::int64_t>(size), h = height, w = width, c = 3;
  if (layout == loader::Layout::kNchw) return {{n, c, h, w}, {c * h * w, h * w, w, 1}};
  return {{n, h, w, c}, {h * w * c, w * c, c, 1}};
}

// A numpy base that owns one reference to the batch.
py::capsule Keeper(const std::shared_ptr<BatchData>& data) {
  return py::capsule(new std::shared_ptr<BatchData>(data),
                     [](void* p) { delete static_cast<std::shared_ptr<BatchData>*>(p); });
}

struct DlpackContext {
  std::shared_ptr<BatchData> data;
  ImageShape shape;
  DLManagedTensor tensor;
};

void DeleteDlpack(DLManagedTensor* tensor) {
  delete static_cast<DlpackContext*>(tensor->manager_ctx);
}

// A capsule that has not been consumed still owns its tensor; a consumer renames it to
// "used_dltensor" and calls the deleter itself.
void DeleteDlpackCapsule(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* tensor = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    tensor->deleter(tensor);
  }
}

// The batch's pixels as DLPack and numpy describe them.
DLDataType DlpackType(loader::OutputDType dtype) {
  switch (dtype) {
    case loader::OutputDType::kFloat16:
      return {kDLFloat, 16, 1};
    case loader::OutputDType::kBFloat16:
      return {kDLBfloat, 16, 1};
    case loader::OutputDType::kFloat32:
      return {kDLFloat, 32, 1};
    case loader::OutputDType::kUint8:
      break;
  }
  return {kDLUInt, 8, 1};
}

// The Python Batch. Keeps the metadata after release() so that repr() still works.
class PyBatch {
 public:
  explicit PyBatch(std::shared_ptr<BatchData> data)
      : data_(std::move(data)),
        epoch_(data_->batch.epoch()),
        index_(data_->batch.index()),
        size_(data_->batch.size()),
        height_(data_->batch.height()),
        width_(data_->batch.width()),
        layout_(data_->layout),
        dtype_(data_->dtype),
        substituted_(data_->batch.substituted()) {}

  // A batch on a GPU (tilefeed.cuda): its tensors are copies out of the device feed's ring
  // and hold no loader slot. `dtype` is one of DTypeName's.
  PyBatch(py::object images, py::object labels, std::uint64_t epoch, std::uint64_t index,
          std::size_t size, int height, int width, const std::string& layout,
          const std::string& dtype, py::object copy_events)
      : device_(Device{std::move(images), std::move(labels), std::move(copy_events)}),
        epoch_(epoch),
        index_(index),
        size_(size),
        height_(height),
        width_(width),
        layout_(layout == "nchw" ? loader::Layout::kNchw : loader::Layout::kNhwc),
        dtype_(loader::OutputDType::kUint8),
        substituted_(0) {
    for (auto type : {loader::OutputDType::kFloat16, loader::OutputDType::kBFloat16,
                      loader::OutputDType::kFloat32}) {
      if (dtype == DTypeName(type)) dtype_ = type;
    }
  }

  std::uint64_t epoch() const { return epoch_; }
  std::uint64_t index() const { return index_; }
  std::size_t size() const { return size_; }
  int height() const { return height_; }
  int width() const { return width_; }
  std::string layout() const { return LayoutName(layout_); }
  std::string dtype() const { return DTypeName(dtype_); }
  std::size_t substituted() const { return substituted_; }
  bool released() const { return data_ == nullptr && !device_; }
  // "cpu", or the GPU tensors' device ("cuda:0").
  std::string device() const {
    return device_ ? py::str(device_->images.attr("device")).cast<std::string>() : "cpu";
  }
  // The CUDA events around the feed's copy with tilefeed.cuda's timing=True, else None.
  py::object copy_events() const { return device_ ? device_->copy_events : py::none(); }

  py::object images() const {
    if (device_) return device_->images;
    const BatchData& d = Live();
    const ImageShape s = ShapeOf(size_, height_, width_, layout_);
    py::dtype type = py::dtype::of<std::uint8_t>();
    void* pixels = d.images.data();
    if (dtype_ == loader::OutputDType::kBFloat16) {
      throw py::type_error(
          "tilefeed.Batch.images: numpy has no bfloat16; use batch.torch() (DLPack)");
    }
    if (dtype_ != loader::OutputDType::kUint8) {
      type = py::dtype(dtype_ == loader::OutputDType::kFloat16 ? "float16" : "float32");
      pixels = d.output.data();
    }
    std::vector<py::ssize_t> strides(s.strides, s.strides + 4);
    for (py::ssize_t& stride : strides) stride *= type.itemsize();
    return py::array(type, std::vector<py::ssize_t>(s.shape, s.shape + 4), strides, pixels,
                     Keeper(data_));
  }

  py::object labels() {
    if (device_) return device_->labels;
    Live();
    if (!labels_) {
      py::array_t<std::int64_t> out(static_cast<py::ssize_t>(size_));
      std::int64_t* p = out.mutable_data();
      for (std::size_t i = 0; i < size_; ++i) p[i] = data_->labels[i];
      labels_ = out;
    }
    return labels_;
  }

  py::array labels_int32() const { return ReadOnly(Live("labels_int32").labels); }
  py::array sample_indices() const { return ReadOnly(Live("sample_indices").indices); }

  py::object dlpack(const py::object& stream) const {
    if (device_) return device_->images.attr("__dlpack__")(py::arg("stream") = stream);
    Live();
    auto* ctx = new DlpackContext{data_, ShapeOf(size_, height_, width_, layout_), {}};
    DLTensor& t = ctx->tensor.dl_tensor;
    t.data = dtype_ == loader::OutputDType::kUint8 ? static_cast<void*>(data_->images.data())
                                                   : static_cast<void*>(data_->output.data());
    t.device = {kDLCPU, 0};
    t.ndim = 4;
    t.dtype = DlpackType(dtype_);
    t.shape = ctx->shape.shape;
    t.strides = ctx->shape.strides;
    t.byte_offset = 0;
    ctx->tensor.manager_ctx = ctx;
    ctx->tensor.deleter = DeleteDlpack;
    PyObject* capsule = PyCapsule_New(&ctx->tensor, "dltensor", DeleteDlpackCapsule);
    if (capsule == nullptr) {
      delete ctx;
      throw py::error_already_set();
    }
    return py::reinterpret_steal<py::capsule>(capsule);
  }

  py::tuple dlpack_device() const {
    if (device_) return device_->images.attr("__dlpack_device__")();
    Live();  // a released batch has no device to name
    return py::make_tuple(static_cast<int>(kDLCPU), 0);
  }

  py::object torch() const {
    if (device_) return device_->images;
    return py::module_::import("torch.utils.dlpack").attr("from_dlpack")(dlpack(py::none()));
  }

  // images, labels = batch, as a DataLoader batch unpacks: torch tensors where torch imports
  // (the images are torch(), the zero-copy view; the labels int64), else numpy (images(),
  // labels()). The images hold the slot as any view does.
  py::iterator Unpack() {
    if (device_) return py::iter(py::make_tuple(device_->images, device_->labels));
    py::object torch_module;
    try {
      torch_module = py::module_::import("torch");
    } catch (py::error_already_set& e) {
      if (!e.matches(PyExc_ImportError)) throw;
    }
    if (!torch_module) return py::iter(py::make_tuple(images(), labels()));
    return py::iter(py::make_tuple(torch(), torch_module.attr("from_numpy")(labels())));
  }

  // This batch as a ReceivedBatch that holds its memory (tilefeed.cuda's DeviceFeed).
  transport::ReceivedBatch Received() const {
    struct Holder final : transport::ReceivedBatch::Owner {
      explicit Holder(std::shared_ptr<BatchData> d) : data(std::move(d)) {}
      std::shared_ptr<BatchData> data;
    };
    const BatchData& d = Live("host memory");
    // The uint8 images() as the loader wrote them (layout_ is output()'s for a converted one).
    return {transport::MetaOf(d.batch), d.images, d.labels, d.indices,
            std::make_unique<Holder>(data_)};
  }

  // Drops this object's hold on the slot; views handed out keep their own.
  void release() {
    data_.reset();
    device_.reset();
    labels_ = py::object();
  }

 private:
  // The slot's memory; `what` names a view a GPU batch does not have.
  const BatchData& Live(const char* what = nullptr) const {
    if (device_ && what != nullptr) {
      throw py::type_error(std::string("tilefeed.Batch: a batch on the GPU has no ") + what +
                           " (images and labels are its tensors)");
    }
    if (!data_) {
      throw py::value_error(
          "tilefeed.Batch: released (the iterator advanced, or release() was called). To "
          "keep a batch past the next one, keep a copy: batch.torch().clone() or "
          "batch.images.copy(); views kept instead hold the loader's "
          "slots, and keeping prefetch_depth of them stops the loader");
    }
    return *data_;
  }

  template <typename T>
  py::array ReadOnly(std::span<const T> values) const {
    py::array out(py::dtype::of<T>(), {static_cast<py::ssize_t>(values.size())},
                  {static_cast<py::ssize_t>(sizeof(T))}, values.data(), Keeper(data_));
    out.attr("setflags")(py::arg("write") = false);
    return out;
  }

  struct Device {
    py::object images, labels, copy_events;
  };
  std::shared_ptr<BatchData> data_;
  std::optional<Device> device_;  // set for a batch on a GPU (data_ is then null)
  py::object labels_;             // the int64 copy, made on first use
  std::uint64_t epoch_;
  std::uint64_t index_;
  std::size_t size_;
  int height_;
  int width_;
  loader::Layout layout_;
  loader::OutputDType dtype_;
  std::size_t substituted_;
};

}  // namespace

py::object MakeBatch(std::shared_ptr<BatchData> data) { return py::cast(PyBatch(std::move(data))); }

void RegisterBatch(py::module_& m) {
  py::class_<PyBatch>(m, "Batch",
                      "One batch, on the CPU or a GPU; `images, labels = batch` unpacks it. "
                      "On the CPU its memory is a loader slot: .images, .sample_indices, "
                      ".torch() and the unpacked images are views of it. The slot returns to "
                      "the loader once this Batch is released (the iterator advanced, or "
                      "release()) and every view made from it is gone. On a GPU (device="
                      "'cuda'), images and labels are CUDA tensors that hold no slot.")
      .def_property_readonly("epoch", &PyBatch::epoch, "the epoch this batch belongs to")
      .def_property_readonly("index", &PyBatch::index, "batch number within the epoch")
      .def_property_readonly("size", &PyBatch::size, "samples; the last batch may be short")
      .def_property_readonly("height", &PyBatch::height, "image height in pixels")
      .def_property_readonly("width", &PyBatch::width, "image width in pixels")
      .def_property_readonly("layout", &PyBatch::layout, "'nhwc' or 'nchw'")
      .def_property_readonly("dtype", &PyBatch::dtype,
                             "the pixels' element type: 'uint8', 'float16', 'bfloat16' or "
                             "'float32'")
      .def_property_readonly("substituted", &PyBatch::substituted,
                             "bad samples replaced in this batch")
      .def_property_readonly("device", &PyBatch::device,
                             "where the images and labels are: 'cpu' or the GPU's ('cuda:0')")
      .def_property_readonly("released", &PyBatch::released,
                             "True once this Batch gave up its slot (views keep theirs)")
      .def_property_readonly(
          "images", &PyBatch::images,
          "numpy view of the images in the loader's dtype, NHWC or NCHW (no copy; "
          "bfloat16 has no numpy type: use torch()); on a GPU, the CUDA tensor")
      .def_property_readonly("labels", &PyBatch::labels,
                             "int64 numpy array (a copy); on a GPU, the int64 CUDA tensor")
      .def_property_readonly("labels_int32", &PyBatch::labels_int32,
                             "int32 numpy view of the labels, read-only (no copy)")
      .def_property_readonly("sample_indices", &PyBatch::sample_indices,
                             "uint64 numpy view of the dataset indices, read-only (no copy)")
      .def("torch", &PyBatch::torch,
           "the images as a torch tensor of the loader's dtype via DLPack (no copy)")
      .def("__dlpack__", &PyBatch::dlpack, py::arg("stream") = py::none(),
           "the images as a DLPack capsule (no copy), for torch.from_dlpack and friends")
      .def("__dlpack_device__", &PyBatch::dlpack_device,
           "(kDLCPU, 0) for host memory, else the GPU tensor's")
      .def_property_readonly("copy_events", &PyBatch::copy_events,
                             "a GPU batch of tilefeed.cuda's timing=True: (start, end) CUDA "
                             "events around its copy and conversion on the feed's stream; "
                             "else None")
      .def_static(
          "_on_device",
          [](py::object images, py::object labels, std::uint64_t epoch, std::uint64_t index,
             std::size_t size, int height, int width, const std::string& layout,
             const std::string& dtype, py::object copy_events) {
            return PyBatch(std::move(images), std::move(labels), epoch, index, size, height, width,
                           layout, dtype, std::move(copy_events));
          },
          "a batch on a GPU (tilefeed.cuda): its images and labels tensors")
      .def("release", &PyBatch::release,
           "drops this object's hold on the slot; views keep their own")
      .def("__iter__", &PyBatch::Unpack,
           "images, labels = batch (for x, y in loader), as a DataLoader batch: torch tensors "
           "where torch imports (images: torch(), no copy; labels: int64), else numpy "
           "(images, labels)")
      .def("__len__", &PyBatch::size)
      .def("__repr__", [](const PyBatch& b) {
        return "<tilefeed.Batch epoch=" + std::to_string(b.epoch()) +
               " index=" + std::to_string(b.index()) + " size=" + std::to_string(b.size()) + " " +
               std::to_string(b.height()) + "x" + std::to_string(b.width()) + " " + b.layout() +
               (b.released() ? " released" : " " + b.device()) + ">";
      });
}

transport::ReceivedBatch ReceiveBatch(const py::handle& batch) {
  return batch.cast<const PyBatch&>().Received();
}

}  // namespace tilefeed::python

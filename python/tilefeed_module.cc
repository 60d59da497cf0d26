// tilefeed._tilefeed: the C++ loader for Python. The Pythonic layer (keyword
// arguments, epochs, iteration) lives in tilefeed/__init__.py; this file owns threads,
// the GIL and memory.
//
// Design.
//  * Batches are not copied. A BatchData owns the loader::Batch (a slot) and a reference
//    to the Core that owns the Loader. Every numpy array and DLPack tensor handed out
//    holds its own shared_ptr<BatchData> (numpy: a capsule as the array's base; DLPack:
//    the DLManagedTensor's manager_ctx), so a slot returns to the loader only when the
//    Python Batch and every view of it are gone, and a Loader outlives its Batches as
//    loader.h requires. Nothing in a BatchData is a Python object, so torch may run the
//    DLPack deleter on any thread without the GIL.
//  * Ctrl-C. Python runs its SIGINT handler only on the main thread between bytecodes,
//    so Core::Next() waits with Loader::Next(kSignalSlice), the GIL released, and calls
//    PyErr_CheckSignals between slices. A wait that times out consumes nothing, so an
//    interrupt loses no batch and changes no epoch's contents: the next call returns the
//    batch the interrupted one was waiting for.
//  * Epochs. The loader says where it stands (state(): the epoch a new iteration yields)
//    and moves to another epoch or a checkpoint's state in place (Seek()), so
//    tilefeed/__init__.py keeps no epoch count of its own and re-creates the loader only
//    for a checkpoint of another seed.
//  * The GIL. It is released while waiting, while constructing (indexing, starting
//    workers) and while stopping or seeking (joining workers). Workers take it only to
//    call on_bad_sample, and no lock is held while they wait for it: Loader::Next() holds
//    the loader's own mutex for one slice at most, so a thread asking state() with the
//    GIL held waits no longer than that and cannot deadlock with a consumer or a worker.
//    The callback object and its pending exception are dropped under the GIL by
//    Shutdown(), after the workers are joined.

#include <Python.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cassert>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda_binding.h"
#include "loader/list_source.h"
#include "loader/option_specs.h"
#include "tilefeed/launch/launch.h"
#include "tilefeed/loader/dataset.h"
#include "tilefeed/loader/loader.h"
#include "tilefeed/loader/source.h"

namespace py = pybind11;
namespace loader = tilefeed::loader;
namespace codecs = tilefeed::codecs;

namespace {

// How long the consumer waits with the GIL released before it checks for signals.
constexpr std::chrono::milliseconds kSignalSlice{20};

// tilefeed.Loader's held_slots_timeout default, in seconds (see DefaultOptions).
constexpr double kPythonHeldSlotsTimeout = 10.0;

// DLPack 0.x ABI (dlpack.h v0.6/0.7), which torch 1.13's from_dlpack consumes from a
// capsule named "dltensor". Defined here rather than vendoring the header.
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

bool IsFinalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

void CheckSignals() {
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

py::dict ToDict(const loader::BadSample& bad) {
  py::dict d;
  d["epoch"] = bad.epoch;
  d["sample"] = bad.sample;
  d["where"] = bad.where;
  d["reason"] = bad.reason;
  return d;
}

// Runs `work` on a thread of its own and returns its result (or rethrows its exception).
// Indexing a dataset runs oneTBB algorithms on the calling thread, which then holds oneTBB
// state until it exits; a Python thread that did would keep oneTBB's workers from ever
// being released for a fork() (loader::ReleaseWorkerThreads). A thread that exits here
// releases its share at once.
template <typename Work>
auto OnOwnThread(Work work) -> decltype(work()) {
  std::optional<decltype(work())> result;
  std::exception_ptr error;
  std::thread([&] {
    try {
      result.emplace(work());
    } catch (...) {
      error = std::current_exception();
    }
  }).join();
  if (error) std::rethrow_exception(error);
  return std::move(*result);
}

// Owns one loader. Shared by the Python _Core object and every live BatchData; Shutdown()
// is called by the former, with the GIL held.
class Core {
 public:
  // REQUIRES: the GIL is held.
  Core(std::unique_ptr<loader::Source> source, loader::LoaderOptions options,
       py::object on_bad_sample)
      : callback_(std::move(on_bad_sample)) {
    if (!callback_.is_none()) {
      options.on_bad_sample = [this](const loader::BadSample& bad) { OnBadSample(bad); };
    } else {
      callback_ = py::object();
    }
    py::gil_scoped_release release;
    loader_ = std::make_unique<loader::Loader>(std::move(source), std::move(options));
  }

  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;

  // May run on any thread, with or without the GIL: after Shutdown() nothing here is a
  // Python object.
  ~Core() {
    if (loader_) loader_->Stop();
    assert(!callback_);
  }

  loader::Loader& loader() { return *loader_; }

  // The next batch, or nullopt at the end of an epoch or once ended. Raises what the
  // callback raised, LoaderError, or KeyboardInterrupt (nothing consumed: the next call
  // returns the batch this one was waiting for).
  // REQUIRES: the GIL is held.
  std::optional<loader::Batch> Next() {
    if (callback_error_) {
      py::error_already_set error = std::move(*callback_error_);
      callback_error_.reset();
      throw error;
    }
    for (;;) {
      loader::Loader::NextResult next;
      {
        py::gil_scoped_release release;
        next = loader_->Next(kSignalSlice);
      }
      if (next.status != loader::NextStatus::kTimedOut) return std::move(next.batch);
      CheckSignals();
    }
  }

  // loader::Loader::Seek with the GIL released (it joins the workers).
  // REQUIRES: the GIL is held.
  void Seek(const loader::LoaderState& state) {
    py::gil_scoped_release release;
    loader_->Seek(state);
  }

  // loader::Loader::Pause / Resume with the GIL released (they join or start the workers).
  // REQUIRES: the GIL is held.
  void Pause() {
    py::gil_scoped_release release;
    loader_->Pause();
  }
  void Resume() {
    py::gil_scoped_release release;
    loader_->Resume();
  }

  // Stops the workers and drops the callback. Idempotent.
  // REQUIRES: the GIL is held.
  void Shutdown() {
    {
      py::gil_scoped_release release;
      loader_->Stop();
    }
    callback_ = py::object();
    callback_error_.reset();
  }

 private:
  // Runs on a decode worker.
  void OnBadSample(const loader::BadSample& bad) {
    if (IsFinalizing()) return;
    py::gil_scoped_acquire gil;
    if (!callback_) return;  // shut down
    try {
      callback_(ToDict(bad));
    } catch (py::error_already_set& e) {
      if (!callback_error_) callback_error_.emplace(std::move(e));
    }
  }

  // Touched only with the GIL held.
  py::object callback_;
  std::optional<py::error_already_set> callback_error_;

  std::unique_ptr<loader::Loader> loader_;
};

// One batch's memory: a loader slot, or owned copies (copy=True). Holds no Python object.
struct BatchData {
  std::shared_ptr<Core> core;  // declared first: the slot goes back before the Loader can go
  loader::Batch batch;
  std::unique_ptr<std::uint8_t[]> owned_images;
  std::unique_ptr<std::int32_t[]> owned_labels;
  std::unique_ptr<std::uint64_t[]> owned_indices;
  std::unique_ptr<std::byte[]> owned_output;
  std::span<std::uint8_t> images;
  std::span<std::byte> output;  // LoaderOptions::output's conversion; empty for uint8
  loader::OutputDType dtype = loader::OutputDType::kUint8;  // of `output`, or uint8 `images`
  loader::Layout layout = loader::Layout::kNhwc;            // of the pixels exposed
  std::span<const std::int32_t> labels;
  std::span<const std::uint64_t> indices;
};

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

const char* LayoutName(loader::Layout layout) {
  return layout == loader::Layout::kNchw ? "nchw" : "nhwc";
}

const char* DTypeName(loader::OutputDType dtype) {
  switch (dtype) {
    case loader::OutputDType::kFloat16:
      return "float16";
    case loader::OutputDType::kBFloat16:
      return "bfloat16";
    case loader::OutputDType::kFloat32:
      return "float32";
    case loader::OutputDType::kUint8:
      break;
  }
  return "uint8";
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

  std::uint64_t epoch() const { return epoch_; }
  std::uint64_t index() const { return index_; }
  std::size_t size() const { return size_; }
  int height() const { return height_; }
  int width() const { return width_; }
  std::string layout() const { return LayoutName(layout_); }
  std::string dtype() const { return DTypeName(dtype_); }
  std::size_t substituted() const { return substituted_; }
  bool released() const { return data_ == nullptr; }

  py::array images() const {
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

  py::array labels() {
    Live();
    if (!labels_) {
      py::array_t<std::int64_t> out(static_cast<py::ssize_t>(size_));
      std::int64_t* p = out.mutable_data();
      for (std::size_t i = 0; i < size_; ++i) p[i] = data_->labels[i];
      labels_ = out;
    }
    return labels_;
  }

  py::array labels_int32() const { return ReadOnly(Live().labels); }
  py::array sample_indices() const { return ReadOnly(Live().indices); }

  py::capsule dlpack() const {
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

  py::object torch() const {
    return py::module_::import("torch.utils.dlpack").attr("from_dlpack")(dlpack());
  }

  // images, labels = batch, as a DataLoader batch unpacks: torch tensors where torch imports
  // (the images are torch(), the zero-copy view; the labels int64), else numpy (images(),
  // labels()). The images hold the slot as any view does.
  py::iterator Unpack() {
    py::object torch_module;
    try {
      torch_module = py::module_::import("torch");
    } catch (py::error_already_set& e) {
      if (!e.matches(PyExc_ImportError)) throw;
    }
    if (!torch_module) return py::iter(py::make_tuple(images(), labels()));
    return py::iter(py::make_tuple(torch(), torch_module.attr("from_numpy")(labels())));
  }

  // Drops this object's hold on the slot; views handed out keep their own.
  void release() {
    data_.reset();
    labels_ = py::object();
  }

 private:
  const BatchData& Live() const {
    if (!data_) {
      throw py::value_error(
          "tilefeed.Batch: released (the iterator advanced, or release() was called). To "
          "keep a batch past the next one, keep a copy: batch.torch().clone(), "
          "batch.images.copy(), or Loader(copy=True); views kept instead hold the loader's "
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

  std::shared_ptr<BatchData> data_;
  py::object labels_;  // the int64 copy, made on first use
  std::uint64_t epoch_;
  std::uint64_t index_;
  std::size_t size_;
  int height_;
  int width_;
  loader::Layout layout_;
  loader::OutputDType dtype_;
  std::size_t substituted_;
};

// ---- Options ---------------------------------------------------------------------------

template <typename T>
T Cast(const std::string& name, py::handle value) {
  try {
    return value.cast<T>();
  } catch (const py::cast_error&) {
    throw py::type_error("tilefeed.Loader: " + name + "=" + py::repr(value).cast<std::string>() +
                         " has the wrong type");
  }
}

template <typename E>
E Choose(const std::string& name, py::handle value,
         std::initializer_list<std::pair<const char*, E>> choices) {
  const std::string text = Cast<std::string>(name, value);
  std::string names;
  for (const auto& [spelling, e] : choices) {
    if (text == spelling) return e;
    names += names.empty() ? "" : ", ";
    names += '"' + std::string(spelling) + '"';
  }
  throw py::value_error("tilefeed.Loader: " + name + "=\"" + text + "\"; expected one of " + names);
}

template <typename T>
std::pair<T, T> Pair(const std::string& name, py::handle value) {
  return Cast<std::pair<T, T>>(name, value);
}

using Setter = std::function<void(loader::LoaderOptions&, const std::string&, py::handle)>;
using Setters = std::vector<std::pair<std::string, Setter>>;
using O = loader::LoaderOptions;

// ValueError "tilefeed.Loader: PROBLEM" for a problem the C++ checks found.
void Refuse(const std::optional<std::string>& problem) {
  if (problem) throw py::value_error("tilefeed.Loader: " + *problem);
}

// `value` as the field type T of the shared option `spec` (tilefeed/loader/option_specs.h). The
// range is checked once, by loader::OptionsProblem; a whole number that T cannot hold at all
// (a negative count) is out of the table's range too, and refused here in RangeProblem's words.
template <typename T>
T Number(const loader::OptionSpec& spec, const std::string& name, py::handle value) {
  if (!py::isinstance<py::bool_>(value)) {
    try {
      return value.cast<T>();
    } catch (const py::cast_error&) {
      if (PyIndex_Check(value.ptr()) != 0) {
        const py::object whole = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
        const double approx = whole ? PyLong_AsDouble(whole.ptr()) : 0;
        const bool converted = whole && PyErr_Occurred() == nullptr;
        PyErr_Clear();
        if (converted) Refuse(loader::RangeProblem(spec, name, approx));
        // In the table's range, past the field's: the tools' words for the same value.
        throw py::value_error("tilefeed.Loader: " + name + " must be at most " +
                              std::to_string(std::numeric_limits<T>::max()) + ", got " +
                              py::repr(value).cast<std::string>());
      }
    }
  }
  throw py::type_error("tilefeed.Loader: " + name + "=" + py::repr(value).cast<std::string>() +
                       " has the wrong type");
}

// A setter of the plain field `Member`, cast to its type.
template <auto Member>
void Assign(O& o, const std::string& name, py::handle value) {
  using T = std::remove_reference_t<decltype(o.*Member)>;
  o.*Member = Cast<T>(name, value);
}

// A setter of the field `Member` of the shared option `spec`.
template <auto Member>
Setter Ranged(const loader::OptionSpec& spec) {
  return [&spec](O& o, const std::string& name, py::handle value) {
    using T = std::remove_reference_t<decltype(o.*Member)>;
    o.*Member = Number<T>(spec, name, value);
  };
}

// The output images: their size, crop, flip, layout and element type.
Setters ImageSetters() {
  return {
      {"batch_size", Ranged<&O::batch_size>(loader::kBatchSize)},
      {"image_size", Ranged<&O::image_size>(loader::kImageSize)},
      {"image_height", Ranged<&O::image_height>(loader::kImageSize)},
      {"image_width", Ranged<&O::image_width>(loader::kImageSize)},
      {"mode",
       [](O& o, const std::string& n, py::handle v) {
         o.mode = Choose<loader::Mode>(
             n, v, {{"train", loader::Mode::kTrain}, {"eval", loader::Mode::kEval}});
       }},
      {"eval_resize", Ranged<&O::eval_resize>(loader::kEvalResize)},
      {"eval_dct_scaling", &Assign<&O::eval_dct_scaling>},
      {"crop_scale",
       [](O& o, const std::string& n, py::handle v) {
         std::tie(o.crop.scale_min, o.crop.scale_max) = Pair<double>(n, v);
       }},
      {"crop_ratio",
       [](O& o, const std::string& n, py::handle v) {
         std::tie(o.crop.ratio_min, o.crop.ratio_max) = Pair<double>(n, v);
       }},
      {"flip_probability", Ranged<&O::flip_probability>(loader::kFlipProbability)},
      {"layout",
       [](O& o, const std::string& n, py::handle v) {
         o.layout = Choose<loader::Layout>(
             n, v, {{"nhwc", loader::Layout::kNhwc}, {"nchw", loader::Layout::kNchw}});
       }},
      {"dtype",
       [](O& o, const std::string& n, py::handle v) {
         o.output.dtype = Choose<loader::OutputDType>(n, v,
                                                      {{"uint8", loader::OutputDType::kUint8},
                                                       {"float16", loader::OutputDType::kFloat16},
                                                       {"bfloat16", loader::OutputDType::kBFloat16},
                                                       {"float32", loader::OutputDType::kFloat32}});
       }},
      {"mean", [](O& o, const std::string& n,
                  py::handle v) { o.output.mean = Cast<std::array<float, 3>>(n, v); }},
      {"std", [](O& o, const std::string& n,
                 py::handle v) { o.output.std = Cast<std::array<float, 3>>(n, v); }},
  };
}

// Which samples come when: threads, slots, order, this instance's slice, the epochs.
Setters OrderSetters() {
  return {
      {"workers", Ranged<&O::workers>(loader::kWorkers)},
      {"prefetch_depth", Ranged<&O::prefetch_depth>(loader::kPrefetchDepth)},
      {"seed", Ranged<&O::seed>(loader::kSeed)},
      {"shuffle", &Assign<&O::shuffle>},
      {"slice", [](O& o, const std::string& n,
                   py::handle v) { std::tie(o.slice.index, o.slice.count) = Pair<int>(n, v); }},
      {"remainder",
       [](O& o, const std::string& n, py::handle v) {
         o.remainder = Choose<loader::Remainder>(
             n, v, {{"pad", loader::Remainder::kPad}, {"drop", loader::Remainder::kDrop}});
       }},
      {"drop_last_batch", &Assign<&O::drop_last_batch>},
      {"epochs",
       [](O& o, const std::string& n, py::handle v) {
         // None: no end, the C++ 0; a number is a count of epochs, so 0 is out of range.
         o.epochs = v.is_none() ? 0 : Number<std::uint64_t>(loader::kEpochs, n, v);
         if (!v.is_none()) {
           Refuse(loader::RangeProblem(loader::kEpochs, n, static_cast<double>(o.epochs)));
         }
       }},
  };
}

// Bad samples and the decoder's limits.
Setters PolicySetters() {
  return {
      {"bad_sample_policy",
       [](O& o, const std::string& n, py::handle v) {
         o.bad_sample_policy = Choose<loader::BadSamplePolicy>(
             n, v,
             {{"skip", loader::BadSamplePolicy::kSkip}, {"fail", loader::BadSamplePolicy::kFail}});
       }},
      {"max_substitute_attempts",
       Ranged<&O::max_substitute_attempts>(loader::kMaxSubstituteAttempts)},
      {"held_slots_timeout",
       [](O& o, const std::string& n, py::handle v) {
         const double seconds = Number<double>(loader::kHeldSlotsTimeout, n, v);
         // Beyond what milliseconds hold (or NaN) is out of the table's range too.
         if (!(std::fabs(seconds) < 1e15)) {
           Refuse(loader::RangeProblem(loader::kHeldSlotsTimeout, n, seconds));
         }
         o.held_slots_timeout =
             std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(seconds * 1000.0)));
       }},
      {"max_pixels", [](O& o, const std::string& n,
                        py::handle v) { o.jpeg.max_pixels = Cast<std::int64_t>(n, v); }},
      {"max_scans",
       [](O& o, const std::string& n, py::handle v) { o.jpeg.max_scans = Cast<int>(n, v); }},
      {"corrupt_data",
       [](O& o, const std::string& n, py::handle v) {
         o.jpeg.corrupt_data =
             Choose<codecs::CorruptDataPolicy>(n, v,
                                               {{"fail", codecs::CorruptDataPolicy::kFail},
                                                {"accept", codecs::CorruptDataPolicy::kAccept}});
       }},
      {"dct_scales",
       [](O& o, const std::string& n, py::handle v) {
         o.jpeg.scales = Choose<codecs::DctScales>(
             n, v,
             {{"pow2", codecs::DctScales::kPowersOfTwo}, {"eighths", codecs::DctScales::kEighths}});
       }},
      {"fast_dct",
       [](O& o, const std::string& n, py::handle v) { o.jpeg.fast_dct = Cast<bool>(n, v); }},
      {"fast_upsample",
       [](O& o, const std::string& n, py::handle v) { o.jpeg.fast_upsample = Cast<bool>(n, v); }},
  };
}

// Every keyword of tilefeed.Loader that becomes a LoaderOptions field, and its setter.
const std::map<std::string, Setter>& AllSetters() {
  static const std::map<std::string, Setter> kSetters = [] {
    std::map<std::string, Setter> all;
    for (const Setters& group : {ImageSetters(), OrderSetters(), PolicySetters()}) {
      all.insert(group.begin(), group.end());
    }
    return all;
  }();
  return kSetters;
}

// The shared option table (option_specs.h) for tilefeed/__init__.py: keyword -> its flag,
// kind, range (min, max, min_exclusive, and the words "at least 1"), default and help. The
// Python checks take their ranges and messages from here.
py::dict OptionSpecs() {
  static constexpr const char* kKinds[] = {"integer", "number", "seconds", "size",
                                           "choice",  "flag",   "slice",   "text"};
  py::dict table;
  for (const loader::OptionSpec& spec : loader::SharedOptions()) {
    if (spec.keyword.empty()) continue;
    py::dict d;
    d["flag"] = std::string(spec.flag);
    d["kind"] = kKinds[static_cast<int>(spec.kind)];
    d["min"] = spec.min;
    d["max"] = spec.max;
    d["min_exclusive"] = spec.min_exclusive;
    d["range"] = loader::RangeText(spec);
    d["default"] = std::string(spec.default_text);
    d["help"] = std::string(spec.help);
    py::list choices;
    for (std::string_view choice : spec.choices) choices.append(std::string(choice));
    d["choices"] = choices;
    table[py::str(std::string(spec.keyword))] = d;
  }
  return table;
}

// The defaults of loader::LoaderOptions under their Python names; AllSetters() reads the same
// names back. tilefeed.Loader's signature is built from this, so the two cannot drift.
py::dict DefaultOptions() {
  const loader::LoaderOptions o;
  py::dict d;
  d["batch_size"] = o.batch_size;
  d["image_size"] = o.image_size;
  d["mode"] = o.mode == loader::Mode::kTrain ? "train" : "eval";
  d["eval_resize"] = o.eval_resize;
  d["eval_dct_scaling"] = o.eval_dct_scaling;
  d["crop_scale"] = py::make_tuple(o.crop.scale_min, o.crop.scale_max);
  d["crop_ratio"] = py::make_tuple(o.crop.ratio_min, o.crop.ratio_max);
  d["flip_probability"] = o.flip_probability;
  d["layout"] = LayoutName(o.layout);
  d["dtype"] = DTypeName(o.output.dtype);
  d["mean"] = py::make_tuple(o.output.mean[0], o.output.mean[1], o.output.mean[2]);
  d["std"] = py::make_tuple(o.output.std[0], o.output.std[1], o.output.std[2]);
  d["workers"] = o.workers;
  d["prefetch_depth"] = o.prefetch_depth;
  d["seed"] = o.seed;
  d["shuffle"] = o.shuffle;
  d["slice"] = py::make_tuple(o.slice.index, o.slice.count);
  d["remainder"] = o.remainder == loader::Remainder::kPad ? "pad" : "drop";
  d["drop_last_batch"] = o.drop_last_batch;
  d["epochs"] = o.epochs;
  d["bad_sample_policy"] = o.bad_sample_policy == loader::BadSamplePolicy::kSkip ? "skip" : "fail";
  d["max_substitute_attempts"] = o.max_substitute_attempts;
  // Not the C++ default (wait forever, for batches released by other threads): a Python
  // consumer's batches are its own, so holding every slot is its own deadlock.
  d["held_slots_timeout"] = kPythonHeldSlotsTimeout;
  d["max_pixels"] = o.jpeg.max_pixels;
  d["max_scans"] = o.jpeg.max_scans;
  d["corrupt_data"] = o.jpeg.corrupt_data == codecs::CorruptDataPolicy::kFail ? "fail" : "accept";
  d["dct_scales"] = o.jpeg.scales == codecs::DctScales::kPowersOfTwo ? "pow2" : "eighths";
  d["fast_dct"] = o.jpeg.fast_dct;
  d["fast_upsample"] = o.jpeg.fast_upsample;
  return d;
}

loader::LoaderOptions ParseOptions(const py::dict& kwargs) {
  loader::LoaderOptions options;
  const auto& setters = AllSetters();
  for (const auto& [key, value] : kwargs) {
    const std::string name = key.cast<std::string>();
    const auto it = setters.find(name);
    if (it == setters.end()) {
      throw py::type_error("tilefeed.Loader: unknown option '" + name + "'");
    }
    it->second(options, name, value);
  }
  Refuse(loader::OptionsProblem(options));
  if (options.output.dtype != loader::OutputDType::kUint8) {
    // The workers decode NHWC; the conversion writes the layout asked for.
    options.output.layout = options.layout == loader::Layout::kNchw ? loader::OutputLayout::kNCHW
                                                                    : loader::OutputLayout::kNHWC;
    options.layout = loader::Layout::kNhwc;
  }
  return options;
}

// RemoteOptions from the dict that tilefeed.Loader builds; absent keys keep the defaults.
loader::RemoteOptions ToRemoteOptions(const py::dict& remote) {
  loader::RemoteOptions o;
  const auto text = [&](const char* key, std::string& out) {
    if (remote.contains(key)) out = remote[key].cast<std::string>();
  };
  text("cache_dir", o.cache_dir);
  text("s3_endpoint", o.s3_endpoint);
  text("aws_access_key_id", o.aws_access_key_id);
  text("aws_secret_access_key", o.aws_secret_access_key);
  text("aws_session_token", o.aws_session_token);
  text("aws_region", o.aws_region);
  if (remote.contains("cache_limit")) {
    o.cache_limit =
        Number<std::uint64_t>(loader::kCacheLimit, "cache_limit", remote["cache_limit"]);
  }
  if (remote.contains("retries")) {
    o.retries = Number<int>(loader::kRemoteRetries, "remote_retries", remote["retries"]);
  }
  Refuse(loader::RemoteOptionsProblem(o));
  // From worker threads, without the GIL: straight to the process's stderr.
  o.warn = [](const std::string& line) {
    std::fprintf(stderr, "tilefeed: warning: %s\n", line.c_str());
  };
  return o;
}

// Opens `data` through the one dataset opener (tilefeed/loader/dataset.h). `kind` is "auto"
// (detect), a DatasetKind name, or CIFAR-10's "cifar10-train" / "cifar10-test" (which pick the
// split); `split` ("train", "val", "test") is resolved by the opener, the one place that
// resolves splits for every door; `remote` holds RemoteOptions fields
// (checked by tilefeed/__init__.py's _remote_options).
loader::OpenedDataset OpenSource(const std::string& data, const std::string& kind,
                                 const std::string& split, const py::dict& remote) {
  loader::DatasetOptions options;
  options.remote = ToRemoteOptions(remote);
  const std::optional<loader::Split> parsed_split = loader::ParseSplit(split);
  if (!parsed_split) {
    std::string choices;
    for (const std::string_view choice : loader::kSplit.choices) {
      choices += (choices.empty() ? "'" : ", '") + std::string(choice) + "'";
    }
    throw py::value_error("tilefeed.Loader: split='" + split + "'; expected one of " + choices);
  }
  options.split = *parsed_split;
  if (kind == "cifar10-train" || kind == "cifar10-test") {
    options.kind = loader::DatasetKind::kCifar10;
    options.split = kind == "cifar10-train" ? loader::Split::kTrain : loader::Split::kTest;
  } else if (kind != "auto") {
    options.kind = loader::ParseDatasetKind(kind);
    if (!options.kind) {
      throw py::value_error("tilefeed.Loader: source=\"" + kind +
                            "\"; expected \"auto\", \"imagefolder\", \"shards\", \"cifar10\", "
                            "\"cifar10-train\" or \"cifar10-test\"");
    }
  }
  py::gil_scoped_release release;
  return OnOwnThread([&] { return loader::OpenDataset(data, options); });
}

// The Python _Core: one C++ loader. Its deallocation shuts the Core down.
class PyCore {
 public:
  PyCore(const std::string& data, const std::string& source_kind, const std::string& split,
         py::object on_bad_sample, const py::dict& options, const py::dict& remote,
         const py::object& slot_memory)
      : slot_owner_(slot_memory) {
    loader::LoaderOptions parsed = ParseOptions(options);
    if (!slot_memory.is_none()) {
      parsed.slot_memory = tilefeed::python::ExternalSlotMemory(slot_memory.attr("regions"));
    }
    loader::OpenedDataset opened = OpenSource(data, source_kind, split, remote);
    summary_ = opened.summary;
    notes_ = std::move(opened.notes);
    core_ = std::make_shared<Core>(std::move(opened.source), std::move(parsed),
                                   std::move(on_bad_sample));
  }

  // A loader over samples listed in Python: (path, bytes, label) tuples, bytes empty for a
  // file to read (tilefeed/__init__.py's _list_samples checks them).
  static std::unique_ptr<PyCore> FromList(const py::list& samples,
                                          std::vector<std::string> class_names,
                                          py::object on_bad_sample, const py::dict& options) {
    loader::LoaderOptions parsed = ParseOptions(options);
    std::vector<loader::ListSample> list;
    list.reserve(samples.size());
    for (py::handle item : samples) {
      const auto [path, bytes, label] = item.cast<std::tuple<std::string, py::bytes, int>>();
      loader::ListSample sample{path, {}, label};
      const std::string_view view = bytes;
      const auto* begin = reinterpret_cast<const std::byte*>(view.data());
      sample.bytes.assign(begin, begin + view.size());
      list.push_back(std::move(sample));
    }
    const std::size_t count = list.size();
    auto core = std::unique_ptr<PyCore>(new PyCore());
    core->summary_ = "samples listed in Python: " + std::to_string(count) + " samples, " +
                     std::to_string(class_names.size()) + " classes";
    auto source = std::make_unique<loader::ListSource>(std::move(list), std::move(class_names));
    core->core_ =
        std::make_shared<Core>(std::move(source), std::move(parsed), std::move(on_bad_sample));
    return core;
  }
  // A destructor cannot throw: a failure to stop is reported on stderr, one line.
  ~PyCore() {
    if (!core_) return;
    try {
      core_->Shutdown();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tilefeed.Loader: stopping the loader failed: %s\n", e.what());
    }
  }
  PyCore(const PyCore&) = delete;
  PyCore& operator=(const PyCore&) = delete;

  std::optional<PyBatch> Next(bool copy) {
    std::optional<loader::Batch> batch = core_->Next();
    if (!batch) return std::nullopt;
    auto data = std::make_shared<BatchData>();
    data->core = core_;
    const loader::LoaderOptions& options = core_->loader().options();
    data->dtype = options.output.dtype;
    data->layout = options.output.dtype == loader::OutputDType::kUint8    ? options.layout
                   : options.output.layout == loader::OutputLayout::kNCHW ? loader::Layout::kNchw
                                                                          : loader::Layout::kNhwc;
    if (!copy) {
      data->output = batch->output();
      data->images = batch->images();
      data->labels = batch->labels();
      data->indices = batch->sample_indices();
      data->batch = std::move(*batch);
      return PyBatch(std::move(data));
    }
    {
      py::gil_scoped_release release;
      const auto images = batch->images();
      const auto labels = batch->labels();
      const auto indices = batch->sample_indices();
      data->owned_images = std::make_unique_for_overwrite<std::uint8_t[]>(images.size());
      data->owned_labels = std::make_unique_for_overwrite<std::int32_t[]>(labels.size());
      data->owned_indices = std::make_unique_for_overwrite<std::uint64_t[]>(indices.size());
      std::memcpy(data->owned_images.get(), images.data(), images.size_bytes());
      std::memcpy(data->owned_labels.get(), labels.data(), labels.size_bytes());
      std::memcpy(data->owned_indices.get(), indices.data(), indices.size_bytes());
      const auto output = batch->output();
      if (!output.empty()) {
        data->owned_output = std::make_unique_for_overwrite<std::byte[]>(output.size());
        std::memcpy(data->owned_output.get(), output.data(), output.size_bytes());
        data->output = {data->owned_output.get(), output.size()};
      }
      data->images = {data->owned_images.get(), images.size()};
      data->labels = {data->owned_labels.get(), labels.size()};
      data->indices = {data->owned_indices.get(), indices.size()};
    }
    // PyBatch reads the metadata from data->batch, which is then released.
    data->batch = std::move(*batch);
    PyBatch result(data);
    data->batch.ReturnSlot();
    return result;
  }

  void Stop() { core_->Shutdown(); }
  void Pause() { core_->Pause(); }
  void Resume() { core_->Resume(); }
  const std::string& summary() const { return summary_; }
  const std::vector<std::string>& notes() const { return notes_; }

  py::dict Metrics() const {
    const loader::LoaderMetrics m = core_->loader().metrics();
    py::dict d;
    d["seconds"] = m.seconds;
    d["images"] = m.images;
    d["batches"] = m.batches;
    d["bad_samples"] = m.bad_samples;
    d["bytes_read"] = m.bytes_read;
    d["images_per_second"] = m.images_per_second;
    d["read_seconds"] = m.read_seconds;
    d["decode_seconds"] = m.decode_seconds;
    d["resize_seconds"] = m.resize_seconds;
    d["wait_seconds"] = m.wait_seconds;
    d["mean_ready_batches"] = m.mean_ready_batches;
    d["slots"] = m.slots;
    d["slot_bytes"] = m.slot_bytes;
    // The same figures under the metrics schema's names (docs/metrics.md).
    d["elapsed_s"] = m.seconds;
    d["images_per_s"] = m.images_per_second;
    d["read_s"] = m.read_seconds;
    d["decode_s"] = m.decode_seconds;
    d["resize_s"] = m.resize_seconds;
    d["wait_s"] = m.wait_seconds;
    d["ring_occupancy"] = m.mean_ready_batches;
    d["ring_slots"] = m.slots;
    return d;
  }

  py::list BadSamples() const {
    py::list out;
    for (const loader::BadSample& bad : core_->loader().bad_samples()) out.append(ToDict(bad));
    return out;
  }

  // loader::LoaderState as a dict: the next batch continues at global `position` of
  // `epoch`'s permutation.
  py::dict State() const {
    const loader::LoaderState s = core_->loader().state();
    py::dict d;
    d["seed"] = s.seed;
    d["epoch"] = s.epoch;
    d["position"] = s.position;
    d["dataset_size"] = s.dataset_size;
    return d;
  }

  // Continues at `position` of `epoch` (loader::Loader::Seek, this loader's seed).
  void Seek(std::uint64_t epoch, std::uint64_t position) {
    const loader::LoaderState now = core_->loader().state();
    core_->Seek({now.seed, epoch, position, now.dataset_size});
  }

  std::size_t batches_per_epoch() const { return core_->loader().batches_per_epoch(); }
  std::size_t samples_per_epoch() const { return core_->loader().samples_per_epoch(); }
  std::size_t dataset_size() const { return core_->loader().source().size(); }
  std::vector<std::string> class_names() const { return core_->loader().source().class_names(); }

 private:
  PyCore() = default;

  // Owns the slot memory, if the caller gave it (tilefeed.cuda); outlives core_'s loader
  // being stopped, which happens in ~PyCore.
  py::object slot_owner_;
  std::shared_ptr<Core> core_;
  std::string summary_;
  std::vector<std::string> notes_;
};

// LoaderError, SourceError (with .where and .reason) and SlotsHeldError.
void RegisterErrors(py::module_& m) {
  py::register_exception<loader::LoaderError>(m, "LoaderError", PyExc_RuntimeError);
  m.attr("LoaderError").attr("__doc__") =
      "A failure that ends iteration: a bad sample under bad_sample_policy='fail' (the message "
      "names the file and the reason), a failed pipeline, or a Loader used in a forked child.";
  // SourceError carries where() and reason() as attributes; the translator finds the type
  // through the module rather than a static.
  const py::exception<loader::SourceError> source_error(m, "SourceError", PyExc_OSError);
  m.attr("SourceError").attr("__doc__") =
      "The dataset cannot be opened (an OSError); .where names the location, .reason says why.";
  // By value: pybind11's translator type is void(*)(std::exception_ptr).
  py::register_exception_translator([](std::exception_ptr p) {  // NOLINT(performance-*)
    try {
      if (p) std::rethrow_exception(p);
    } catch (const loader::SourceError& e) {
      const py::object type = py::module_::import("tilefeed._tilefeed").attr("SourceError");
      py::object error = type(e.what());
      error.attr("where") = e.where();
      error.attr("reason") = e.reason();
      PyErr_SetObject(type.ptr(), error.ptr());
    }
  });

  // Registered after LoaderError, so that it is tried first.
  py::register_exception<loader::SlotsHeldError>(m, "_SlotsHeldError", m.attr("LoaderError").ptr());
}

// The module-level helpers tilefeed/__init__.py calls.
void RegisterFunctions(py::module_& m) {
  m.def("_default_options", &DefaultOptions);
  m.def(
      "_check_options",
      [](const py::dict& options, const py::dict& remote) {
        (void)ParseOptions(options);
        (void)ToRemoteOptions(remote);
      },
      "the C++ checks of Loader options and remote options (loader::OptionsProblem): "
      "ValueError naming the first bad one, TypeError for a value of the wrong type");
  m.def("_option_specs", &OptionSpecs,
        "the shared option table (tilefeed/loader/option_specs.h) by Python keyword");
  tilefeed::python::RegisterCuda(m);
  m.def(
      "_plan_sample",
      [](const py::dict& options, std::uint64_t epoch, std::uint64_t sample, int width,
         int height) {
        const codecs::CropPlan plan =
            loader::PlanSample(ParseOptions(options), epoch, sample, width, height);
        const codecs::SourceBox box = codecs::ShownBox(plan);
        py::dict d;
        d["crop"] = py::make_tuple(plan.crop.x, plan.crop.y, plan.crop.width, plan.crop.height);
        d["box"] = py::make_tuple(box.x0, box.y0, box.x1, box.y1);
        d["flip"] = plan.flip;
        d["dct_scaling"] = plan.dct_scaling;
        return d;
      },
      "loader::PlanSample: the crop plan of one sample");
  m.def(
      "_release_worker_threads",
      [] {
        py::gil_scoped_release release;
        return loader::ReleaseWorkerThreads();
      },
      "loader::ReleaseWorkerThreads: waits for oneTBB's workers to exit, for a fork(); "
      "False if something still uses them");
  m.def(
      "_detect_instance",
      [] {
        // The same detection as `train` (tilefeed/launch/instance.h), over this process's
        // environment; its std::invalid_argument becomes ValueError.
        const tilefeed::launch::InstanceInfo info =
            tilefeed::launch::DetectInstance(tilefeed::launch::ProcessEnvironment());
        py::dict d;
        d["index"] = info.index;
        d["count"] = info.count;
        d["local_index"] = info.local_index;
        d["local_count"] = info.local_count;
        return d;
      },
      "The launcher's instance layout (OpenMPI/poprun, PMI), as `train` detects it");
}

void RegisterBatch(py::module_& m) {
  py::class_<PyBatch>(m, "Batch",
                      "One batch; `images, labels = batch` unpacks it. Its memory is a loader "
                      "slot: .images, .sample_indices, .torch() and the unpacked images are "
                      "views of it. The slot returns to the loader once this "
                      "Batch is released (the iterator advanced, or release()) and every view "
                      "made from it is gone.")
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
      .def_property_readonly("released", &PyBatch::released,
                             "True once this Batch gave up its slot (views keep theirs)")
      .def_property_readonly(
          "images", &PyBatch::images,
          "numpy view of the images in the loader's dtype, NHWC or NCHW (no copy; "
          "bfloat16 has no numpy type: use torch())")
      .def_property_readonly("labels", &PyBatch::labels, "int64 numpy array (a copy)")
      .def_property_readonly("labels_int32", &PyBatch::labels_int32,
                             "int32 numpy view of the labels, read-only (no copy)")
      .def_property_readonly("sample_indices", &PyBatch::sample_indices,
                             "uint64 numpy view of the dataset indices, read-only (no copy)")
      .def("torch", &PyBatch::torch,
           "the images as a torch tensor of the loader's dtype via DLPack (no copy)")
      .def(
          "__dlpack__", [](const PyBatch& b, const py::object& /*stream*/) { return b.dlpack(); },
          py::arg("stream") = py::none(),
          "the images as a DLPack capsule (no copy), for torch.from_dlpack and friends")
      .def(
          "__dlpack_device__", [](const PyBatch&) { return py::make_tuple(kDLCPU, 0); },
          "(kDLCPU, 0): the images are in host memory")
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
               (b.released() ? " released" : "") + ">";
      });
}

void RegisterCore(py::module_& m) {
  py::class_<PyCore>(m, "_Core")
      .def(py::init<const std::string&, const std::string&, const std::string&, py::object,
                    const py::dict&, const py::dict&, py::object>(),
           py::arg("data"), py::arg("source"), py::arg("split"), py::arg("on_bad_sample"),
           py::arg("options"), py::arg("remote") = py::dict(), py::arg("slot_memory") = py::none())
      .def_static("from_list", &PyCore::FromList, py::arg("samples"), py::arg("class_names"),
                  py::arg("on_bad_sample"), py::arg("options"),
                  "a loader over (path, bytes, label) samples (loader::ListSource)")
      .def("next", &PyCore::Next, py::arg("copy") = false)
      .def("stop", &PyCore::Stop)
      .def("pause", &PyCore::Pause, "loader::Loader::Pause: joins the workers, for a fork()")
      .def("resume", &PyCore::Resume, "loader::Loader::Resume: restarts them at state()")
      .def("metrics", &PyCore::Metrics)
      .def("bad_samples", &PyCore::BadSamples)
      .def("state", &PyCore::State,
           "loader::LoaderState as a dict: seed, epoch, position, dataset_size")
      .def("seek", &PyCore::Seek, py::arg("epoch"), py::arg("position"),
           "continues at `position` of `epoch` (loader::Loader::Seek)")
      .def_property_readonly("batches_per_epoch", &PyCore::batches_per_epoch)
      .def_property_readonly("samples_per_epoch", &PyCore::samples_per_epoch)
      .def_property_readonly("dataset_size", &PyCore::dataset_size)
      .def_property_readonly("class_names", &PyCore::class_names)
      .def_property_readonly("summary", &PyCore::summary,
                             "One line: the dataset's kind, path, samples and classes")
      .def_property_readonly("notes", &PyCore::notes,
                             "What opening the dataset noticed (files skipped, ...), a line each");
}

}  // namespace

PYBIND11_MODULE(_tilefeed, m) {
  m.doc() = "tilefeed's C++ loader; use the tilefeed package, not this module.";
  m.attr("__version__") = TILEFEED_VERSION;
  RegisterErrors(m);
  RegisterFunctions(m);
  RegisterBatch(m);
  RegisterCore(m);
}

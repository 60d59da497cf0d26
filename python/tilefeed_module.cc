// tilefeed._tilefeed: the C++ loader for Python. The Pythonic layer (keyword
// arguments, epochs, iteration) lives in tilefeed/__init__.py; this file owns threads,
// the GIL and memory.
//
// Design.
//  * Batches are not copied (batch_binding.h). A BatchData owns the loader::Batch (a slot)
//    and a reference to the Core that owns the Loader. Every numpy array and DLPack tensor handed
//    out holds its own shared_ptr<BatchData> (numpy: a capsule as the array's base; DLPack: the
//    DLManagedTensor's manager_ctx), so a slot returns to the loader only when the Python Batch and
//    every view of it are gone, and a Loader outlives its Batches as loader.h requires. Nothing in
//    a BatchData is a Python object, so torch may run the DLPack deleter on any thread without the
//    GIL.
//  * Ctrl-C. Python runs its SIGINT handler only on the main thread between bytecodes,
//    so Core::Next() waits with Loader::Next(kSignalSlice), the GIL released, and calls
//    PyErr_CheckSignals between slices and once more when a batch arrives, which a signal
//    then leaves kept for the next call (with the state before it). The iterator is C
//    (NextBatch), so no Python code runs between that last check and the `for`
//    statement's variable: a KeyboardInterrupt never drops a batch on its way.
//  * Epochs. The loader says where it stands (state(): the epoch a new iteration yields)
//    and moves to another epoch or a checkpoint's state in place (Seek()), so
//    tilefeed/__init__.py keeps no epoch count of its own and re-creates the loader only
//    for a checkpoint of another seed.
//  * The GIL. It is released while waiting, while constructing (indexing, starting
//    workers) and while stopping or seeking (joining workers). Workers take it only to
//    call the bad-sample callable, and no lock is held while they wait for it: Loader::Next() holds
//    the loader's own mutex for one slice at most, so a thread asking state() with the
//    GIL held waits no longer than that and cannot deadlock with a consumer or a worker.
//    The callback object and its pending exception are dropped under the GIL by
//    Shutdown(), after the workers are joined.

#include <Python.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cassert>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "batch_binding.h"
#include "cuda_binding.h"
#include "loader/list_source.h"
#include "loader/option_specs.h"
#include "options_binding.h"
#include "tilefeed/launch/launch.h"
#include "tilefeed/loader/dataset.h"
#include "tilefeed/loader/loader.h"
#include "tilefeed/loader/source.h"

namespace py = pybind11;
using namespace pybind11::literals;  // "name"_a = value: a keyword of py::dict(...)

namespace tilefeed::python {
namespace {

// How long the consumer waits with the GIL released before it checks for signals.
constexpr std::chrono::milliseconds kSignalSlice{20};

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
  return py::dict("epoch"_a = bad.epoch, "sample"_a = bad.sample, "where"_a = bad.where,
                  "reason"_a = bad.reason);
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
  // callback raised, LoaderError, or KeyboardInterrupt, which consumes nothing: the next
  // call returns the batch this one was waiting for, or that arrived with the signal.
  // REQUIRES: the GIL is held.
  std::optional<loader::Batch> Next() {
    if (callback_error_) {
      py::error_already_set error = std::move(*callback_error_);
      callback_error_.reset();
      throw error;
    }
    if (!kept_) {
      loader::LoaderState before;
      loader::Loader::NextResult next;
      do {
        {
          py::gil_scoped_release release;
          before = loader_->state();
          next = loader_->Next(kSignalSlice);
        }
        if (next.batch) kept_.emplace(Kept{std::move(*next.batch), before});
        if (next.status == loader::NextStatus::kTimedOut || kept_) CheckSignals();
      } while (next.status == loader::NextStatus::kTimedOut);
      if (!kept_) return std::nullopt;  // the end of the epoch: the loader is past it
    }
    std::optional<loader::Batch> batch = std::move(kept_->batch);
    kept_.reset();
    return batch;
  }

  // The loader's state, before a batch Next() kept.
  loader::LoaderState state() const { return kept_ ? kept_->before : loader_->state(); }

  // loader::Loader::Seek with the GIL released (it joins the workers).
  // REQUIRES: the GIL is held.
  void Seek(const loader::LoaderState& state) {
    kept_.reset();
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
    kept_.reset();
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
  // A batch that arrived with a signal, and the state before it. Touched with the GIL held;
  // declared after loader_, which it must not outlive.
  struct Kept {
    loader::Batch batch;
    loader::LoaderState before;
  };
  std::optional<Kept> kept_;
};

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
         const py::object& slot_memory) {
    loader::LoaderOptions parsed = ParseOptions(options);
    if (!slot_memory.is_none()) {
      parsed.slot_memory = slot_memory.cast<std::shared_ptr<loader::SlotMemory>>();
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

  py::object Next() {
    std::optional<loader::Batch> batch = core_->Next();
    if (!batch) return py::none();
    auto data = std::make_shared<BatchData>();
    data->owner = core_;
    const loader::LoaderOptions& options = core_->loader().options();
    data->dtype = options.output.dtype;
    data->layout = options.output.layout;
    data->output = batch->output();
    data->images = batch->images();
    data->labels = batch->labels();
    data->indices = batch->sample_indices();
    data->batch = std::move(*batch);
    return MakeBatch(std::move(data));
  }

  void Stop() { core_->Shutdown(); }
  void Pause() { core_->Pause(); }
  void Resume() { core_->Resume(); }
  const std::string& summary() const { return summary_; }
  const std::vector<std::string>& notes() const { return notes_; }

  py::dict Metrics() const {
    const loader::LoaderMetrics m = core_->loader().metrics();
    // The metrics schema's names (docs/metrics.md), cumulative since the loader was made.
    return py::dict("elapsed_s"_a = m.seconds, "images"_a = m.images, "batches"_a = m.batches,
                    "bad_samples"_a = m.bad_samples, "bytes_read"_a = m.bytes_read,
                    "images_per_s"_a = m.images_per_second, "read_s"_a = m.read_seconds,
                    "decode_s"_a = m.decode_seconds, "resize_s"_a = m.resize_seconds,
                    "wait_s"_a = m.wait_seconds, "ring_occupancy"_a = m.mean_ready_batches,
                    "ring_slots"_a = m.slots, "slot_bytes"_a = m.slot_bytes,
                    "threads"_a = m.threads, "tuned"_a = std::string(m.tuned));
  }

  py::list BadSamples() const {
    py::list out;
    for (const loader::BadSample& bad : core_->loader().bad_samples()) out.append(ToDict(bad));
    return out;
  }

  // loader::LoaderState as a dict: the next batch continues at global `position` of
  // `epoch`'s permutation.
  py::dict State() const {
    const loader::LoaderState s = core_->state();
    return py::dict("seed"_a = s.seed, "epoch"_a = s.epoch, "position"_a = s.position,
                    "dataset_size"_a = s.dataset_size);
  }

  // Continues at `position` of `epoch` (loader::Loader::Seek, this loader's seed).
  void Seek(std::uint64_t epoch, std::uint64_t position) {
    const loader::LoaderState now = core_->loader().state();
    core_->Seek({now.seed, epoch, position, now.dataset_size});
  }

  // loader::Identify's digest of the source, for a checkpoint (reads every record's size
  // and some records' bytes).
  std::uint64_t DatasetDigest() const {
    py::gil_scoped_release release;
    return OnOwnThread([&] { return loader::Identify(core_->loader().source()).digest; });
  }

  std::size_t batches_per_epoch() const { return core_->loader().batches_per_epoch(); }
  std::size_t samples_per_epoch() const { return core_->loader().samples_per_epoch(); }
  std::size_t dataset_size() const { return core_->loader().source().size(); }
  std::vector<std::string> class_names() const { return core_->loader().source().class_names(); }

 private:
  PyCore() = default;

  std::shared_ptr<Core> core_;
  std::string summary_;
  std::vector<std::string> notes_;
};

// iter(loader) is iter(partial(_next_batch, loader, generation), None), a C iterator: no
// Python code runs between Core::Next's last look for Ctrl-C and the caller. Before the
// request, Loader._before_next checks it and releases the previous batch; an epoch's end
// is recorded (Loader._ended) before Loader._warn_bad_samples runs.
py::object NextBatch(const py::object& owner, const py::object& generation) {
  const py::object epoch = owner.attr("_before_next")(generation);
  const py::object core = owner.attr("_core");  // held: a stop() cannot free it meanwhile
  py::object batch;
  try {
    batch = core.cast<PyCore&>().Next();
  } catch (const loader::SlotsHeldError&) {
    owner.attr("_slots_held")();  // raises tilefeed.SlotsHeldError, with its advice
    throw;
  }
  owner.attr("_mid_epoch") = py::bool_(!batch.is_none());
  if (!batch.is_none()) {
    owner.attr("_previous") = batch;
    return batch;
  }
  owner.attr("_ended") = generation;
  owner.attr("_warn_bad_samples")(epoch, 2);  // 2: the warning names the caller's line
  return batch;
}

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
  m.def(
      "_image_size",
      [](const py::dict& options) {
        const loader::SizeSchedule& schedule = ParseOptions(options).image_size;
        const loader::ImageSize largest = schedule.Largest();
        return py::make_tuple(schedule.text(), py::make_tuple(largest.height, largest.width));
      },
      "(the schedule's text, (height, width) of its largest size) of the options' image_size");
  m.def("_option_specs", &OptionSpecs,
        "the shared option table (loader/option_specs.h) by Python keyword");
  tilefeed::python::RegisterCuda(m);
  m.def(
      "_plan_sample",
      [](const py::dict& options, std::uint64_t epoch, std::uint64_t sample, int width,
         int height) {
        const loader::SamplePlan sample_plan =
            loader::PlanSample(ParseOptions(options), epoch, sample, width, height);
        const codecs::CropPlan& plan = sample_plan.crop;
        const codecs::SourceBox box = codecs::ShownBox(plan);
        py::list ops;  // each as its torchvision call's name and arguments (augment.h)
        for (const loader::PixelOp& op : sample_plan.ops) {
          const std::string name(loader::PixelOpName(op));
          const codecs::Rect& a = op.area;
          using K = loader::PixelOpKind;
          ops.append(op.kind == K::kPolicy ? py::make_tuple(name, op.value, op.fill)
                     : op.kind == K::kErase
                         ? py::make_tuple(name, a.y, a.x, a.height, a.width, op.fill)
                     : op.kind == K::kGrayscale ? py::make_tuple(name)
                                                : py::make_tuple(name, op.value));
        }
        return py::dict(
            "crop"_a = py::make_tuple(plan.crop.x, plan.crop.y, plan.crop.width, plan.crop.height),
            "box"_a = py::make_tuple(box.x0, box.y0, box.x1, box.y1), "flip"_a = plan.flip,
            "dct_scaling"_a = plan.dct_scaling, "ops"_a = ops);
      },
      "loader::PlanSample: the crop plan and pixel ops of one sample");
  m.def(
      "_augment_text",
      [](const std::string& text) {
        try {
          return loader::AugmentSpecText(loader::ParseAugmentSpec(text));
        } catch (const std::invalid_argument& e) {
          throw py::value_error(e.what());
        }
      },
      "loader::ParseAugmentSpec then AugmentSpecText: the canonical text of an augment spec");
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
        // The same detection as `train` (tilefeed/launch/launch.h), over this process's
        // environment; its std::invalid_argument becomes ValueError.
        const tilefeed::launch::InstanceInfo info =
            tilefeed::launch::DetectInstance(tilefeed::launch::ProcessEnvironment());
        return py::dict("index"_a = info.index, "count"_a = info.count,
                        "local_index"_a = info.local_index, "local_count"_a = info.local_count);
      },
      "The launcher's instance layout (OpenMPI/poprun, PMI), as `train` detects it");
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
      .def("stop", &PyCore::Stop)
      .def("pause", &PyCore::Pause, "loader::Loader::Pause: joins the workers, for a fork()")
      .def("resume", &PyCore::Resume, "loader::Loader::Resume: restarts them at state()")
      .def("metrics", &PyCore::Metrics)
      .def("bad_samples", &PyCore::BadSamples)
      .def("state", &PyCore::State,
           "loader::LoaderState as a dict: seed, epoch, position, dataset_size")
      .def("seek", &PyCore::Seek, py::arg("epoch"), py::arg("position"),
           "continues at `position` of `epoch` (loader::Loader::Seek)")
      .def("dataset_digest", &PyCore::DatasetDigest, "loader::Identify(source).digest")
      .def_property_readonly("batches_per_epoch", &PyCore::batches_per_epoch)
      .def_property_readonly("samples_per_epoch", &PyCore::samples_per_epoch)
      .def_property_readonly("dataset_size", &PyCore::dataset_size)
      .def_property_readonly("class_names", &PyCore::class_names)
      .def_property_readonly("summary", &PyCore::summary,
                             "One line: the dataset's kind, path, samples and classes")
      .def_property_readonly("notes", &PyCore::notes,
                             "What opening the dataset noticed (files skipped, ...), a line each");
  m.def("_next_batch", &NextBatch, "the next batch of iter(loader), None at the end");
}

}  // namespace

loader::OutputFormat ParseOutputFormat(const py::dict& options) {
  return ParseOptions(options).output;
}

}  // namespace tilefeed::python

PYBIND11_MODULE(_tilefeed, m) {
  m.doc() = "tilefeed's C++ loader; use the tilefeed package, not this module.";
  m.attr("__version__") = TILEFEED_VERSION;
  tilefeed::python::RegisterErrors(m);
  tilefeed::python::RegisterFunctions(m);
  tilefeed::python::RegisterBatch(m);
  tilefeed::python::RegisterCore(m);
}

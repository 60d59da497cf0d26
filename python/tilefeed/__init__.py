"""tilefeed: the tilefeed C++ data loader, for Python and PyTorch.

    import tilefeed
    loader = tilefeed.Loader("data/train", batch_size=256, image_size=224, workers=8)
    for epoch in range(90):
        loader.set_epoch(epoch)
        for batch in loader:
            images = batch.torch()                  # torch.uint8, N x 224 x 224 x 3, no copy
            labels = torch.from_numpy(batch.labels)  # int64

Loader takes the C++ LoaderOptions fields as keyword arguments, with the same names and
defaults (help(tilefeed.Loader) shows them); libjpeg-turbo's tuning is one object,
jpeg=tilefeed.JpegOptions(...), and the crop ranges are crop_scale=(min, max) and
crop_ratio=(min, max), as in torchvision.

Memory. A Batch is a view of one of the loader's prefetch_depth slots: batch.images and
batch.sample_indices (numpy) and batch.torch() (DLPack) share that memory and copy nothing;
batch.labels is an int64 copy (batch.labels_int32 is the zero-copy view). The rule:

  * Advancing the iterator releases the previous Batch: its slot goes back to the loader,
    and using that Batch object afterwards raises ValueError.
  * Except that every array or tensor made from a batch holds the slot itself, for as long
    as it lives. So no view ever dangles; while you keep one, the loader has one slot fewer
    to decode into. Keeping views of prefetch_depth batches (a list of batch.torch()
    tensors) would leave the next batch nowhere to go: asking for it then raises
    SlotsHeldError (a LoaderError) once held_slots_timeout seconds (default 10) pass
    without a slot coming back, instead of hanging. Keep copies instead
    (batch.torch().clone(), batch.images.copy(), or Loader(copy=True)), or pass a
    prefetch_depth larger than the number of batches you keep.

So `for batch in loader: x = batch.torch().float()` never holds more than the batch in
hand. Loader(copy=True) gives batches that own copies of their memory, return the slot at
once and are never released by the iterator: for code that keeps batches (list(loader)).

Instances. By default (slice="auto") a Loader reads its launcher's slice of every epoch:
OpenMPI's OMPI_COMM_WORLD_RANK/SIZE as poprun and mpirun set them (or PMI_RANK/SIZE; the
same C++ detection as `train`), else torchrun's RANK/WORLD_SIZE, else an initialised
torch.distributed (looked at only if the program imported torch). Those present must
agree, or the Loader raises ValueError. Once per process it prints one line to stderr
saying which instance it is and from what, e.g. "tilefeed: instance 1 of 2 (from
OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE (OpenMPI/poprun)): reading slice (1, 2) of every
epoch" -- a print rather than a logging record, so that it shows without logging set up;
a single process with no launcher prints nothing. slice=(index, count) overrides the
launcher and prints nothing. detect_slice() tells what "auto" finds. (A "shard" is a record
file, never an instance's share.)

Bad samples. Under bad_sample_policy="skip" (the default) a sample that cannot be read or
decoded is replaced by another; unless on_bad_sample is given, the Loader issues one
BadSampleWarning per epoch (at its end, or when the epoch is left early) with the count
and the first file and reason. loader.bad_samples() lists them all.

Checkpoints. loader.state_dict() is a plain picklable dict: where the next batch comes from.
loader.load_state_dict(d) resumes there: byte for byte, or split over another slice count.

GPU. Loader(..., device="cuda", dtype="bfloat16", mean=..., std=..., layout="nchw") yields
batches already on the GPU, converted and normalised there, while the model computes on the
previous one: see help(tilefeed.cuda). Without CUDA it raises RuntimeError saying why.

Threads. The GIL is released while waiting for a batch and while indexing, starting and
stopping; decode workers take it only to call on_bad_sample. Ctrl-C interrupts a wait with
KeyboardInterrupt within about 20 ms; the batch being waited for is not lost (the next
request returns it). A Loader is meant for one consuming thread; stop() may be called from
any thread, but not from inside on_bad_sample.
"""

import atexit
import dataclasses
import inspect
import math
import numbers
import os
import sys
import warnings
import weakref

from . import _tilefeed
from ._tilefeed import Batch, LoaderError, SourceError

__version__ = _tilefeed.__version__  # the CMake project's version

__all__ = ["Batch", "BadSampleWarning", "IMAGENET_MEAN", "IMAGENET_STD", "IterableDataset",
           "JpegOptions", "Loader", "RemoteOptions", "LoaderError", "SlotsHeldError", "SourceError", "SOURCES", "detect_slice"]


class SlotsHeldError(_tilefeed._SlotsHeldError):
    """Asking for the next batch while every prefetch slot is held by batches (or views of
    them: batch.torch(), batch.images) that are still alive: it could never arrive.
    A LoaderError; the loader is unharmed and continues once a batch is dropped."""


class BadSampleWarning(UserWarning):
    """Issued once per epoch when bad samples were skipped and no on_bad_sample was given."""

# The `source` spellings. "auto" (the default) detects what `data` holds with the same
# rules as every tilefeed tool (tilefeed/loader/dataset.h): record shards (a directory holding
# tilefeed-manifest.txt, or the manifest), CIFAR-10 binary batches, a root with train/, val/
# or test/ splits (the `split` argument picks one), or an ImageFolder tree. The others force a
# kind; "cifar10-train" and "cifar10-test" also pick CIFAR-10's split.
SOURCES = ("auto", "imagefolder", "shards", "cifar10", "cifar10-train", "cifar10-test")

# loader::LoaderOptions' defaults, read from C++ so the signature below cannot drift.
_D = _tilefeed._default_options()
# The shared option table (tilefeed/loader/option_specs.h) by keyword: the split choices below;
# the ranges are checked in C++ (_check_options).
_SPECS = _tilefeed._option_specs()

# Loaders still running at interpreter exit are stopped first, so no worker thread calls
# on_bad_sample into a finalizing interpreter.
_live = weakref.WeakSet()


@atexit.register
def _stop_all():
    for loader in list(_live):
        loader.stop()


# -- fork() -----------------------------------------------------------------------------------
# A thread pool does not survive fork(): the child has only the forking thread, while
# oneTBB's process-wide scheduler state (copied into the child) still describes the parent's
# workers, and a Loader built on it in the child can crash. So before a fork made through
# Python (os.fork, multiprocessing, torch DataLoader workers) every live Loader of this
# process pauses (joins its workers, keeping its position) and oneTBB's workers are waited
# out; the child then starts with no threads and builds its own pool on first use, and the
# parent's Loaders resume where they were (the batches they had decoded ahead are decoded
# again: a fork costs each running Loader one refill of its prefetch slots).
# Loaders inherited by the child have no workers there: using one raises LoaderError.
# If oneTBB's workers could not be released (a thread of this process was still inside a
# oneTBB algorithm), the child refuses to make Loaders, with one line saying why.
_fork = {"unusable": None}  # in a child: why oneTBB cannot run here, or None


def _before_fork():
    for loader in list(_live):
        loader._core.pause()
    _fork["released"] = _tilefeed._release_worker_threads()


def _after_fork_in_parent():
    for loader in list(_live):
        loader._core.resume()


def _after_fork_in_child():
    _live.clear()  # the parent's Loaders: never paused, resumed or stopped from here
    if not _fork.pop("released", True):
        _fork["unusable"] = (
            f"tilefeed.Loader: this process (pid {os.getpid()}) was forked while oneTBB worker "
            f"threads of its parent were still in use, so no Loader can run in it; make the "
            f"Loader before starting other threads that use tilefeed, or start processes with "
            f"multiprocessing's 'spawn' or 'forkserver' method")


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                    after_in_child=_after_fork_in_child)


# The codecs::JpegOptions fields that JpegOptions groups (the binding takes them by name).
_JPEG_FIELDS = ("max_pixels", "max_scans", "corrupt_data", "dct_scales", "fast_dct",
                "fast_upsample")


@dataclasses.dataclass(frozen=True, repr=False)
class JpegOptions:
    """libjpeg-turbo's tuning, for Loader(jpeg=tilefeed.JpegOptions(...)): the few knobs of
    the JPEG decoders that most runs leave alone, in one object. The defaults are the C++
    codecs::JpegOptions' and keep the pixel contract (the pixels PIL and torchvision decode).

    max_pixels     largest width x height accepted, read from the header before any
                   allocation; a larger image is a bad sample (at least 1; default 64 MP)
    max_scans      largest number of scans in a progressive JPEG; more is a bad sample
                   (at least 1; default 100)
    corrupt_data   "fail" (the default) or "accept", which BREAKS THE PIXEL CONTRACT: the
                   pixels libjpeg made of a corrupt or truncated JPEG are kept, not reported
                   as a bad sample
    dct_scales     "pow2" (the default: 1/2, 1/4, 1/8) or "eighths" (every n/8): the DCT
                   scale-downs a decode may use where scaling is allowed (train crops, or
                   eval_dct_scaling); "eighths" gives other pixels than "pow2"
    fast_dct       True BREAKS THE PIXEL CONTRACT: libjpeg's fast integer IDCT, not the
                   accurate one PIL uses (pixels differ by a few levels)
    fast_upsample  True BREAKS THE PIXEL CONTRACT: nearest-neighbour chroma upsampling, not
                   libjpeg's "fancy" filter that PIL uses

    Values are checked in C++ with the Loader's other options.
    """

    max_pixels: int = _D["max_pixels"]
    max_scans: int = _D["max_scans"]
    corrupt_data: str = _D["corrupt_data"]
    dct_scales: str = _D["dct_scales"]
    fast_dct: bool = _D["fast_dct"]
    fast_upsample: bool = _D["fast_upsample"]

    def _fields(self):
        return {name: getattr(self, name) for name in _JPEG_FIELDS}

    def __repr__(self):
        given = ", ".join(f"{k}={v!r}" for k, v in self._fields().items() if v != _D[k])
        return f"tilefeed.JpegOptions({given})"


def _jpeg_fields(jpeg):
    """The codecs::JpegOptions fields of Loader's jpeg= (None: the defaults)."""
    if jpeg is None:
        jpeg = JpegOptions()
    if not isinstance(jpeg, JpegOptions):
        raise TypeError(f"tilefeed.Loader: jpeg must be a tilefeed.JpegOptions or None, "
                        f"got {jpeg!r}")
    return jpeg._fields()


@dataclasses.dataclass(frozen=True, repr=False)
class RemoteOptions:
    """How Loader(remote=tilefeed.RemoteOptions(...)) reads http://, https:// and s3://
    datasets (docs/datasets.md), as the tools' --cache-dir, --cache-limit, --s3-endpoint and
    --remote-retries do:

    cache_dir       a path, or None (the default) for no cache: fetched blocks and remote tar
                    indexes kept on disk, shared by the processes of the host
    cache_limit     bytes, at least 4 MiB (default 10 GiB): the bound of the cache's blocks
    s3_endpoint     a URL, or None for AWS: where s3://bucket/key is fetched from
    remote_retries  0-20 (default 5): retries of a failed request before its sample is bad

    s3:// keys come from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
    AWS_REGION (or AWS_DEFAULT_REGION) and AWS_ENDPOINT_URL_S3 (or AWS_ENDPOINT_URL), read
    when the Loader is made. Values are checked in C++ (loader::RemoteOptionsProblem).
    """

    cache_dir: object = None
    cache_limit: int = 10 << 30
    s3_endpoint: object = None
    remote_retries: int = 5

    def __repr__(self):
        given = ", ".join(f"{k}={v!r}" for k, v in dataclasses.asdict(self).items()
                          if v != getattr(RemoteOptions, k))
        return f"tilefeed.RemoteOptions({given})"


def _remote_options(options):
    """Loader's remote= (a RemoteOptions or None) as the _Core takes it: RemoteOptions' C++
    fields, with the AWS keys from the environment; the ranges are checked in C++."""
    if options is None:
        options = RemoteOptions()
    if not isinstance(options, RemoteOptions):
        raise TypeError(f"tilefeed.Loader: remote must be a tilefeed.RemoteOptions or None, "
                        f"got {options!r}")
    cache_dir, s3_endpoint = options.cache_dir, options.s3_endpoint
    remote = {"cache_limit": options.cache_limit, "retries": options.remote_retries}
    if cache_dir is not None:
        if not isinstance(cache_dir, (str, os.PathLike)) or not os.fspath(cache_dir):
            raise TypeError(f"tilefeed.Loader: cache_dir must be a path or None, got {cache_dir!r}")
        remote["cache_dir"] = os.fspath(cache_dir)
    if s3_endpoint is not None:
        if not isinstance(s3_endpoint, str) or not s3_endpoint:
            raise TypeError(f"tilefeed.Loader: s3_endpoint must be a URL or None, "
                            f"got {s3_endpoint!r}")
        remote["s3_endpoint"] = s3_endpoint
    # The standard AWS variables, each field from the first one set (as the tools read them).
    for key, variables in (("aws_access_key_id", ("AWS_ACCESS_KEY_ID",)),
                           ("aws_secret_access_key", ("AWS_SECRET_ACCESS_KEY",)),
                           ("aws_session_token", ("AWS_SESSION_TOKEN",)),
                           ("aws_region", ("AWS_REGION", "AWS_DEFAULT_REGION")),
                           ("s3_endpoint", ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"))):
        value = next((os.environ[v] for v in variables if os.environ.get(v)), None)
        if value is not None and key not in remote:
            remote[key] = value
    return remote


class Loader:
    """Batches of uint8 images from any dataset tilefeed opens, decoded in C++.

    `data` is an ImageFolder tree, a root with train/, val/ or test/ (`split` picks one: the
    same folder as every tool's --split), a directory of tilefeed record shards (any codec,
    e.g. packed with --codec jpeg-index), or CIFAR-10's binary directory (val and test: its
    test_batch.bin): the same rules as `train --data`. `source` forces a kind. A split that
    `data` lacks raises SourceError naming it.

    image_size is the side of square output images, or (height, width) for rectangles.
    dtype ("uint8", the default; "float16", "bfloat16", "float32", or the torch/numpy dtype)
    with mean/std (per RGB channel, torchvision units: images scaled to [0, 1]; see
    IMAGENET_MEAN, IMAGENET_STD) and layout ("NHWC" or "NCHW") make the C++ workers write
    batches a model eats: (x / 255 - mean) / std in float32, rounded to dtype, no pass in
    Python. A list of (path or bytes, label) pairs, or a CSV file of path,label rows, is a
    dataset too, read by the same workers.

    slice="auto" (the default) reads the launcher's slice of every epoch (see the module
    help: OpenMPI/poprun, torchrun, torch.distributed); slice=(index, count) sets it.
    held_slots_timeout (seconds) bounds the wait for a batch while every slot is held by
    batches or views you keep; then SlotsHeldError is raised.

    Iterating a Loader yields the Batches of one epoch; each new iter() continues with the
    next epoch (or the one given to set_epoch()). Epoch e's batches are a pure function of
    (seed, e, dataset, slice): worker count and timing change nothing.
    epochs=N (at least 1, as the tools' --epochs) ends iteration after epoch N - 1;
    epochs=None, the default, iterates epochs until stop(). To resume, pass a state_dict() to
    load_state_dict(): where a run stands is a LoaderState, not options.

    Raises ValueError for bad options, SourceError (an OSError) if `data` cannot be
    indexed, and, while iterating, LoaderError (a RuntimeError) for a bad sample under
    bad_sample_policy="fail" (the message names the file and the reason) or a failed
    pipeline. on_bad_sample(dict(epoch, sample, where, reason)) is called from a worker
    thread for every bad sample; an exception it raises is re-raised by the next batch
    request.

    Remote datasets (http://, https://, s3:// shards and tars; docs/datasets.md) take
    remote=tilefeed.RemoteOptions(...): the block cache, the S3 endpoint and the retries,
    as the tools' --cache-dir, --cache-limit, --s3-endpoint and --remote-retries.
    """

    def __new__(cls, *args, device=None, **kwargs):
        # device="cuda": batches land on the GPU, converted there (tilefeed.cuda).
        if device is not None and str(device) != "cpu":
            from .cuda import CudaLoader
            return CudaLoader(*args, device=device, **kwargs)
        return super().__new__(cls)

    def __init__(self, data, *, source="auto", split="train",
                 batch_size=_D["batch_size"],
                 image_size=_D["image_size"],
                 mode=_D["mode"],
                 eval_resize=_D["eval_resize"],
                 eval_dct_scaling=_D["eval_dct_scaling"],
                 crop_scale=_D["crop_scale"],
                 crop_ratio=_D["crop_ratio"],
                 flip_probability=_D["flip_probability"],
                 layout=_D["layout"],
                 dtype=_D["dtype"],
                 mean=_D["mean"],
                 std=_D["std"],
                 workers=_D["workers"],
                 prefetch_depth=_D["prefetch_depth"],
                 seed=_D["seed"],
                 shuffle=_D["shuffle"],
                 slice="auto",
                 remainder=_D["remainder"],
                 drop_last_batch=_D["drop_last_batch"],
                 epochs=None,
                 bad_sample_policy=_D["bad_sample_policy"],
                 max_substitute_attempts=_D["max_substitute_attempts"],
                 held_slots_timeout=_D["held_slots_timeout"],
                 jpeg=None,
                 on_bad_sample=None,
                 copy=False,
                 remote=None,
                 device=None,
                 _slot_memory=None):
        arguments = locals()
        arguments.update(_output_options(dtype, mean, std, layout))
        arguments.update(_jpeg_fields(jpeg))
        if _fork["unusable"]:
            raise LoaderError(_fork["unusable"])
        self._pid = os.getpid()
        self._options = {name: arguments[name] for name in _D}
        if on_bad_sample is not None and not callable(on_bad_sample):
            raise TypeError("tilefeed.Loader: on_bad_sample must be callable or None")
        self._remote = _remote_options(remote)
        self._options["slice"], self._slice_origin = _resolve_slice(slice)
        _check_options(self._options, self._remote)
        _check_workers(self._options["workers"])
        self._data, self._split, self._samples, self._sample_classes = _resolve_data(data, split)
        self._source = source
        self._on_bad_sample = on_bad_sample
        self._copy = bool(copy)
        self._slot_memory = _slot_memory  # tilefeed.cuda's pinned slots
        self._bad_history = []  # reports of C++ loaders replaced by load_state_dict()
        self._bad_warned = set()  # epochs whose bad samples were warned about
        self._stopped = False
        self._generation = 0
        self._wanted = None  # set_epoch()'s epoch, applied by the next iter()
        self._start_core()
        self._previous = None  # the last zero-copy batch handed out
        self._iterator = None  # a weak reference to the newest iter()'s iterator
        _live.add(self)
        if type(self) is Loader:
            torch_class = _torch_loader_class()
            if torch_class is not None:
                self.__class__ = torch_class

    def _start_core(self):
        """Opens the C++ loader and keeps what it found out about the dataset."""
        self._core = self._make_core()
        self._mid_epoch = False  # the core has delivered part of its current epoch
        self._batches_per_epoch = self._core.batches_per_epoch
        self._samples_per_epoch = self._core.samples_per_epoch
        self._dataset_size = self._core.dataset_size
        self._classes = tuple(self._core.class_names)
        self._summary = self._core.summary
        self._notes = tuple(self._core.notes)
        for note in self._notes:
            warnings.warn(f"tilefeed.Loader: {note}", stacklevel=3)

    # -- iteration ------------------------------------------------------------------------

    def __iter__(self):
        self._check_process()
        if self._stopped:
            raise ValueError("tilefeed.Loader: iterating a stopped loader")
        if self._wanted is not None:
            target, self._wanted = self._wanted, None
        else:
            target = self.epoch + 1 if self._mid_epoch else self.epoch
        if target != self.epoch or self._mid_epoch:
            self._seek(target, 0)
        self._generation += 1
        iterator = _EpochIterator(self, self._generation)
        self._iterator = weakref.ref(iterator)
        return iterator

    def __len__(self):
        """Batches per epoch for this instance."""
        return self._batches_per_epoch

    def set_epoch(self, epoch):
        """Makes the next iter() yield epoch `epoch` (like DistributedSampler.set_epoch).

        Free when the loader is already at the start of that epoch (the usual loop);
        otherwise the C++ loader seeks to that epoch, which costs refilling the prefetch
        slots.
        """
        if isinstance(epoch, bool) or not isinstance(epoch, numbers.Integral):
            raise TypeError(f"tilefeed.Loader.set_epoch: epoch must be an int, got {epoch!r}")
        epoch = int(epoch)
        if epoch < 0:
            raise ValueError(f"tilefeed.Loader.set_epoch: epoch must be at least 0, got {epoch}")
        self._wanted = epoch

    def crop_plan(self, epoch, sample, width, height):
        """Which source pixels the batch row of `sample` (an index in the source, as in
        batch.sample_indices) of `epoch` shows, for a width x height image: a dict with
        "box" (x0, y0, x1, y1), the fractional source box resized to the output; "crop"
        (x, y, w, h), the whole pixels the resize reads (in train, the box itself: the
        rectangle to give torchvision's resized_crop); "flip"; "dct_scaling" (whether a JPEG
        may be decoded at a DCT scale-down). The contracts are in tilefeed/loader/augment.h."""
        return _tilefeed._plan_sample(_core_options(self._options), epoch, sample, width, height)

    def _make_core(self):
        options = _core_options(self._options)
        if self._samples is not None:
            return _tilefeed._Core.from_list(self._samples, self._sample_classes,
                                             self._on_bad_sample, options)
        return _tilefeed._Core(self._data, self._source, self._split, self._on_bad_sample,
                               options, self._remote, self._slot_memory)

    def _seek(self, epoch, position):
        """Moves the C++ loader to `position` of `epoch`; outside [0, epochs) it has nothing
        more to yield."""
        self._warn_bad_samples(self.epoch)
        self._core.seek(epoch, position)
        self._mid_epoch = False

    def _check_process(self):
        if os.getpid() != self._pid:
            raise LoaderError(
                f"tilefeed.Loader: this Loader was made in process {self._pid} and this is "
                f"process {os.getpid()}, a fork of it; its workers do not survive fork(). "
                f"Make the Loader in the process that iterates it (e.g. in an IterableDataset's "
                f"__iter__, which DataLoader workers call; see tilefeed.IterableDataset)")

    def _next(self, iterator):
        self._check_process()
        if iterator._generation != self._generation:
            raise RuntimeError("tilefeed.Loader: this iterator was replaced by a newer iter()")
        if iterator._done:
            raise StopIteration
        # Advancing releases the previous batch's own hold on its slot; views made from
        # it keep theirs. Without this, `for batch in loader` would hold the previous slot
        # while waiting for the next (and deadlock at prefetch_depth=1).
        previous, self._previous = self._previous, None
        if previous is not None:
            previous.release()
        epoch = self.epoch
        try:
            batch = self._core.next(self._copy)
        except _tilefeed._SlotsHeldError:
            raise SlotsHeldError(self._slots_held_message()) from None
        if batch is None:  # the end of the epoch (the core moved to the next), or the end
            iterator._done = True
            self._warn_bad_samples(epoch)
            self._mid_epoch = False
            raise StopIteration
        self._mid_epoch = True
        if not self._copy:
            self._previous = batch
        return batch

    def _slots_held_message(self):
        depth = self._options["prefetch_depth"]
        return (f"tilefeed.Loader: the next batch can never arrive: all {depth} batch slots "
                f"(prefetch_depth={depth}) are held by batches you still keep alive, or by "
                f"views of them (batch.torch() tensors, batch.images arrays, e.g. kept in a "
                f"list), and none was released within held_slots_timeout="
                f"{self._options['held_slots_timeout']} s. Keep copies instead "
                f"(batch.torch().clone(), batch.images.copy(), or Loader(copy=True)), or pass "
                f"a prefetch_depth larger than the number of batches you keep.")

    def _warn_bad_samples(self, epoch):
        """One BadSampleWarning for `epoch`'s skipped samples, unless the user handles them
        (on_bad_sample) or was already warned."""
        if (self._on_bad_sample is not None or self._options["bad_sample_policy"] != "skip"
                or epoch in self._bad_warned):
            return  # handled by the user, or raised as LoaderError under "fail"
        bad = [b for b in self.bad_samples() if b["epoch"] == epoch]
        if not bad:
            return
        self._bad_warned.add(epoch)
        first = bad[0]
        warnings.warn(
            f"tilefeed.Loader: epoch {epoch}: {len(bad)} bad sample(s) skipped and replaced; "
            f"the first: {first['where']}: {first['reason']} (loader.bad_samples() lists "
            f"them; pass on_bad_sample= to handle them, or bad_sample_policy='fail')",
            BadSampleWarning, stacklevel=4)

    # -- checkpoints ----------------------------------------------------------------------

    def state_dict(self):
        """Where the next batch comes from, as a plain dict for a checkpoint:
        {"version": 1, "seed", "epoch", "position", "dataset_size"}, position being the
        samples of `epoch`'s permutation already delivered by all instances together.

        While an iterator of an epoch is alive (inside `for batch in loader`, even after the
        epoch's last batch, before StopIteration) it is where that epoch continues. Otherwise
        (between epochs, or after a `break` dropped the iterator) it is where the next iter()
        starts: the next epoch, or set_epoch(e)'s start of epoch e. So resuming from it
        yields the batches the next batch request or iteration would have yielded. It does
        not depend on the instance count.
        """
        state = self._core.state()
        epoch, position = state["epoch"], state["position"]
        if self._wanted is not None and (self._wanted != epoch or self._mid_epoch):
            epoch, position = self._wanted, 0  # the next iter() restarts at set_epoch's epoch
        elif self._mid_epoch and (self._iterator is None or self._iterator() is None):
            epoch, position = epoch + 1, 0  # left early: the next iter() starts the next epoch
        return {"version": _STATE_VERSION, "seed": int(self._options["seed"]),
                "epoch": int(epoch), "position": int(position),
                "dataset_size": int(self._dataset_size)}

    def load_state_dict(self, state):
        """Continues from a state_dict(): the next iter() yields the rest of its epoch, and
        the iterations after it the following epochs, up to `epochs` as before.

        With the same slice count (and options) the batches are byte for byte those of an
        uninterrupted run; with another count, the new instances split the rest of the epoch
        and deliver every remaining sample once (plus padding) and none already delivered.
        The loader's seed becomes the state's. set_epoch() of the state's epoch keeps the
        position; another epoch starts from its beginning. Moves the C++ loader there now
        (re-creating it for a state of another seed).
        Raises TypeError for a state that is not a dict of ints, ValueError for another
        version, a position past the end, or a state saved for a dataset of another size.
        """
        seed, epoch, position, dataset_size = _check_state(state)
        if dataset_size != self._dataset_size:
            raise ValueError(
                f"tilefeed.Loader.load_state_dict: the state is for a dataset of "
                f"{dataset_size} samples; this loader's source has {self._dataset_size}")
        if self._stopped:
            raise ValueError("tilefeed.Loader.load_state_dict: the loader is stopped")
        self._wanted = None
        self._generation += 1  # iterators made before yield no more
        self._warn_bad_samples(self.epoch)
        if seed != self._options["seed"]:  # a C++ loader's seed is fixed: make another
            self._bad_history.extend(self._core.bad_samples())
            self._core.stop()
            self._options["seed"] = seed
            self._core = self._make_core()
        self._core.seek(epoch, position)
        self._mid_epoch = False

    # -- state ----------------------------------------------------------------------------

    @property
    def epoch(self):
        """The epoch the current or next iteration yields (before any set_epoch())."""
        return self._core.state()["epoch"]

    @property
    def classes(self):
        """Class names indexed by label."""
        return list(self._classes)

    @property
    def summary(self):
        """One line: what `data` was opened as, its path, samples and classes."""
        return self._summary

    @property
    def notes(self):
        """What opening the dataset noticed (files skipped, ...), one line each; each was
        also issued as a warning when the Loader was made."""
        return list(self._notes)

    @property
    def dataset_size(self):
        """Samples in the source."""
        return self._dataset_size

    @property
    def samples_per_epoch(self):
        """This instance's samples per epoch (padded when sliced)."""
        return self._samples_per_epoch

    @property
    def slice(self):
        """(index, count): this instance's slice of every epoch."""
        return tuple(self._options["slice"])

    @property
    def slice_origin(self):
        """Where slice came from: "explicit", or the launcher variables it was detected from."""
        return self._slice_origin

    @property
    def options(self):
        """The LoaderOptions fields as given (the seed is the last load_state_dict()'s)."""
        return dict(self._options)

    def metrics(self):
        """LoaderMetrics as a dict, for the C++ loader since it was made (by the Loader, or
        by a load_state_dict() of another seed)."""
        return self._core.metrics()

    def bad_samples(self):
        """Bad samples reported so far: dicts with epoch, sample, where and reason."""
        return self._bad_history + self._core.bad_samples()

    def stop(self):
        """Stops the workers and joins them; iteration then ends. Idempotent. Batches
        already handed out stay valid."""
        if not self._stopped:
            self._warn_bad_samples(self.epoch)
        self._stopped = True
        self._core.stop()

    close = stop

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.stop()
        return False

    def __repr__(self):
        o = self._options
        return (f"tilefeed.Loader({self._data!r}, source={self._source!r}, "
                f"batch_size={o['batch_size']}, image_size={o['image_size']}, "
                f"mode={o['mode']!r}, layout={o['layout']!r}, workers={o['workers']}, "
                f"epoch={self.epoch}{', stopped' if self._stopped else ''})")


# -- samples listed in Python ------------------------------------------------------------------


def _resolve_data(data, split):
    """(location or description, split, listed samples or None, their class names or None)
    for Loader's `data`: a list of (path or bytes, label), a CSV file, or a location."""
    listed = isinstance(data, (list, tuple))
    if listed or (isinstance(data, (str, os.PathLike)) and os.fspath(data).endswith(".csv")
                  and os.path.isfile(data)):
        if split != "train":
            raise ValueError(f"tilefeed.Loader: split={split!r} needs a location with splits; "
                             f"a list or CSV of samples is one dataset")
        samples, classes = _list_samples(data) if listed else _csv_samples(data)
        where = f"<list of {len(data)} samples>" if listed else os.fspath(data)
        return where, split, samples, classes
    # A location's split is resolved by the C++ opener alone (loader::OpenDataset), as for
    # every tool's --split: it raises SourceError naming what is missing.
    return os.fspath(data), split, None, None


def _list_samples(data, where="data"):
    """[(path or bytes, label)] -> ([(path, bytes, label)], class names). Labels are ints >= 0
    (class names "0".."K-1") or all strings (class names sorted, labels their indices)."""
    if not data:
        raise ValueError(f"tilefeed.Loader: {where} is empty: no samples")
    entries, labels = [], []
    for i, entry in enumerate(data):
        if not isinstance(entry, (tuple, list)) or len(entry) != 2:
            raise TypeError(f"tilefeed.Loader: {where}[{i}] must be (path or bytes, label), got "
                            f"{entry!r:.80}")
        item, label = entry
        if isinstance(item, (str, os.PathLike)):
            entries.append((os.fspath(item), b""))
        else:
            try:
                raw = bytes(memoryview(item).cast("B"))
            except TypeError:
                raise TypeError(f"tilefeed.Loader: {where}[{i}][0] must be a path or bytes, got "
                                f"{type(item).__name__}") from None
            if not raw:
                raise ValueError(f"tilefeed.Loader: {where}[{i}][0] is empty bytes")
            entries.append(("", raw))
        labels.append(label)
    if all(isinstance(label, str) for label in labels):
        classes = sorted(set(labels))
        index = {name: k for k, name in enumerate(classes)}
        labels = [index[label] for label in labels]
    else:
        for i, label in enumerate(labels):
            if isinstance(label, bool) or not isinstance(label, numbers.Integral):
                raise TypeError(f"tilefeed.Loader: {where}[{i}][1] must be an int label (or every "
                                f"label a class name), got {label!r}")
            if not 0 <= label <= _INT32:
                raise ValueError(f"tilefeed.Loader: {where}[{i}][1]: label {label} is outside "
                                 f"[0, 2^31)")
        classes = [str(k) for k in range(max(labels) + 1)]
    return [(path, raw, int(label)) for (path, raw), label in zip(entries, labels)], classes


def _csv_samples(path):
    """A CSV of path,label rows (an optional header row "path,label"; relative paths are
    relative to the CSV's directory) -> _list_samples' result."""
    import csv
    base = os.path.dirname(os.path.abspath(path))
    rows = []
    with open(path, newline="", encoding="utf-8") as f:
        for number, row in enumerate(csv.reader(f), start=1):
            if not row or (number == 1 and [c.strip().lower() for c in row] == ["path", "label"]):
                continue
            if len(row) != 2:
                raise ValueError(f"tilefeed.Loader: {path}:{number}: expected 'path,label', got "
                                 f"{len(row)} fields")
            file, label = row[0].strip(), row[1].strip()
            rows.append((os.path.join(base, file), label))
    if rows and all(label.lstrip("-").isdigit() for _, label in rows):
        rows = [(file, int(label)) for file, label in rows]
    return _list_samples(rows, where=os.fspath(path))


# -- PyTorch --------------------------------------------------------------------------------

_torch_classes = {}  # torch.utils.data.IterableDataset -> the Loader subclass deriving from it


def _torch_loader_class():
    """Loader with torch.utils.data.IterableDataset as a second base, if the program has
    imported torch (tilefeed never imports it just for this), else None. DataLoader decides
    how to read a dataset with isinstance(dataset, IterableDataset)."""
    data = sys.modules.get("torch.utils.data")
    base = getattr(data, "IterableDataset", None)
    if base is None:
        return None
    if base not in _torch_classes:
        _torch_classes[base] = type("Loader", (Loader, base), {
            "__doc__": Loader.__doc__, "__module__": __name__, "__qualname__": "Loader"})
    return _torch_classes[base]


def __getattr__(name):
    """tilefeed.IterableDataset, made (and torch imported) on first use."""
    if name == "IterableDataset":
        from ._torch import IterableDataset
        globals()[name] = IterableDataset
        return IterableDataset
    raise AttributeError(f"module 'tilefeed' has no attribute {name!r}")


# Loader(...)'s signature is __init__'s: its __new__ only routes device="cuda" (tilefeed.cuda).
Loader.__signature__ = inspect.signature(Loader.__init__).replace(
    parameters=list(inspect.signature(Loader.__init__).parameters.values())[1:])


# -- argument checks ------------------------------------------------------------------------

_INT32 = (1 << 31) - 1


def _image_shape(image_size):
    """(height, width) of image_size: an int (a square) or a pair (height, width). The values
    are checked in C++ with the other options (_check_options)."""
    if not isinstance(image_size, (tuple, list)):
        return image_size, image_size
    if len(image_size) != 2:
        raise TypeError(f"tilefeed.Loader: image_size must be an int or (height, width), "
                        f"got {image_size!r}")
    return tuple(image_size)


def _core_options(options):
    """Loader options as the C++ binding takes them: image_size=(height, width) becomes
    image_height and image_width; epochs=None (no end) stays None."""
    options = dict(options)
    if isinstance(options.get("image_size"), (tuple, list)):
        options["image_height"], options["image_width"] = _image_shape(options["image_size"])
        options["image_size"] = 0  # unused by a rectangle; (0, 0) is refused, not a default
    return options


def _check_options(options, remote=None):
    """Checks Loader options (and remote options) in C++, once, as loader::OptionsProblem and
    the option table (tilefeed/loader/option_specs.h) say: ValueError "tilefeed.Loader: NAME
    must be RANGE, got VALUE" for the first bad value, TypeError for a value of the wrong
    type. Nothing here re-checks a range."""
    _tilefeed._check_options(_core_options(options), remote or {})


# -- output ---------------------------------------------------------------------------------

# torchvision's ImageNet normalisation, for mean= and std= (images scaled to [0, 1]).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

_DTYPES = {"uint8": "uint8", "float16": "float16", "half": "float16", "bfloat16": "bfloat16",
           "float32": "float32", "float": "float32"}


def _dtype_name(dtype):
    """The C++ name of `dtype`: a string, a torch.dtype or a numpy dtype (or type)."""
    if isinstance(dtype, str):
        name = dtype.lower().removeprefix("torch.")
    elif type(dtype).__name__ == "dtype" and type(dtype).__module__ == "torch":
        name = str(dtype).removeprefix("torch.")
    else:
        try:
            import numpy
            name = numpy.dtype(dtype).name
        except TypeError:
            name = repr(dtype)
    if name not in _DTYPES:
        raise ValueError(f"tilefeed.Loader: dtype={dtype!r}; expected uint8, float16, bfloat16 or "
                         f"float32 (a string, torch dtype or numpy dtype)")
    return _DTYPES[name]


def _channels(name, value):
    """mean= or std=: three numbers (one per RGB channel) or one for all three."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        value = (value,) * 3
    try:
        values = tuple(float(v) for v in value)
    except TypeError:
        raise TypeError(f"tilefeed.Loader: {name} must be 3 numbers (R, G, B), got "
                        f"{value!r}") from None
    if len(values) != 3 or not all(math.isfinite(v) for v in values):
        raise ValueError(f"tilefeed.Loader: {name} must be 3 finite numbers (R, G, B), got "
                         f"{value!r}")
    if name == "std" and not all(v > 0 for v in values):
        raise ValueError(f"tilefeed.Loader: std must be > 0 in every channel, got {value!r}")
    return values


def _output_options(dtype, mean, std, layout):
    """dtype, mean, std and layout as the C++ loader takes them; ValueError naming a bad one."""
    out = {"dtype": _dtype_name(dtype), "mean": _channels("mean", mean),
           "std": _channels("std", std)}
    if not isinstance(layout, str) or layout.lower() not in ("nhwc", "nchw"):
        raise ValueError(f"tilefeed.Loader: layout={layout!r}; expected \"NHWC\" or \"NCHW\"")
    out["layout"] = layout.lower()
    if out["dtype"] == "uint8" and (out["mean"] != (0.0,) * 3 or out["std"] != (1.0,) * 3):
        raise ValueError("tilefeed.Loader: dtype='uint8' takes no mean/std (they normalise "
                         "float output): pass dtype='float32' (or float16, bfloat16) with them")
    return out


def _check_workers(workers):
    """Warns once per process when `workers` asks for more decode threads than the cores this
    process may run on (its CPU affinity: mpirun --bind-to core, taskset): oneTBB runs at most
    that many, so the rest would never start."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return
    if workers > cores and ("workers", workers, cores) not in _announced:
        _announced.add(("workers", workers, cores))
        warnings.warn(f"tilefeed.Loader: workers={workers}, but this process may run on only "
                      f"{cores} core(s) (its CPU affinity, e.g. mpirun --bind-to core), so at most "
                      f"{cores} decode thread(s) run; pass workers=0 (one per usable core) or "
                      f"give the process more cores", stacklevel=3)


# -- instance detection -----------------------------------------------------------------------

# The launchers' rank/size variables that tilefeed/launch/instance.h reads, for naming the origin.
_LAUNCHER_VARIABLES = (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OpenMPI/poprun"),
                       ("PMI_RANK", "PMI_SIZE", "PMI"))
# (index, count, origin) lines already printed, and worker counts already warned about, by
# this process.
_announced = set()


def _torchrun_environment():
    """(rank, world size, origin) from torchrun's RANK/WORLD_SIZE, or None when unset."""
    if "WORLD_SIZE" not in os.environ and "RANK" not in os.environ:
        return None
    values = {}
    for name in ("RANK", "WORLD_SIZE"):
        text = os.environ.get(name)
        try:
            values[name] = int(text)
        except (TypeError, ValueError):
            raise ValueError(f"tilefeed.Loader: {name}={text!r} is not an integer "
                             f"(torchrun sets RANK and WORLD_SIZE together)") from None
    rank, size = values["RANK"], values["WORLD_SIZE"]
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"tilefeed.Loader: RANK={rank} is outside WORLD_SIZE={size}")
    return rank, size, "RANK/WORLD_SIZE (torchrun)"


def _torch_distributed():
    """(rank, world size, origin) of an initialised torch.distributed, or None. Never
    imports torch: a process that has not imported it has not initialised it."""
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist.get_rank(), dist.get_world_size(), "torch.distributed"


def detect_slice():
    """(index, count, origin): this process's slice as the launcher tells it, which
    Loader(slice="auto") uses. Looked for, in order: the MPI launcher's environment
    (OpenMPI as poprun and mpirun set it, or PMI; the same detection as `train`), torchrun's
    RANK/WORLD_SIZE, an initialised torch.distributed. Sources that are present must agree.
    (0, 1, "no launcher") when none is. Raises ValueError for an inconsistent environment."""
    try:
        info = _tilefeed._detect_instance()
    except ValueError as error:
        raise ValueError(f"tilefeed.Loader: slice=\"auto\": {error}") from None
    found = []
    for rank, size, name in _LAUNCHER_VARIABLES:
        if size in os.environ:
            found.append((info["index"], info["count"], f"{rank}/{size} ({name})"))
            break
    for candidate in (_torchrun_environment(), _torch_distributed()):
        if candidate is not None:
            found.append(candidate)
    if not found:
        return 0, 1, "no launcher"
    first = found[0]
    for other in found[1:]:
        if other[:2] != first[:2]:
            raise ValueError(
                f"tilefeed.Loader: slice=\"auto\": {first[2]} says instance {first[0]} of "
                f"{first[1]} but {other[2]} says {other[0]} of {other[1]}; pass "
                f"slice=(index, count)")
    return first


def _resolve_slice(value):
    """((index, count), origin) for the slice argument; announces a detected one."""
    if isinstance(value, str):
        if value != "auto":
            raise ValueError(f"tilefeed.Loader: slice={value!r}; expected \"auto\" or "
                             f"(index, count)")
        index, count, origin = detect_slice()
        if origin != "no launcher" and (index, count, origin) not in _announced:
            _announced.add((index, count, origin))
            print(f"tilefeed: instance {index} of {count} (from {origin}): reading slice "
                  f"({index}, {count}) of every epoch", file=sys.stderr, flush=True)
        return (index, count), origin
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"tilefeed.Loader: slice must be \"auto\" or (index, count), "
                        f"got {value!r}")
    return tuple(value), "explicit"  # checked in C++ with the other options


_STATE_VERSION = 1
_STATE_KEYS = ("version", "seed", "epoch", "position", "dataset_size")


def _check_state(state):
    """Validates a state_dict(); returns (seed, epoch, position, dataset_size)."""
    where = "tilefeed.Loader.load_state_dict"
    if not isinstance(state, dict):
        raise TypeError(f"{where}: expected the dict from state_dict(), got "
                        f"{type(state).__name__}")
    missing = [key for key in _STATE_KEYS if key not in state]
    unknown = sorted(str(key) for key in state if key not in _STATE_KEYS)
    if missing or unknown:
        raise ValueError(f"{where}: not a tilefeed loader state (missing {missing}, "
                         f"unknown {unknown})")
    values = {}
    for key in _STATE_KEYS:
        value = state[key]
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{where}: {key}={value!r} is not an int")
        values[key] = int(value)
        if values[key] < 0 or values[key] >= 1 << 64:
            raise ValueError(f"{where}: {key}={values[key]} is out of range")
    if values["version"] != _STATE_VERSION:
        raise ValueError(f"{where}: state version {values['version']}; this tilefeed reads "
                         f"version {_STATE_VERSION}")
    if values["position"] > values["dataset_size"]:
        raise ValueError(f"{where}: position {values['position']} is past the dataset size "
                         f"{values['dataset_size']}")
    return values["seed"], values["epoch"], values["position"], values["dataset_size"]


class _EpochIterator:
    """The batches of one epoch; made by iter(loader)."""

    __slots__ = ("_loader", "_generation", "_done", "__weakref__")

    def __init__(self, loader, generation):
        self._loader = loader
        self._generation = generation
        self._done = False

    def __iter__(self):
        return self

    def __next__(self):
        return self._loader._next(self)

    def __len__(self):
        return len(self._loader)

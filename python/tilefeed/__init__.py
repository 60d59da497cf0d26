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
jpeg=tilefeed.JpegOptions(...), and the training transforms are one list,
augment=[tilefeed.augment.RandomResizedCrop(), ...] (torchvision's; tilefeed.augment).

Memory. A Batch is a view of one of the loader's prefetch_depth slots: batch.images and
batch.sample_indices (numpy) and batch.torch() (DLPack) share that memory and copy nothing;
batch.labels is an int64 copy (batch.labels_int32 is the zero-copy view). The rule:

  * Advancing the iterator releases the previous Batch: its slot goes back to the loader,
    and using that Batch object afterwards raises ValueError.
  * Except that every array or tensor made from a batch holds the slot itself, for as long
    as it lives. So no view ever dangles; while you keep one, the loader has one slot fewer
    to decode into. Keeping views of prefetch_depth batches (a list of batch.torch()
    tensors) would leave the next batch nowhere to go: asking for it then raises
    SlotsHeldError (a LoaderError) once 10 seconds pass without a slot coming back,
    instead of hanging. Keep copies instead (batch.torch().clone(), batch.images.copy()),
    or pass a prefetch_depth larger than the number of batches you keep.

So `for batch in loader: x = batch.torch().float()` never holds more than the batch in
hand.

PyTorch. With torch imported, a Loader is a torch.utils.data.IterableDataset, the one torch
dataset of tilefeed: `for x, y in loader` and `for x, y in DataLoader(loader,
batch_size=None)` both work (a Batch unpacks as images, labels). With num_workers=W the
DataLoader's worker w of W reads slice (index x W + w, count x W) of the Loader's slice
(index, count), with its own decode threads (`workers` of them: give each a W-th of the
cores), and yields (images, labels) copied once into shared memory; each sample of the
epoch arrives in exactly one batch. loader.set_epoch(e) in the main process reaches the
workers, persistent or not. The Loader in the main process keeps its prefetch slots.

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
decoded is replaced by another; unless bad_sample_policy is a callable, the Loader issues one
BadSampleWarning per epoch (at its end, or when the epoch is left early) with the count
and the first file and reason. loader.bad_samples() lists them all.

Checkpoints. loader.state_dict() is a plain picklable dict: where the next batch comes from.
loader.load_state_dict(d) resumes there: byte for byte, or split over another slice count.

GPU. Loader(..., device="cuda", dtype="bfloat16", mean=..., std=..., layout="nchw") yields
batches already on the GPU, converted and normalised there, while the model computes on the
previous one: see help(tilefeed.cuda). Without CUDA it raises RuntimeError saying why.

Threads. The GIL is released while waiting for a batch and while indexing, starting and
stopping; decode workers take it only to call a bad_sample_policy callable. Ctrl-C interrupts a wait with
KeyboardInterrupt within about 20 ms and loses no batch: continuing the `for` loop over the
same iterator yields every batch of the epoch once. One thread consumes a Loader, the first
that asks it for a batch: iter(), a batch request or load_state_dict() from another thread
raises RuntimeError. stop() may be called from any thread, but not from inside that callable.
"""

import atexit
import functools
import inspect
import multiprocessing
import os
import sys
import threading
import warnings
import weakref

from . import _tilefeed
from ._instances import _check_workers, _resolve_slice, detect_slice
from ._options import (_D, _EPOCH_MAX, IMAGENET_MEAN, IMAGENET_STD, SOURCES, JpegOptions,
                       Ramp, RemoteOptions, _check_int, _check_options, _check_state,
                       _jpeg_fields, _output_options, _remote_options, _size_text,
                       _STATE_VERSION)
from ._samples import _resolve_data
from .augment import _spec_text
from ._tilefeed import Batch, LoaderError, SourceError

__version__ = _tilefeed.__version__  # the CMake project's version

__all__ = ["Batch", "BadSampleWarning", "IMAGENET_MEAN", "IMAGENET_STD",
           "JpegOptions", "Loader", "Ramp", "RemoteOptions", "LoaderError", "SlotsHeldError", "SourceError", "SOURCES", "detect_slice"]


class SlotsHeldError(_tilefeed._SlotsHeldError):
    """Asking for the next batch while every prefetch slot is held by batches (or views of
    them: batch.torch(), batch.images) that are still alive: it could never arrive.
    A LoaderError; the loader is unharmed and continues once a batch is dropped."""


class BadSampleWarning(UserWarning):
    """Issued once per epoch when bad samples were skipped and bad_sample_policy was "skip"."""

# Loaders still running at interpreter exit are stopped first, so no worker thread calls
# a bad_sample_policy callable into a finalizing interpreter.
_live = weakref.WeakSet()

# Seconds a batch request waits while every slot is held by batches the caller keeps before
# it raises SlotsHeldError: a Python consumer's batches are its own, so that is a deadlock.
_HELD_SLOTS_TIMEOUT = 10.0


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


class _Stops:
    """close() and `with loader:` both stop() (the CPU and the CUDA Loader)."""

    def close(self):
        self.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.stop()
        return False


class Loader(_Stops):
    """Batches of uint8 images from any dataset tilefeed opens, decoded in C++.

    `data` is an ImageFolder tree, a root with train/, val/ or test/ (`split` picks one: the
    same folder as every tool's --split), a directory of tilefeed record shards (any codec,
    e.g. packed with --codec jpeg-index), or CIFAR-10's binary directory (val and test: its
    test_batch.bin): the same rules as `train --data`. `source` forces a kind. A split that
    `data` lacks raises SourceError naming it.

    image_size is the output size of each epoch: the side of square images, (height, width)
    for rectangles, or a schedule -- {epoch: size} (each size from that epoch on; epoch 0
    required), tilefeed.Ramp(start, end, first_epoch, last_epoch, step=32) (FFCV's
    progressive resizing), or a callable epoch -> size, which needs epochs= and is called
    for each epoch once, here, into the {epoch: size} form. Every batch of an epoch has that
    epoch's size (batch.height, batch.width); the Loader's repr shows the schedule's text,
    the same text --image-size takes (docs/options.md, "Image size"). mode="eval" takes one
    size.
    augment (train mode) is a list of torchvision's transforms (tilefeed.augment), applied
    in order, RandomResizedCrop first: default [RandomResizedCrop(), RandomHorizontalFlip()].
    dtype ("uint8", the default; "float16", "bfloat16", "float32", or the torch/numpy dtype)
    with mean/std (per RGB channel, torchvision units: images scaled to [0, 1]; see
    IMAGENET_MEAN, IMAGENET_STD) and layout ("NHWC" or "NCHW") make the C++ workers write
    batches a model eats: (x / 255 - mean) / std in float32, rounded to dtype, no pass in
    Python. A list of (path or bytes, label) pairs, or a CSV file of path,label rows, is a
    dataset too, read by the same workers.

    slice="auto" (the default) reads the launcher's slice of every epoch (see the module
    help: OpenMPI/poprun, torchrun, torch.distributed); slice=(index, count) sets it.

    Iterating a Loader yields the Batches of one epoch; each new iter() continues with the
    next epoch (or the one given to set_epoch()). Epoch e's batches are a pure function of
    (seed, e, dataset, slice): worker count and timing change nothing.
    workers="auto" and prefetch_depth="auto" let the loader tune them while it runs, within
    cpu_share (of this process's cores) and memory_budget (bytes of slots, or "8GiB"); see
    docs/options.md, "Autotuning".
    epochs=N (at least 1, as the tools' --epochs) ends iteration after epoch N - 1;
    epochs=None, the default, iterates epochs until stop(). To resume, pass a state_dict() to
    load_state_dict(): where a run stands is a LoaderState, not options.

    Raises ValueError for bad options, SourceError (an OSError) if `data` cannot be
    indexed, and, while iterating, LoaderError (a RuntimeError) for a bad sample under
    bad_sample_policy="fail" (the message names the file and the reason) or a failed
    pipeline. bad_sample_policy=callable skips bad samples and calls
    callable(dict(epoch, sample, where, reason)) from a worker thread for each; an
    exception it raises is re-raised by the next batch request.

    Remote datasets (http://, https://, s3:// shards and tars; docs/datasets.md) take
    remote=tilefeed.RemoteOptions(...): the block cache, the S3 endpoint and the retries,
    as the tools' --remote cache-dir=...,cache-limit=...,s3-endpoint=...,remote-retries=....
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
                 augment=_D["augment"],
                 layout=_D["layout"],
                 dtype=_D["dtype"],
                 mean=_D["mean"],
                 std=_D["std"],
                 workers=_D["workers"],
                 prefetch_depth=_D["prefetch_depth"],
                 cpu_share=_D["cpu_share"],
                 memory_budget=_D["memory_budget"],
                 seed=_D["seed"],
                 shuffle=_D["shuffle"],
                 slice="auto",
                 remainder=_D["remainder"],
                 drop_last_batch=_D["drop_last_batch"],
                 epochs=None,
                 bad_sample_policy=_D["bad_sample_policy"],
                 jpeg=None,
                 remote=None,
                 device=None,
                 _slot_memory=None):
        image_size = _size_text(image_size, epochs)  # the text: workers get no callable
        arguments = locals()
        # What a DataLoader worker needs to make this Loader's share of its slice (_worker).
        recipe = {k: v for k, v in arguments.items()
                  if k not in ("self", "data", "device", "_slot_memory", "__class__")}
        arguments.update(_output_options(dtype, mean, std, layout))
        arguments.update(_jpeg_fields(jpeg))
        arguments["augment"] = _spec_text(augment)
        if _fork["unusable"]:
            raise LoaderError(_fork["unusable"])
        self._pid = os.getpid()
        self._options = {name: arguments[name] for name in _D if name in arguments}
        self._options["held_slots_timeout"] = _HELD_SLOTS_TIMEOUT
        self._on_bad_sample = None
        if callable(bad_sample_policy):  # skip, and tell the caller
            self._on_bad_sample, self._options["bad_sample_policy"] = bad_sample_policy, "skip"
        self._remote = _remote_options(remote)
        self._options["slice"], self._slice_origin = _resolve_slice(slice)
        _check_options(self._options, self._remote)
        if isinstance(image_size, str):  # the schedule as C++ writes it back
            self._options["image_size"] = _tilefeed._image_size(self._options)[0]
        _check_workers(self._options["workers"])
        self._data, self._split, self._samples, self._sample_classes = _resolve_data(data, split)
        self._recipe = (data, dict(recipe, slice=self._options["slice"]))
        self._source = source
        self._slot_memory = _slot_memory  # tilefeed.cuda's pinned slots
        self._bad_history = []  # reports of C++ loaders replaced by load_state_dict()
        self._bad_warned = set()  # epochs whose bad samples were warned about
        self._stopped = False
        self._generation = self._ended = 0  # the newest iter()'s number; the last ended
        self._wanted = None  # set_epoch()'s epoch, applied by the next iter()
        self._consumer = None  # the consuming thread's ident (_consuming)
        # set_epoch()'s (count, epoch), seen by DataLoader worker processes (_worker), and
        # 1 + the count at the last start of new workers.
        self._epoch_request = multiprocessing.RawArray("q", 3)
        self._start_core()
        self._previous = None  # the last batch handed out
        self._iterator = None  # a weak reference to the newest iter()'s request
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
        self._digest = None  # loader::Identify's, read by the first state_dict()
        for note in self._notes:
            warnings.warn(f"tilefeed.Loader: {note}", stacklevel=3)

    # -- iteration ------------------------------------------------------------------------

    def __iter__(self):
        if os.getpid() != self._pid:  # a copy in another process: a DataLoader worker's?
            return self._worker()
        if self._stopped:
            raise ValueError("tilefeed.Loader: iterating a stopped loader")
        self._consuming(claim=False)
        if self._wanted is not None:
            target, self._wanted = self._wanted, None
        else:
            target = self.epoch + 1 if self._mid_epoch else self.epoch
        if target != self.epoch or self._mid_epoch:
            self._seek(target, 0)
        self._generation += 1
        request = functools.partial(_tilefeed._next_batch, self, self._generation)
        self._iterator = weakref.ref(request)  # alive while the iterator is
        return iter(request, None)

    # -- torch.utils.data.DataLoader workers ----------------------------------------------

    def __getstate__(self):
        """What a DataLoader worker started with "spawn" or "forkserver" gets: the recipe
        of this Loader and its set_epoch() channel, not its threads."""
        return {"_recipe": self._recipe, "_epoch_request": self._epoch_request, "_pid": None}

    def __setstate__(self, state):
        self.__dict__.update(state)

    def __reduce__(self):
        # The torch subclass (_torch_loader_class) is made at run time under Loader's name,
        # which pickle cannot look up: the unpickling process makes its own again.
        return _unpickle_loader, (self.__getstate__(),)

    def _worker(self):
        """Iteration in DataLoader worker w of W: the batches of slice (index x W + w,
        count x W) of this Loader's slice (index, count), from a Loader made in this process
        on first use and kept by persistent workers, each batch copied once into the shared
        memory DataLoader sends. set_epoch() in the main process reaches the workers;
        without it a persistent worker continues with its next epoch, and a new one starts
        at epoch 0 (as DistributedSampler without set_epoch): worker 0 warns when new
        workers would repeat the epoch the last new ones started."""
        data = sys.modules.get("torch.utils.data")
        info = data.get_worker_info() if data is not None else None
        if info is None:
            self._check_process()  # a copy in another process, and not a DataLoader worker's
        state = self.__dict__.setdefault("_in_worker", {"loader": None, "request": 0})
        loader = state["loader"]
        if loader is None:
            where, recipe = self._recipe
            index, count = recipe["slice"]
            loader = Loader(where, **dict(recipe, slice=(index * info.num_workers + info.id,
                                                         count * info.num_workers)))
            state["loader"] = loader
            if info.id == 0:  # new workers: do they repeat the epoch the last new ones did?
                started, self._epoch_request[2] = self._epoch_request[2], self._epoch_request[0] + 1
                if started == self._epoch_request[2]:
                    warnings.warn("tilefeed.Loader: this DataLoader epoch repeats the last one "
                                  "(new workers, no set_epoch() since): call "
                                  "loader.set_epoch(e) before each epoch, or pass "
                                  "persistent_workers=True")
        request, epoch = self._epoch_request[0], self._epoch_request[1]
        if request != state["request"]:
            state["request"] = request
            loader.set_epoch(epoch)
        torch = sys.modules["torch"]
        return ((torch.empty_like(x).share_memory_().copy_(x), y) for x, y in loader)

    def __len__(self):
        """Batches per epoch for this instance."""
        return self._batches_per_epoch

    def set_epoch(self, epoch):
        """Makes the next iter() yield epoch `epoch` (like DistributedSampler.set_epoch).

        Free when the loader is already at the start of that epoch (the usual loop);
        otherwise the C++ loader seeks to that epoch, which costs refilling the prefetch
        slots.
        """
        self._wanted = epoch = _check_int("tilefeed.Loader.set_epoch", "epoch", epoch, _EPOCH_MAX)
        self._epoch_request[0] += 1  # DataLoader workers apply it when it changes
        self._epoch_request[1] = epoch

    def crop_plan(self, epoch, sample, width, height):
        """Which source pixels the batch row of `sample` (an index in the source, as in
        batch.sample_indices) of `epoch` shows, for a width x height image: a dict with
        "box" (x0, y0, x1, y1), the fractional source box resized to the output; "crop"
        (x, y, w, h), the whole pixels the resize reads (in train, the box itself: the
        rectangle to give torchvision's resized_crop); "flip"; "dct_scaling" (whether a JPEG
        may be decoded at a DCT scale-down); "ops", the pixel ops it drew, in order, each
        a torchvision call's name and arguments: (NAME, magnitude, fill) for the policies'
        ops (autoaugment._apply_op), ("adjust_hue", factor) and the other adjust_*,
        ("rgb_to_grayscale",), ("erase", i, j, h, w, v). Contracts: tilefeed/loader/augment.h."""
        return _tilefeed._plan_sample(self._options, epoch, sample, width, height)

    def _make_core(self):
        options = dict(self._options)
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
                f"Make the Loader in the process that iterates it, or hand it to torch's "
                f"DataLoader, whose worker processes each read their own part of it")

    def _consuming(self, claim):
        """One thread consumes a Loader: the first that asks it for a batch (claim=True)."""
        me = threading.get_ident()
        if claim and self._consumer is None:
            self._consumer = me
        if self._consumer not in (None, me):
            raise RuntimeError("tilefeed.Loader: a second thread uses this Loader; one thread "
                               "consumes a Loader, the first that asked it for a batch (make "
                               "a Loader per thread, e.g. with slice=(i, n))")

    def _before_next(self, generation):
        """A batch request's checks, from _tilefeed._next_batch (which then asks the core);
        returns the epoch the batch is of."""
        self._check_process()
        self._consuming(claim=True)
        if generation != self._generation:
            raise RuntimeError("tilefeed.Loader: this iterator was replaced by a newer iter()")
        if generation == self._ended:
            raise StopIteration
        # Advancing releases the previous batch's own hold on its slot; views made from
        # it keep theirs. Without this, `for batch in loader` would hold the previous slot
        # while waiting for the next (and deadlock at prefetch_depth=1).
        previous, self._previous = self._previous, None
        if previous is not None:
            previous.release()
        return self.epoch

    def _slots_held(self):
        depth = self._options["prefetch_depth"]
        raise SlotsHeldError(
            f"tilefeed.Loader: the next batch can never arrive: all {depth} batch slots "
            f"(prefetch_depth={depth}) are held by batches you still keep alive, or by "
            f"views of them (batch.torch() tensors, batch.images arrays, e.g. kept in a "
            f"list), and none was released within held_slots_timeout="
            f"{self._options['held_slots_timeout']} s. Keep copies instead "
            f"(batch.torch().clone(), batch.images.copy()), or pass "
            f"a prefetch_depth larger than the number of batches you keep.") from None

    def _warn_bad_samples(self, epoch, stacklevel=4):
        """One BadSampleWarning for `epoch`'s skipped samples, unless the user handles them
        (bad_sample_policy=callable) or was already warned."""
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
            f"them; pass bad_sample_policy=callable to handle them, or 'fail')",
            BadSampleWarning, stacklevel=stacklevel)

    # -- checkpoints ----------------------------------------------------------------------

    def state_dict(self):
        """Where the next batch comes from, as a plain dict for a checkpoint:
        {"version": 2, "seed", "epoch", "position", "dataset_size", "dataset_digest"},
        position being the samples of `epoch`'s permutation already delivered by all
        instances together, dataset_digest the dataset's identity (loader::Identify: every
        record's size and some records' bytes, read by the first call).

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
        if self._digest is None:
            self._digest = self._core.dataset_digest()
        return {"version": _STATE_VERSION, "seed": int(self._options["seed"]),
                "epoch": int(epoch), "position": int(position),
                "dataset_size": int(self._dataset_size), "dataset_digest": self._digest}

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
        version, a value out of its range (named with the range), or a state saved for
        another dataset (its size or digest differs).
        """
        state = _check_state(state)
        seed, epoch, position = state["seed"], state["epoch"], state["position"]
        mine = self.state_dict()
        if (state["dataset_size"], state["dataset_digest"]) != (
                mine["dataset_size"], mine["dataset_digest"]):
            raise ValueError(
                f"tilefeed.Loader.load_state_dict: the state is for another dataset "
                f"({state['dataset_size']} samples, digest {state['dataset_digest']:016x}); "
                f"this loader's: {mine['dataset_size']} samples, digest "
                f"{mine['dataset_digest']:016x}")
        self._consuming(claim=False)
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
        """LoaderMetrics as a dict named as in docs/metrics.md, for the C++ loader since it
        was made (by the Loader, or by a load_state_dict() of another seed)."""
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

    def __repr__(self):
        o = self._options
        return (f"tilefeed.Loader({self._data!r}, source={self._source!r}, "
                f"batch_size={o['batch_size']}, image_size={o['image_size']!r}, "
                f"mode={o['mode']!r}, layout={o['layout']!r}, workers={o['workers']}, "
                f"epoch={self.epoch}{', stopped' if self._stopped else ''})")


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


def _unpickle_loader(state):
    """A Loader of __reduce__'s state, of the torch subclass where torch is imported."""
    loader = object.__new__(_torch_loader_class() or Loader)
    loader.__setstate__(state)
    return loader


# Loader(...)'s signature is __init__'s: its __new__ only routes device="cuda" (tilefeed.cuda).
Loader.__signature__ = inspect.signature(Loader.__init__).replace(
    parameters=list(inspect.signature(Loader.__init__).parameters.values())[1:])

"""tilefeed: the tilefeed C++ data loader, for Python and PyTorch.

    import tilefeed
    loader = tilefeed.Loader("data/train", batch_size=256, image_size=224, workers=8)
    for epoch in range(90):
        loader.set_epoch(epoch)
        for batch in loader:
            images = batch.torch()                  # torch.uint8, N x 224 x 224 x 3, no copy
            labels = torch.from_numpy(batch.labels)  # int64

Loader takes the C++ LoaderOptions fields as keyword arguments, with the same names and
defaults (help(tilefeed.Loader) shows them); the JPEG options are flattened (max_pixels,
max_scans, corrupt_data, dct_scales, fast_dct, fast_upsample) and the crop ranges are
crop_scale=(min, max) and crop_ratio=(min, max), as in torchvision.

Memory. A Batch is a view of one of the loader's prefetch_depth slots: batch.images and
batch.sample_indices (numpy) and batch.torch() (DLPack) share that memory and copy nothing;
batch.labels is an int64 copy (batch.labels_int32 is the zero-copy view). The rule:

  * Advancing the iterator releases the previous Batch: its slot goes back to the loader,
    and using that Batch object afterwards raises ValueError.
  * Except that every array or tensor made from a batch holds the slot itself, for as long
    as it lives. So no view ever dangles; while you keep one, the loader has one slot fewer
    to decode into, and keeping views of prefetch_depth batches stalls it until one goes.

So `for batch in loader: x = batch.torch().float()` never holds more than the batch in
hand. Loader(copy=True) gives batches that own copies of their memory, return the slot at
once and are never released by the iterator: for code that keeps batches (list(loader)).

Threads. The GIL is released while waiting for a batch and while indexing, starting and
stopping; decode workers take it only to call on_bad_sample. Ctrl-C interrupts a wait with
KeyboardInterrupt within about 20 ms; the batch being waited for is not lost (the next
request returns it). A Loader is meant for one consuming thread; stop() may be called from
any thread, but not from inside on_bad_sample.
"""

import atexit
import os
import weakref

from . import _tilefeed
from ._tilefeed import Batch, LoaderError, SourceError

__all__ = ["Batch", "Loader", "LoaderError", "SourceError", "SOURCES"]

# The `source` spellings: an ImageFolder tree, or the CIFAR-10 binary distribution's
# directory (cifar-10-batches-bin) with its training or test split.
SOURCES = ("imagefolder", "cifar10-train", "cifar10-test")

# loader::LoaderOptions' defaults, read from C++ so the signature below cannot drift.
_D = _tilefeed._default_options()

# Loaders still running at interpreter exit are stopped first, so no worker thread calls
# on_bad_sample into a finalizing interpreter.
_live = weakref.WeakSet()


@atexit.register
def _stop_all():
    for loader in list(_live):
        loader.stop()


class Loader:
    """Batches of uint8 images from an ImageFolder tree or CIFAR-10, decoded in C++.

    Iterating a Loader yields the Batches of one epoch; each new iter() continues with the
    next epoch (or the one given to set_epoch()). Epoch e's batches are a pure function of
    (seed, e, dataset, shard): worker count and timing change nothing.

    Raises ValueError for bad options, SourceError (an OSError) if `data` cannot be
    indexed, and, while iterating, LoaderError (a RuntimeError) for a bad sample under
    bad_sample_policy="fail" (the message names the file and the reason) or a failed
    pipeline. on_bad_sample(dict(epoch, sample, where, reason)) is called from a worker
    thread for every bad sample; an exception it raises is re-raised by the next batch
    request.
    """

    def __init__(self, data, *, source="imagefolder",
                 batch_size=_D["batch_size"],
                 image_size=_D["image_size"],
                 mode=_D["mode"],
                 eval_resize=_D["eval_resize"],
                 crop_scale=_D["crop_scale"],
                 crop_ratio=_D["crop_ratio"],
                 flip_probability=_D["flip_probability"],
                 layout=_D["layout"],
                 workers=_D["workers"],
                 prefetch_depth=_D["prefetch_depth"],
                 seed=_D["seed"],
                 shuffle=_D["shuffle"],
                 shard=_D["shard"],
                 remainder=_D["remainder"],
                 drop_last_batch=_D["drop_last_batch"],
                 first_epoch=_D["first_epoch"],
                 epochs=_D["epochs"],
                 bad_sample_policy=_D["bad_sample_policy"],
                 max_substitute_attempts=_D["max_substitute_attempts"],
                 max_pixels=_D["max_pixels"],
                 max_scans=_D["max_scans"],
                 corrupt_data=_D["corrupt_data"],
                 dct_scales=_D["dct_scales"],
                 fast_dct=_D["fast_dct"],
                 fast_upsample=_D["fast_upsample"],
                 on_bad_sample=None,
                 copy=False):
        arguments = locals()
        self._options = {name: arguments[name] for name in _D}
        if on_bad_sample is not None and not callable(on_bad_sample):
            raise TypeError("tilefeed.Loader: on_bad_sample must be callable or None")
        self._data = os.fspath(data)
        self._source = source
        self._on_bad_sample = on_bad_sample
        self._copy = bool(copy)
        self._first = int(first_epoch)
        self._end = self._first + int(epochs) if epochs else None
        self._bad_history = []  # reports of replaced C++ loaders
        self._stopped = False
        self._generation = 0
        self._wanted = None  # set_epoch()'s epoch, applied by the next iter()
        self._core = _tilefeed._Core(self._data, self._source, on_bad_sample, self._options)
        self._epoch = self._first  # the epoch the core's next batch belongs to
        self._mid_epoch = False  # the core has delivered part of self._epoch
        self._batches_per_epoch = self._core.batches_per_epoch
        self._samples_per_epoch = self._core.samples_per_epoch
        self._dataset_size = self._core.dataset_size
        self._classes = tuple(self._core.class_names)
        self._last_metrics = None
        self._previous = None  # the last zero-copy batch handed out
        _live.add(self)

    # -- iteration ------------------------------------------------------------------------

    def __iter__(self):
        if self._stopped:
            raise ValueError("tilefeed.Loader: iterating a stopped loader")
        if self._wanted is not None:
            target, self._wanted = self._wanted, None
        else:
            target = self._epoch + 1 if self._mid_epoch else self._epoch
        if target != self._epoch or self._mid_epoch:
            self._restart(target)
        self._generation += 1
        return _EpochIterator(self, self._generation)

    def __len__(self):
        """Batches per epoch for this instance."""
        return self._batches_per_epoch

    def set_epoch(self, epoch):
        """Makes the next iter() yield epoch `epoch` (like DistributedSampler.set_epoch).

        Free when the loader is already at the start of that epoch (the usual loop);
        otherwise the C++ loader is re-created at that epoch, which costs an index of the
        dataset and refilling the prefetch slots.
        """
        epoch = int(epoch)
        if epoch < 0:
            raise ValueError("tilefeed.Loader.set_epoch: epoch must be >= 0")
        self._wanted = epoch

    def _restart(self, epoch):
        old, self._core = self._core, None
        if old is not None:
            self._bad_history.extend(old.bad_samples())
            self._last_metrics = old.metrics()
            old.stop()
        self._epoch, self._mid_epoch = epoch, False
        if self._end is not None and not self._first <= epoch < self._end:
            return  # outside first_epoch + [0, epochs): nothing to yield
        options = dict(self._options, first_epoch=epoch,
                       epochs=self._end - epoch if self._end is not None else 0)
        self._core = _tilefeed._Core(self._data, self._source, self._on_bad_sample, options)

    def _next(self, iterator):
        if iterator._generation != self._generation:
            raise RuntimeError("tilefeed.Loader: this iterator was replaced by a newer iter()")
        if iterator._done or self._core is None:
            raise StopIteration
        # Advancing releases the previous batch's own hold on its slot; views made from
        # it keep theirs. Without this, `for batch in loader` would hold the previous slot
        # while waiting for the next (and deadlock at prefetch_depth=1).
        previous, self._previous = self._previous, None
        if previous is not None:
            previous.release()
        batch = self._core.next(self._copy)
        if batch is None:
            iterator._done = True
            # End of the epoch, unless the loader was stopped or has run all its epochs.
            if not self._stopped and (self._end is None or self._epoch < self._end):
                self._epoch += 1
            self._mid_epoch = False
            raise StopIteration
        self._mid_epoch = True
        if not self._copy:
            self._previous = batch
        return batch

    # -- state ----------------------------------------------------------------------------

    @property
    def epoch(self):
        """The epoch the current or next iteration yields (before any set_epoch())."""
        return self._epoch

    @property
    def classes(self):
        """Class names indexed by label."""
        return list(self._classes)

    @property
    def dataset_size(self):
        """Samples in the source."""
        return self._dataset_size

    @property
    def samples_per_epoch(self):
        """This instance's samples per epoch (padded when sharded)."""
        return self._samples_per_epoch

    @property
    def options(self):
        """The LoaderOptions fields as given (first_epoch as constructed)."""
        return dict(self._options)

    def metrics(self):
        """LoaderMetrics as a dict, for the C++ loader since the last (re)start."""
        if self._core is not None:
            return self._core.metrics()
        return dict(self._last_metrics or {})

    def bad_samples(self):
        """Bad samples reported so far: dicts with epoch, sample, where and reason."""
        current = self._core.bad_samples() if self._core is not None else []
        return self._bad_history + current

    def stop(self):
        """Stops the workers and joins them; iteration then ends. Idempotent. Batches
        already handed out stay valid."""
        self._stopped = True
        if self._core is not None:
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
                f"epoch={self._epoch}{', stopped' if self._stopped else ''})")


class _EpochIterator:
    """The batches of one epoch; made by iter(loader)."""

    __slots__ = ("_loader", "_generation", "_done")

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

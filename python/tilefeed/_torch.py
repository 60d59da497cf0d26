"""tilefeed.IterableDataset: a Loader as a torch.utils.data.IterableDataset whose DataLoader
workers split the work. Imported (with torch) on first use of tilefeed.IterableDataset."""

import os

import numpy as np
import torch
import torch.utils.data

from . import Loader, _check_options, _D, _jpeg_fields, _output_options, detect_slice

__all__ = ["IterableDataset"]


class IterableDataset(torch.utils.data.IterableDataset):
    """tilefeed.Loader(data, **options) for torch.utils.data.DataLoader, whose workers each
    read their own part of every epoch, so that every batch arrives exactly once.

        dataset = tilefeed.IterableDataset("data/train", batch_size=256, image_size=224,
                                           workers=4, dtype="float32",
                                           mean=tilefeed.IMAGENET_MEAN, std=tilefeed.IMAGENET_STD)
        data = DataLoader(dataset, batch_size=None, num_workers=2)
        for epoch in range(90):
            dataset.set_epoch(epoch)
            for images, labels in data:
                ...

    Pass batch_size=None to the DataLoader: tilefeed makes the batches. Each DataLoader
    worker w of W makes, in its own process and on its first batch, a Loader reading slice
    (index x W + w, count x W) of this process's slice (index, count) (the launcher's, as
    Loader's slice="auto" finds it, or the slice option). Every worker has its own decode
    threads (`workers` of them): give each W-th of the cores. The epoch is split per worker,
    so batches differ from a single Loader's (each worker batches its own samples) and
    arrive interleaved across workers; each sample of the epoch is in exactly one batch
    (a slice count that does not divide the dataset pads with repeats, as DistributedSampler
    does; remainder="drop" drops them instead).

    Yields (images, labels) tensors per batch: images in the Loader's dtype and layout, labels
    int64; with_indices=True adds the samples' dataset indices (int64) as a third. Every
    batch is copied once, so the tensors are the caller's to keep, as DataLoader's are: in
    the main process (num_workers=0) by Loader(copy=True), in a worker into the shared
    memory that DataLoader moves to the main process. (Loader itself is zero-copy.)

    Call set_epoch(e) before each epoch, as with DistributedSampler: workers that are not
    persistent are new processes each epoch and only know the epoch from it. Without it a
    Loader that lives on (num_workers=0, persistent_workers=True) moves to its next epoch on
    its own. Each worker's Loader is made in that worker after the fork (never inherited).
    """

    def __init__(self, data, *, with_indices=False, **options):
        options = dict(options)
        options.pop("copy", None)  # one copy per batch, made by __iter__
        options.setdefault("slice", "auto")
        merged = dict(_D, **{k: v for k, v in options.items() if k in _D})
        merged["epochs"] = options.get("epochs")
        merged.update(_jpeg_fields(options.get("jpeg")))
        merged.update(_output_options(merged["dtype"], merged["mean"], merged["std"],
                                      merged["layout"]))
        if isinstance(merged["slice"], str):  # "auto": the launcher's, found per worker
            merged["slice"] = (0, 1)
        _check_options(merged)  # in C++, before any worker exists
        self._data = os.fspath(data)
        self._options = options
        self._with_indices = bool(with_indices)
        self._epoch = None
        self._loader = None  # this process's Loader, made by __iter__

    def set_epoch(self, epoch):
        """Makes the next iteration (in every worker) yield epoch `epoch`."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"tilefeed.IterableDataset.set_epoch: epoch must be an int >= 0, "
                             f"got {epoch!r}")
        self._epoch = epoch

    def _slice(self):
        """This process's slice: the launcher's (or the slice option's) split over the
        DataLoader's workers."""
        slice_ = self._options["slice"]
        if isinstance(slice_, str):
            index, count, _ = detect_slice() if slice_ == "auto" else (None, None, None)
            if index is None:
                raise ValueError(f"tilefeed.IterableDataset: slice={slice_!r}; expected "
                                 f"\"auto\" or (index, count)")
        else:
            index, count = slice_
        info = torch.utils.data.get_worker_info()
        if info is None:
            return (index, count), False
        return (index * info.num_workers + info.id, count * info.num_workers), True

    def _make_loader(self, slice_, in_worker):
        loader = self._loader
        if loader is None or loader._pid != os.getpid() or loader.slice != slice_:
            loader = Loader(self._data, **dict(self._options, slice=slice_, copy=not in_worker))
            self._loader = loader
        return loader

    def __len__(self):
        """Batches that one iteration of this process yields per epoch: in a DataLoader
        worker, that worker's share of the epoch (its slice's batches); in the main process
        (num_workers=0), this process's whole slice's, which is what len(DataLoader) reports.
        With W DataLoader workers the DataLoader yields the sum of the W workers' lens, which
        can exceed that by the padding of the smaller slices (remainder="pad"). It is
        Loader's len() for that slice: the first call makes the Loader that iteration then
        uses (it lists the data and starts decoding)."""
        slice_, in_worker = self._slice()
        return len(self._make_loader(slice_, in_worker))

    def __iter__(self):
        slice_, in_worker = self._slice()
        loader = self._make_loader(slice_, in_worker)
        if self._epoch is not None:
            loader.set_epoch(self._epoch)
        for batch in loader:
            images = batch.torch()
            if in_worker:  # one copy, into the shared memory DataLoader sends
                images = torch.empty_like(images).share_memory_().copy_(images)
            labels = torch.from_numpy(batch.labels)
            if self._with_indices:
                yield images, labels, torch.from_numpy(batch.sample_indices.astype(np.int64))
            else:
                yield images, labels

    def __repr__(self):
        return f"tilefeed.IterableDataset({self._data!r}, {self._options!r})"


"""tilefeed.cuda: batches landed in GPU memory and converted there (IO tiles for a GPU).

    import tilefeed
    loader = tilefeed.Loader("data/train", batch_size=256, device="cuda",
                             dtype="bfloat16", mean=tilefeed.cuda.IMAGENET_MEAN,
                             std=tilefeed.cuda.IMAGENET_STD, layout="nchw")
    for batch in loader:
        out = model(batch.images)   # cuda bfloat16, N x 3 x 224 x 224, normalised
        loss = criterion(out, batch.labels)

tilefeed.Loader(..., device="cuda") makes a CudaLoader: the same dataset, options, epochs,
set_epoch() and state_dict() as the CPU Loader, but each batch arrives as CUDA tensors.

How a batch travels. The decode workers write uint8 NHWC straight into the loader's slots,
which here are page-locked host memory from PyTorch's pinned allocator (the C++ loader's
SlotMemory). The batch is then copied to the GPU on a dedicated CUDA stream (an
asynchronous cudaMemcpy, at the bus's full rate), into a ring of prefetch_depth raw device
buffers, and converted there by tilefeed's kernel (tilefeed/cuda/device.h): uint8 to
`dtype`, (x / 255 - mean) / std per channel, NHWC to `layout`. The formula is
tilefeed/loader/output_format.h's, each operation rounded to nearest: the device tensors
equal the CPU conversion bit for bit.

Streams. The caller's current stream (torch.cuda.current_stream() when the batch is taken)
waits for the batch on the device, not on the host: the model's work on the previous batch
keeps running while this one is copied and converted. The tensors are allocated by
PyTorch's caching allocator and record_stream()'d on that stream, so their memory is reused
only once that stream is done with them, even when you keep them. A host slot goes back to
the loader only after its copy finished (a CUDA event), never while the copy reads it.
Use the tensors on that stream, or call torch.cuda.current_stream().wait_stream(...) as
usual for any other stream.

Options, besides the CPU Loader's (copy=True does not apply):
  device   "cuda", "cuda:N" or a torch.device
  dtype    "float32" (default here), "float16", "bfloat16", "uint8", or the torch/numpy dtypes
  mean,std 3 numbers each (or one for all three), in [0, 1] units as
           torchvision.transforms.Normalize takes them; default 0 and 1 (no normalisation);
           uint8 takes none
  layout   "nchw" (default here; what torchvision models take) or "nhwc"
dtype, mean, std, layout and image_size (an int for squares, or (height, width)) are checked
and mean exactly what they mean for the CPU Loader (one definition, in tilefeed); only the
defaults of dtype and layout differ. IMAGENET_MEAN and IMAGENET_STD are tilefeed's.
  timing   True: each batch carries .copy_events, CUDA events around its host-to-device copy

Without CUDA (no GPU, a CPU-only torch, or a tilefeed built without its CUDA component)
making a CudaLoader raises RuntimeError with one line saying which.
"""

import collections

from . import _tilefeed
# One definition of the output options for both devices: the CPU Loader's (tilefeed).
# IMAGENET_MEAN/STD stay importable from here too (tilefeed.cuda.IMAGENET_MEAN).
from . import IMAGENET_MEAN, IMAGENET_STD
from . import _check_options, _image_shape, _output_options

__all__ = ["CudaBatch", "CudaLoader", "IMAGENET_MEAN", "IMAGENET_STD"]


def _torch():
    try:
        import torch
    except ImportError:
        raise RuntimeError("tilefeed.Loader(device='cuda') needs PyTorch: import torch "
                           "failed") from None
    return torch


def _check_cuda(torch, device):
    """The torch.device to use; RuntimeError with one line when CUDA cannot be used."""
    if not getattr(_tilefeed, "_cuda_built", False):
        raise RuntimeError("tilefeed.Loader(device='cuda'): this tilefeed was built without "
                           "its CUDA component (configure with nvcc present, or "
                           "-DTILEFEED_BUILD_CUDA=ON)")
    if not torch.cuda.is_available():
        why = ("this torch was built without CUDA" if torch.version.cuda is None
               else "torch.cuda.is_available() is False (no GPU or no driver)")
        raise RuntimeError(f"tilefeed.Loader(device={str(device)!r}): CUDA is not available: "
                           f"{why} (torch {torch.__version__})")
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"tilefeed.Loader: device must be 'cpu', 'cuda' or 'cuda:N', "
                         f"got {str(device)!r}")
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def _check_format(dtype, mean, std, layout):
    """(dtype name, mean, std, layout) as the CPU Loader checks them (tilefeed's
    _output_options), or ValueError/TypeError naming the bad one."""
    defaults = _tilefeed._default_options()
    out = _output_options(dtype, defaults["mean"] if mean is None else mean,
                          defaults["std"] if std is None else std, layout)
    return out["dtype"], out["mean"], out["std"], out["layout"]


def _slot_geometry(options):
    """(batch_size, height, width, prefetch_depth) of the Loader options in `options` (the
    defaults for those left out), checked as the CPU Loader checks them: image_size is an
    int (a square) or (height, width)."""
    defaults = _tilefeed._default_options()
    geometry = {name: options.get(name, defaults[name])
                for name in ("batch_size", "image_size", "prefetch_depth")}
    _check_options(geometry)
    height, width = _image_shape(geometry["image_size"])
    return int(geometry["batch_size"]), int(height), int(width), int(geometry["prefetch_depth"])


class CudaBatch:
    """One batch on the GPU: images (N x 3 x H x W for nchw, N x H x W x 3 for nhwc, in the
    loader's dtype) and labels (int64), both CUDA tensors ready on the stream that was
    current when the batch was taken; `images, labels = batch` unpacks it, as a CPU Batch. copy_events: (start, end) CUDA events around the
    host-to-device copy with timing=True, else None."""

    __slots__ = ("images", "labels", "epoch", "index", "size", "copy_events")

    def __init__(self, images, labels, epoch, index, size, copy_events):
        self.images = images
        self.labels = labels
        self.epoch = epoch
        self.index = index
        self.size = size
        self.copy_events = copy_events

    def torch(self):
        """The images tensor (as Batch.torch() on the CPU)."""
        return self.images

    def __iter__(self):
        """images, labels = batch, as for a CPU Batch and a DataLoader batch."""
        return iter((self.images, self.labels))

    def __len__(self):
        return self.size

    def __repr__(self):
        return (f"<tilefeed.cuda.CudaBatch epoch={self.epoch} index={self.index} "
                f"size={self.size} {tuple(self.images.shape)} {self.images.dtype} "
                f"{self.images.device}>")


class _PinnedSlots:
    """The loader's slot memory: one pinned uint8 tensor per slot (PyTorch's pinned
    allocator). `regions` is what the C++ side reads; the tensors live as long as this."""

    def __init__(self, torch, slots, samples, image_bytes):
        labels, _, total = _tilefeed._slot_layout(samples, image_bytes)
        self.labels_offset = labels
        self.tensors = []
        self.regions = []
        for _ in range(slots):
            block = torch.empty(total + 64, dtype=torch.uint8, pin_memory=True)
            skip = (-block.data_ptr()) % 64
            self.tensors.append(block[skip:skip + total])
            self.regions.append((block.data_ptr() + skip, total))
        self.by_address = {address: i for i, (address, _) in enumerate(self.regions)}


class CudaLoader:
    """tilefeed.Loader(..., device="cuda"): see the module's help (tilefeed.cuda)."""

    def __init__(self, data, *, device="cuda", dtype="float32", mean=None, std=None,
                 layout="nchw", timing=False, copy=False, **options):
        from . import Loader  # the CPU loader this one wraps
        torch = _torch()
        if copy:
            raise ValueError("tilefeed.Loader(device='cuda'): copy=True does not apply; the "
                             "CUDA tensors are never views of loader memory")
        self._dtype, self._mean, self._std, self._layout = _check_format(dtype, mean, std,
                                                                         layout)
        samples, height, width, depth = _slot_geometry(options)
        self._device = _check_cuda(torch, device)
        self._torch = torch
        self._slots = _PinnedSlots(torch, depth, samples, height * width * 3)
        options["layout"] = "nhwc"  # the kernel does the layout
        self._loader = Loader(data, _slot_memory=self._slots, **options)
        self._depth = depth
        self._timing = bool(timing)
        with torch.cuda.device(self._device):
            self._stream = torch.cuda.Stream(self._device)
            self._raw = [torch.empty(samples * height * width * 3, dtype=torch.uint8,
                                     device=self._device) for _ in range(depth)]
            self._raw_labels = [torch.empty(samples, dtype=torch.int32, device=self._device)
                                for _ in range(depth)]
        self._torch_dtype = getattr(torch, self._dtype)
        self._in_flight = collections.deque()  # (hold, copied event), in copy order
        self._uploads = 0

    # -- iteration ------------------------------------------------------------------------

    def __iter__(self):
        inner = iter(self._loader)
        while True:
            try:
                batch = next(inner)
            except StopIteration:
                return
            yield self._upload(batch)

    def _reap(self, wait_oldest=False):
        """Gives back, oldest first, the host slots whose copies finished."""
        if wait_oldest and self._in_flight:
            self._in_flight[0][1].synchronize()
        while self._in_flight and self._in_flight[0][1].query():
            self._in_flight.popleft()  # drops the view: the slot goes back

    def _upload(self, batch):
        torch = self._torch
        # The view keeps the slot from the loader until its copy is done (the iterator
        # releases the Batch itself when it advances).
        hold = batch.labels_int32
        slot = self._slots.by_address.get(batch.images.ctypes.data)
        if slot is None:
            raise RuntimeError("tilefeed.cuda: a batch outside the pinned slots (internal)")
        n, h, w = batch.size, batch.height, batch.width
        host = self._slots.tensors[slot]
        images = host[:n * h * w * 3]
        labels = host[self._slots.labels_offset:self._slots.labels_offset + 4 * n].view(
            torch.int32)
        k = self._uploads % self._depth
        self._uploads += 1
        events = None
        if self._timing:
            events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        consumer = torch.cuda.current_stream(self._device)
        with torch.cuda.stream(self._stream):
            raw, raw_labels = self._raw[k][:images.numel()], self._raw_labels[k][:n]
            if events:
                events[0].record(self._stream)
            raw.copy_(images, non_blocking=True)
            if events:
                events[1].record(self._stream)
            raw_labels.copy_(labels, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(self._stream)
            shape = (n, 3, h, w) if self._layout == "nchw" else (n, h, w, 3)
            out = torch.empty(shape, dtype=self._torch_dtype, device=self._device)
            _tilefeed._cuda_convert(raw.data_ptr(), out.data_ptr(), n, h, w, self._dtype,
                                    self._layout, self._mean, self._std,
                                    self._stream.cuda_stream)
            out_labels = raw_labels.long()
        consumer.wait_stream(self._stream)
        out.record_stream(consumer)
        out_labels.record_stream(consumer)
        self._in_flight.append((hold, copied))
        self._reap()
        # The loader decodes into free slots only: never keep them all.
        while len(self._in_flight) + 1 >= self._depth and self._in_flight:
            self._reap(wait_oldest=True)
        return CudaBatch(out, out_labels, batch.epoch, batch.index, n, events)

    # -- the CPU Loader's other methods -------------------------------------------------

    def __len__(self):
        return len(self._loader)

    def set_epoch(self, epoch):
        self._loader.set_epoch(epoch)

    def state_dict(self):
        return self._loader.state_dict()

    def load_state_dict(self, state):
        # A seek may hand the slots to a new C++ loader: no copy may still read them.
        self._stream.synchronize()
        self._in_flight.clear()
        self._loader.load_state_dict(state)

    def metrics(self):
        return self._loader.metrics()

    def bad_samples(self):
        return self._loader.bad_samples()

    @property
    def epoch(self):
        return self._loader.epoch

    @property
    def dataset_size(self):
        return self._loader.dataset_size

    @property
    def classes(self):
        return self._loader.classes

    @property
    def device(self):
        return self._device

    def stop(self):
        """Waits for the copies in flight, gives their slots back and stops the loader."""
        self._stream.synchronize()
        self._in_flight.clear()
        self._loader.stop()

    close = stop

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.stop()
        return False

    def __repr__(self):
        return (f"tilefeed.Loader(device={str(self._device)!r}, dtype={self._dtype!r}, "
                f"layout={self._layout!r}, {self._loader!r})")

"""tilefeed.cuda: batches landed in GPU memory and converted there (IO tiles for a GPU).

    import tilefeed
    loader = tilefeed.Loader("data/train", batch_size=256, device="cuda",
                             dtype="bfloat16", mean=tilefeed.cuda.IMAGENET_MEAN,
                             std=tilefeed.cuda.IMAGENET_STD, layout="nchw")
    for images, labels in loader:
        out = model(images)   # cuda bfloat16, N x 3 x 224 x 224, normalised
        loss = criterion(out, labels)

tilefeed.Loader(..., device="cuda") makes a CudaLoader: the same dataset, options, epochs,
set_epoch() and state_dict() as the CPU Loader, and the same defaults (uint8, NHWC: device
changes where batches land, nothing else), but each batch arrives as CUDA tensors, copies on
your current stream that you may keep. timing=True adds .copy_events to each batch. Its
options, how a batch travels and the streams it uses are docs/gpu.md's. Without CUDA making a
CudaLoader raises RuntimeError with one line saying why.
"""

import functools

from . import _tilefeed
# One definition of the output options for both devices: the CPU Loader's (tilefeed).
# IMAGENET_MEAN/STD stay importable from here too (tilefeed.cuda.IMAGENET_MEAN).
from . import IMAGENET_MEAN, IMAGENET_STD
from . import _Stops, _check_options, _output_options, _size_text

__all__ = ["CudaLoader", "IMAGENET_MEAN", "IMAGENET_STD"]


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
    _output_options), None taking the CPU Loader's default, or ValueError/TypeError naming
    the bad one."""
    defaults = _tilefeed._default_options()
    out = _output_options(*(defaults[name] if value is None else value for name, value in
                            (("dtype", dtype), ("mean", mean), ("std", std), ("layout", layout))))
    return out["dtype"], out["mean"], out["std"], out["layout"]


def _slot_geometry(options):
    """(batch_size, height, width, prefetch_depth) of the Loader options in `options` (the
    defaults for those left out), checked as the CPU Loader checks them: height and width
    are those of the largest size image_size (a schedule's text, or a side) reaches, which
    the device buffers hold; each batch has its epoch's size."""
    defaults = _tilefeed._default_options()
    geometry = {name: options.get(name, defaults[name])
                for name in ("batch_size", "image_size", "prefetch_depth")}
    geometry["image_size"] = _size_text(geometry["image_size"], options.get("epochs"))
    _check_options(geometry)
    if geometry["prefetch_depth"] == "auto":
        raise ValueError("tilefeed.Loader: prefetch_depth auto needs the loader's own slots; "
                         "device=\"cuda\" pins a fixed ring: give a depth")
    height, width = _tilefeed._image_size(geometry)[1]
    return int(geometry["batch_size"]), int(height), int(width), int(geometry["prefetch_depth"])


class _DeviceMemory:
    """Device memory of the feed's ring, as torch.as_tensor reads it (no ownership): a
    view that lives for one copy, made before the buffer is released."""

    def __init__(self, address, count, typestr):
        self.__cuda_array_interface__ = {"shape": (count,), "typestr": typestr,
                                         "data": (address, False), "version": 2}


class CudaLoader(_Stops):
    """tilefeed.Loader(..., device="cuda"): see the module's help and docs/gpu.md."""

    def __init__(self, data, *, device="cuda", dtype=None, mean=None, std=None, layout=None,
                 timing=False, **options):
        from . import Loader  # the CPU loader this one wraps
        torch = _torch()
        self._dtype, self._mean, self._std, self._layout = _check_format(dtype, mean, std,
                                                                         layout)
        if "image_size" in options:  # the text, once: a callable is called here
            options["image_size"] = _size_text(options["image_size"], options.get("epochs"))
        samples, height, width, depth = _slot_geometry(options)
        self._device = _check_cuda(torch, device)
        self._torch = torch
        options["layout"] = "nhwc"  # the host batches; the kernel does the layout
        self._loader = Loader(data, _slot_memory=_tilefeed._PinnedSlotMemory(), **options)
        with torch.cuda.device(self._device):
            # prefetch_depth - 1 slots at most: the workers always have one to decode into.
            output = dict(dtype=self._dtype, mean=self._mean, std=self._std,
                          layout=self._layout)
            self._feed = _tilefeed._DeviceFeed(depth, max(1, depth - 1), samples, height,
                                               width, output)
            self._copy_stream = torch.cuda.ExternalStream(self._feed.copy_stream)
        self._timing = bool(timing)
        self._torch_dtype = getattr(torch, self._dtype)

    # -- iteration ------------------------------------------------------------------------

    def __iter__(self):
        inner = iter(self._loader)
        source = functools.partial(next, inner, None)  # the feed's host batches, None at the end
        while True:
            with self._torch.cuda.device(self._device):
                consumer = self._torch.cuda.current_stream(self._device)
                events = self._events() if self._timing else None
                landed = self._feed.next(source, consumer.cuda_stream)
                if landed is None:
                    return
                if events:
                    events[1].record(self._copy_stream)
                batch = self._take(landed, events)
            yield batch

    def _events(self):
        """(start, end) timing events, start recorded on the copy stream."""
        events = tuple(self._torch.cuda.Event(enable_timing=True) for _ in range(2))
        events[0].record(self._copy_stream)
        return events

    def _take(self, landed, events):
        """Copies a landed batch out of the ring on the current stream, then releases it."""
        torch, feed = self._torch, self._feed
        n, h, w = landed.size, landed.height, landed.width
        images = torch.as_tensor(_DeviceMemory(feed.images(landed), feed.images_bytes(landed),
                                               "|u1"), device=self._device)
        labels = torch.as_tensor(_DeviceMemory(feed.labels(landed), n, "<i4"),
                                 device=self._device)
        shape = (n, 3, h, w) if self._layout == "nchw" else (n, h, w, 3)
        images = images.view(self._torch_dtype).view(shape).clone()
        labels = labels.long()
        landed.release()  # after the copies above, on the same stream
        return _tilefeed.Batch._on_device(images, labels, landed.epoch, landed.index, n, h, w,
                                          self._layout, self._dtype, events)

    # -- the CPU Loader's other methods -------------------------------------------------

    def __len__(self):
        return len(self._loader)

    def __getattr__(self, name):
        # set_epoch, state_dict, load_state_dict, metrics, bad_samples, epoch, dataset_size,
        # classes, ...: the CPU Loader's. (A load_state_dict leaves the slots the feed still
        # holds to the old position, or to the old C++ loader for a state of another seed:
        # PinnedSlotMemory gives a new loader new slots.)
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._loader, name)

    @property
    def device(self):
        return self._device

    def stop(self):
        """Waits for the copies in flight, gives their slots back and stops the loader."""
        if self._feed is not None:
            with self._torch.cuda.device(self._device):
                self._feed = None  # DeviceFeed's destructor waits for its copies
        self._loader.stop()

    def __repr__(self):
        return (f"tilefeed.Loader(device={str(self._device)!r}, dtype={self._dtype!r}, "
                f"layout={self._layout!r}, {self._loader!r})")

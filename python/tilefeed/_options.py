"""tilefeed's option objects and checks: the values Loader's keywords take, turned into what
the C++ binding reads. Every range is checked in C++ (loader::OptionsProblem), once."""

import dataclasses
import numbers
import os

from . import _tilefeed

# The `source` spellings. "auto" (the default) detects what `data` holds with the same
# rules as every tilefeed tool (tilefeed/loader/dataset.h): record shards (a directory holding
# tilefeed-manifest.txt, or the manifest), CIFAR-10 binary batches, a root with train/, val/
# or test/ splits (the `split` argument picks one), or an ImageFolder tree. The others force a
# kind; "cifar10-train" and "cifar10-test" also pick CIFAR-10's split.
SOURCES = ("auto", "imagefolder", "shards", "cifar10", "cifar10-train", "cifar10-test")

# loader::LoaderOptions' defaults, read from C++ so Loader's signature cannot drift.
_D = _tilefeed._default_options()

# The LoaderOptions fields that JpegOptions groups (the binding takes them by name).
_JPEG_FIELDS = ("max_pixels", "max_scans", "corrupt_data", "decode_scaling", "fast_dct",
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
    decode_scaling "exact" (the default) or "fast", which BREAKS THE PIXEL CONTRACT: train
                   and eval JPEGs decode at the smallest DCT scale of 1/8, 1/4, 3/8 and 1/2
                   that keeps the crop at least the output size, so the decode's cost falls with the output size
                   (docs/design.md: how far the pixels move). "exact": a train crop decodes
                   at 1/2, 1/4 or 1/8 where it stays at least the output, an eval image at
                   full size
    fast_dct       True BREAKS THE PIXEL CONTRACT: libjpeg's fast integer IDCT, not the
                   accurate one PIL uses (pixels differ by a few levels)
    fast_upsample  True BREAKS THE PIXEL CONTRACT: nearest-neighbour chroma upsampling, not
                   libjpeg's "fancy" filter that PIL uses

    Values are checked in C++ with the Loader's other options.
    """

    max_pixels: int = _D["max_pixels"]
    max_scans: int = _D["max_scans"]
    corrupt_data: str = _D["corrupt_data"]
    decode_scaling: str = _D["decode_scaling"]
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
    datasets (docs/datasets.md), as the tools' --remote KEY=VALUE,... (the same keys, with
    dashes) does:

    cache_dir       a path, or None (the default) for no cache: fetched blocks and remote tar
                    indexes kept on disk, shared by the user's processes (0700, the user's own)
    cache_limit     bytes, at least 4 MiB (default 10 GiB): the bound of all the cache holds
    s3_endpoint     a URL, or None for AWS: where s3://bucket/key is fetched from
    remote_retries  0-20 (default 5): retries of a failed request before its sample is bad

    s3:// keys, region and endpoint come from the AWS environment and ~/.aws files as the
    tools read them (docs/datasets.md, "S3"), when the Loader is made. Values are checked
    in C++ (loader::RemoteOptionsProblem).
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
    fields; C++ checks the ranges and adds the AWS environment (loader::WithAwsEnvironment)."""
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
    return remote


# -- argument checks ------------------------------------------------------------------------

_INT32 = (1 << 31) - 1


class Ramp:
    """FFCV's progressive resizing, for image_size=: `start` pixels until epoch `first_epoch`,
    `end` from `last_epoch` on, in between the linear interpolation rounded (half to even) to
    a multiple of `step`. str() and repr() are the schedule's text, "ramp:160,192,0,8,32",
    which is also what --image-size takes; C++ checks it when a Loader gets it."""

    def __init__(self, start, end, first_epoch, last_epoch, step=32):
        self.start, self.end, self.step = start, end, step
        self.first_epoch, self.last_epoch = first_epoch, last_epoch

    def __repr__(self):
        return f"ramp:{self.start},{self.end},{self.first_epoch},{self.last_epoch},{self.step}"


def _size_text(image_size, epochs):
    """image_size= as the C++ binding takes it: an int, or the schedule's text (loader.h's
    SizeSchedule, parsed and checked in C++ only). (h, w) is "HxW"; {epoch: size} is
    "SIZE,EPOCH:SIZE,..."; a callable is called for epochs 0 .. epochs - 1, here, once."""
    if isinstance(image_size, (tuple, list)):
        if len(image_size) != 2:
            raise TypeError(f"tilefeed.Loader: image_size must be an int, (height, width), a "
                            f"dict, a tilefeed.Ramp or a callable, got {image_size!r}")
        return f"{image_size[0]}x{image_size[1]}"
    if callable(image_size):
        if epochs is None:
            raise ValueError("tilefeed.Loader: image_size=callable needs epochs=N (it is "
                             "called for each epoch when the Loader is made)")
        sizes = [_size_text(image_size(epoch), None) for epoch in range(epochs)]
        image_size = {e: s for e, s in enumerate(sizes) if e == 0 or s != sizes[e - 1]}
    if isinstance(image_size, dict):
        if 0 not in image_size:
            raise ValueError(f"tilefeed.Loader: image_size={{epoch: size}} needs epoch 0, got "
                             f"{image_size!r}")
        return ",".join((f"{e}:" if e else "") + str(_size_text(image_size[e], None))
                        for e in sorted(image_size))
    return repr(image_size) if isinstance(image_size, Ramp) else image_size


def _check_options(options, remote=None):
    """Checks Loader options (and remote options) in C++, once, as loader::OptionsProblem and
    the option table (loader/option_specs.h) say: ValueError "tilefeed.Loader: NAME
    must be RANGE, got VALUE" for the first bad value, TypeError for a value of the wrong
    type. Nothing here re-checks a range."""
    _tilefeed._check_options(options, remote or {})


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
    """mean= or std=: three numbers (one per RGB channel) or one for all three, as 3 floats;
    their ranges are C++'s (loader::OptionsProblem)."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        value = (value,) * 3
    try:
        values = tuple(float(v) for v in value)
    except (TypeError, ValueError):
        raise TypeError(f"tilefeed.Loader: {name} must be 3 numbers (R, G, B), got "
                        f"{value!r}") from None
    if len(values) != 3:
        raise ValueError(f"tilefeed.Loader: {name} must be 3 numbers (R, G, B), got {value!r}")
    return values


def _output_options(dtype, mean, std, layout):
    """dtype, mean, std and layout as the C++ loader takes them, checked there: ValueError
    naming a bad one."""
    out = {"dtype": _dtype_name(dtype), "mean": _channels("mean", mean),
           "std": _channels("std", std), "layout": layout.lower() if isinstance(layout, str)
           else layout}
    _check_options(out)
    return out


_STATE_VERSION = 2
_U64 = (1 << 64) - 1
_EPOCH_MAX = (1 << 63) - 1  # so that the epochs after one never wrap to 0
# Each state_dict() key's largest value; a position is also at most the dataset size.
_STATE_KEYS = {"version": _U64, "seed": _U64, "epoch": _EPOCH_MAX, "position": _U64,
               "dataset_size": _U64, "dataset_digest": _U64}


def _check_int(where, key, value, high):
    """int(value): TypeError for a non-int, ValueError naming the key, the value and the
    range [0, high] it is out of."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{where}: {key}={value!r} is not an int")
    if not 0 <= value <= high:
        raise ValueError(f"{where}: {key}={value} is out of range [0, {high}]")
    return int(value)


def _check_state(state):
    """Validates a state_dict(); returns its values by key."""
    where = "tilefeed.Loader.load_state_dict"
    if not isinstance(state, dict):
        raise TypeError(f"{where}: expected the dict from state_dict(), got "
                        f"{type(state).__name__}")
    missing = [key for key in _STATE_KEYS if key not in state]
    unknown = sorted(str(key) for key in state if key not in _STATE_KEYS)
    if missing or unknown:
        raise ValueError(f"{where}: not a tilefeed loader state (missing {missing}, "
                         f"unknown {unknown})")
    values = {key: _check_int(where, key, state[key], high) for key, high in _STATE_KEYS.items()}
    if values["version"] != _STATE_VERSION:
        raise ValueError(f"{where}: state version {values['version']}; this tilefeed reads "
                         f"version {_STATE_VERSION}")
    _check_int(where, "position", values["position"], values["dataset_size"])
    return values


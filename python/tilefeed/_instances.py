"""Which instance of a job this process is: the launcher's slice of every epoch
(Loader's slice="auto"), and the cores it may use."""

import os
import sys
import warnings

from . import _tilefeed

def _check_workers(workers):
    """Warns once per process when `workers` asks for more decode threads than the cores this
    process may run on (its CPU affinity: mpirun --bind-to core, taskset): oneTBB runs at most
    that many, so the rest would never start."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return
    if workers != "auto" and workers > cores and ("workers", workers, cores) not in _announced:
        _announced.add(("workers", workers, cores))
        warnings.warn(f"tilefeed.Loader: workers={workers}, but this process may run on only "
                      f"{cores} core(s) (its CPU affinity, e.g. mpirun --bind-to core), so at most "
                      f"{cores} decode thread(s) run; pass workers=0 (one per usable core) or "
                      f"give the process more cores", stacklevel=3)


# -- instance detection -----------------------------------------------------------------------

# The launchers' rank/size variables that tilefeed/launch/launch.h reads, for naming the origin.
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

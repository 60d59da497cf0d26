"""Mixup and CutMix: batch-level mixing on the consumer's side, with torchvision's
v2.MixUp / v2.CutMix semantics and soft targets (tilefeed.augment's MixUp, CutMix and
RandomChoice).

    mix = RandomChoice([MixUp(0.8, num_classes=1000, label_smoothing=0.1),
                        CutMix(1.0, num_classes=1000, label_smoothing=0.1, layout="NCHW")])
    for step, (x, y) in enumerate(loader):
        x, targets = mix(x, y, step)                   # float images, float soft targets
        loss = F.cross_entropy(model(x), targets)

A call mixes the batch with itself rolled by one (sample i with sample i - 1): MixUp as
lam * x + (1 - lam) * rolled, CutMix by pasting rolled's pixels inside a box; the targets
are lam * one_hot + (1 - lam) * rolled one_hot, one_hot smoothed first (1 - s + s / C on
the label, s / C elsewhere). lam ~ Beta(alpha, alpha); CutMix's box has a uniform centre and
sides sqrt(1 - lam) x the image's, clamped to it, and lam is then 1 - box area / image area.
RandomChoice picks one of its mixes per batch (with probabilities p, as torchvision's).

The draws are a pure function of (seed, step): every instance mixes its batch with the same
draws at the same step, and a resumed run draws what the uninterrupted one drew. They are
drawn on the CPU; the pixels are mixed where the tensor is (the GPU for device="cuda").
Images: the Loader's batches, N x H x W x C or N x C x H x W (CutMix's layout, the Loader's
spelling), uint8 (mixed in float32, in 0-255 units) or float (mixed in its dtype). Labels: N
integers in [0, num_classes). Targets are float32 on the images' device. draw(step, height,
width) returns a call's draws (lam, CutMix's box (x1, y1, x2, y2), RandomChoice's choice).
Bad arguments raise ValueError. Checking the labels' range reads them: one device sync per
call when they are on the GPU.
"""

import math
import numbers

import numpy as np
import torch


def _check(owner, name, value, ok, expected):
    if not ok(value):
        raise ValueError(f"{owner}: {name} must be {expected}, got {value!r}")
    return value


def _integer(value, low):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= low


def _real(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _generator(owner, seed, step, salt):
    """The draws of (seed, step): the same numbers in every process. salt keeps the
    RandomChoice's pick apart from its mixes' draws."""
    _check(owner, "step", step, lambda v: _integer(v, 0), "an integer >= 0")
    return np.random.default_rng([int(seed), int(step), salt])


class _Mix:
    """What MixUp and CutMix share: the checks, the generator and the soft targets."""

    _salt = 1

    def __init__(self, alpha, num_classes, label_smoothing, seed):
        name = type(self).__name__
        self.alpha = float(_check(name, "alpha", alpha, lambda v: _real(v) and v > 0, "> 0"))
        self.num_classes = int(_check(name, "num_classes", num_classes,
                                      lambda v: _integer(v, 1), "an integer >= 1"))
        self.label_smoothing = float(_check(name, "label_smoothing", label_smoothing,
                                            lambda v: _real(v) and 0 <= v < 1, "in [0, 1)"))
        self.seed = int(_check(name, "seed", seed, lambda v: _integer(v, 0), "an integer >= 0"))

    def __call__(self, images, labels, step):
        """(mixed float images, float32 soft targets) of a batch and its labels at step."""
        name = type(self).__name__
        if not isinstance(images, torch.Tensor) or images.dim() != 4 or not (
                images.dtype == torch.uint8 or images.is_floating_point()):
            raise ValueError(f"{name}: images must be a 4-dimensional uint8 or float tensor, got "
                             f"{getattr(images, 'dtype', type(images).__name__)} of shape "
                             f"{tuple(getattr(images, 'shape', ()))}")
        labels = torch.as_tensor(labels)
        if labels.shape != images.shape[:1] or labels.is_floating_point() or \
                labels.is_complex() or labels.dtype == torch.bool:
            raise ValueError(f"{name}: labels must be {images.shape[0]} integers (one per "
                             f"image), got {labels.dtype} of shape {tuple(labels.shape)}")
        low, high = torch.stack([labels.min(), labels.max()]).tolist() if len(labels) else (0, 0)
        if not 0 <= low <= high < self.num_classes:
            raise ValueError(f"{name}: labels must be in [0, {self.num_classes}), got "
                             f"{low}..{high}")
        draws = self.draw(step, *self._size(images))
        x = images if images.is_floating_point() else images.float()
        return self._mix(x, x is images, draws), self._targets(labels, images.device,
                                                              draws["lam"])

    def _size(self, images):
        return ()

    def _targets(self, labels, device, lam):
        off = self.label_smoothing / self.num_classes
        one_hot = torch.full((labels.shape[0], self.num_classes), off, device=device)
        one_hot.scatter_(1, labels.to(device, torch.int64).view(-1, 1),
                         1 - self.label_smoothing + off)
        return one_hot.roll(1, 0).mul_(1 - lam).add_(one_hot, alpha=lam)


class MixUp(_Mix):
    """lam * images + (1 - lam) * images rolled by one, with lam ~ Beta(alpha, alpha)."""

    def __init__(self, alpha=1.0, *, num_classes, label_smoothing=0.0, seed=0):
        super().__init__(alpha, num_classes, label_smoothing, seed)

    def draw(self, step, height=None, width=None):
        """{"lam": lam} of (seed, step); height and width are not used."""
        return {"lam": float(_generator("MixUp", self.seed, step, self._salt)
                             .beta(self.alpha, self.alpha))}

    def _mix(self, x, shared, draws):
        return x.roll(1, 0).mul_(1 - draws["lam"]).add_(x, alpha=draws["lam"])


class CutMix(_Mix):
    """The images with a box of the images rolled by one pasted in; lam from its area."""

    _salt = 2

    def __init__(self, alpha=1.0, *, num_classes, label_smoothing=0.0, seed=0, layout="NHWC"):
        super().__init__(alpha, num_classes, label_smoothing, seed)
        self.layout = _check("CutMix", "layout", layout, lambda v: isinstance(v, str) and
                             v.upper() in ("NHWC", "NCHW"), '"NHWC" or "NCHW"').upper()

    def draw(self, step, height, width):
        """{"lam": 1 - box area / image area, "box": (x1, y1, x2, y2)} of (seed, step)."""
        rng = _generator("CutMix", self.seed, step, self._salt)
        lam = rng.beta(self.alpha, self.alpha)
        cx, cy = int(rng.integers(width)), int(rng.integers(height))
        r = 0.5 * math.sqrt(1 - lam)
        half_w, half_h = int(r * width), int(r * height)
        x1, y1 = max(cx - half_w, 0), max(cy - half_h, 0)
        x2, y2 = min(cx + half_w, width), min(cy + half_h, height)
        return {"lam": 1 - (x2 - x1) * (y2 - y1) / (width * height), "box": (x1, y1, x2, y2)}

    def _size(self, images):
        channels = images.shape[3 if self.layout == "NHWC" else 1]
        if channels not in (1, 3, 4):
            raise ValueError(f'CutMix(layout="{self.layout}"): images of shape '
                             f"{tuple(images.shape)} have {channels} channels; pass the "
                             f"Loader's layout")
        return tuple(images.shape[1:3] if self.layout == "NHWC" else images.shape[2:4])

    def _mix(self, x, shared, draws):
        x1, y1, x2, y2 = draws["box"]
        out = x.clone() if shared else x
        box = (slice(None), slice(y1, y2), slice(x1, x2))
        box = box if self.layout == "NHWC" else (slice(None),) + box
        out[box] = x[box].roll(1, 0)
        return out


class RandomChoice:
    """One of `transforms` (MixUp, CutMix) per batch, transforms[i] with probability p[i]
    (default: equal), picked from (seed, step)."""

    def __init__(self, transforms, p=None, *, seed=0):
        self.transforms = list(_check(
            "RandomChoice", "transforms", transforms, lambda v: isinstance(v, (list, tuple)) and
            v and all(isinstance(t, _Mix) for t in v), "a list of MixUp and CutMix"))
        p = [1.0] * len(self.transforms) if p is None else list(p)
        _check("RandomChoice", "p", p, lambda v: len(v) == len(self.transforms) and all(
            _real(q) and q >= 0 for q in v) and sum(v) > 0, "one weight >= 0 per transform")
        self.p = [q / sum(p) for q in p]
        self.seed = int(_check("RandomChoice", "seed", seed, lambda v: _integer(v, 0),
                               "an integer >= 0"))

    def _pick(self, step):
        return int(_generator("RandomChoice", self.seed, step, 0).choice(len(self.p), p=self.p))

    def draw(self, step, height, width):
        """{"choice": i, **transforms[i].draw(step, height, width)} of (seed, step)."""
        choice = self._pick(step)
        return {"choice": choice, **self.transforms[choice].draw(step, height, width)}

    def __call__(self, images, labels, step):
        return self.transforms[self._pick(step)](images, labels, step)

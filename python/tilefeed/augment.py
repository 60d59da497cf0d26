"""torchvision's training transforms, for Loader(augment=[...]); the C++ decode workers apply
them to each sample's uint8 crop, with torchvision's parameters, sampling and pixels.

    from tilefeed.augment import (RandomResizedCrop, RandomHorizontalFlip, RandAugment,
                                  RandomErasing)
    loader = tilefeed.Loader("data/train", augment=[RandomResizedCrop(),
        RandomHorizontalFlip(), RandAugment(2, 9), RandomErasing(0.25)])

RandomResizedCrop(scale=(0.08, 1.0), ratio=(3/4, 4/3))  first; its size is image_size
RandomHorizontalFlip(p=0.5)                             optional, right after it
ColorJitter(brightness=0, contrast=0, saturation=0, hue=0)
RandAugment(num_ops=2, magnitude=9, num_magnitude_bins=31, fill=0)
TrivialAugmentWide(num_magnitude_bins=31, fill=0)
RandomErasing(p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0)
RandomGrayscale(p=0.1)

MixUp, CutMix and RandomChoice mix whole batches on the consumer's side (after the Loader,
on the batch's device): `images, targets = mix(images, labels, step)`; docs/options.md.

Fills and RandomErasing's value are uint8 levels, applied before any normalisation. An op's
repr is the one text form C++ parses (train --augment takes the same text). Loader.crop_plan
says which ops and parameters a sample drew; docs/augment.md has the rules.
"""

from . import _tilefeed

_OPS = ("ColorJitter", "RandAugment", "RandomErasing", "RandomGrayscale", "RandomHorizontalFlip",
        "RandomResizedCrop", "TrivialAugmentWide")
__all__ = [*_OPS, "CutMix", "MixUp", "RandomChoice"]


class _Op:
    """One transform: torchvision's name and parameters, positional or keyword."""

    def __init__(self, *args, **kwargs):
        parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
        self._text = _tilefeed._augment_text(f"{type(self).__name__}({', '.join(parts)})")

    def __repr__(self):
        return self._text

    def __eq__(self, other):
        return isinstance(other, _Op) and self._text == other._text

    def __hash__(self):
        return hash(self._text)


for _name in _OPS:  # each op is its name; the module help lists its parameters
    globals()[_name] = type(_name, (_Op,), {"__module__": __name__,
                                            "__doc__": f"torchvision's {_name} (tilefeed.augment)"})


def _spec_text(augment):
    """The text form of Loader's augment= (a list of ops, or the text itself)."""
    if isinstance(augment, str):
        return augment
    if not isinstance(augment, (list, tuple)) or not all(isinstance(op, _Op) for op in augment):
        raise TypeError(f"tilefeed.Loader: augment= takes a list of tilefeed.augment ops or "
                        f"their text, got {augment!r}")
    return ", ".join(map(repr, augment))


def __getattr__(name):
    """MixUp, CutMix and RandomChoice need torch: imported on first use, so `import tilefeed`
    does not import torch."""
    if name in ("CutMix", "MixUp", "RandomChoice"):
        from . import _mixing
        return getattr(_mixing, name)
    raise AttributeError(f"module 'tilefeed.augment' has no attribute {name!r}")

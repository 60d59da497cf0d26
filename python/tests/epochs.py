"""Helpers shared by the Python tests (not a test module: pytest collects test_*.py)."""

import numpy as np

import tilefeed


def one_epoch(data, seed, **kwargs):
    """Every batch of one epoch of `data`: (images, labels) concatenated, copied out."""
    options = dict(batch_size=4, image_size=24, workers=2, seed=seed, epochs=1)
    options.update(kwargs)
    images, labels = [], []
    with tilefeed.Loader(str(data), **options) as loader:
        for batch in loader:
            images.append(np.array(batch.images))
            labels.append(np.array(batch.labels_int32))
    return np.concatenate(images), np.concatenate(labels)

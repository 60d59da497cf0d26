"""PNG ImageFolders through the Python module (torchvision's ImageFolder loads PNGs, so a folder
that works there must work here): a PNG-only folder and a mixed JPEG/PNG one give the pixels
Pillow gives for the same resize + center crop. Every image is written here, at run time."""

import math

import numpy as np
import pytest
from PIL import Image

import tilefeed

IMAGE_SIZE = 40
EVAL_RESIZE = 48
# Pillow modes PNGs come in; each is loaded as torchvision does, with convert("RGB").
MODES = ["RGB", "RGBA", "L", "LA", "P"]


def smooth_photo(h, w, seed):
    """Gradients and soft waves: resize-then-crop and crop-then-resize differ little on it."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    channels = []
    for _ in range(3):
        fx, fy, phase = rng.uniform(0.01, 0.06, 2).tolist() + [rng.uniform(0, 6.28)]
        channels.append(128 + 60 * np.sin(fx * x + phase) * np.cos(fy * y) + 40 * (x / w - y / h))
    return np.clip(np.stack(channels, axis=-1), 0, 255).astype(np.uint8)


def write_image(path, index, kind):
    h, w = 50 + 7 * (index % 5), 60 + 5 * (index % 7)
    image = Image.fromarray(smooth_photo(h, w, index))
    if kind == "jpeg":
        image.save(path.with_suffix(".jpg"), quality=95)
        return
    mode = MODES[index % len(MODES)]
    image = image.quantize(256) if mode == "P" else image.convert(mode)
    if mode in ("RGBA", "LA"):
        alpha = Image.fromarray(np.full((h, w), 37 + index, dtype=np.uint8))
        image.putalpha(alpha)
    # Upper-case extensions too: matching is case-insensitive.
    image.save(path.with_suffix(".PNG" if index % 3 == 0 else ".png"))


def write_folder(root, kinds):
    for c in range(2):
        (root / f"class{c}").mkdir(parents=True)
        for i in range(6):
            index = 6 * c + i
            write_image(root / f"class{c}" / f"{i:03d}", index, kinds[index % len(kinds)])
    return root


def files_in_order(root):
    """The files in the ImageFolder's sample order (class by name, then file name)."""
    return [f for d in sorted(root.iterdir()) for f in sorted(d.iterdir(), key=lambda p: p.name)]


def pillow_eval(path):
    """torchvision's eval transform in Pillow: Resize(EVAL_RESIZE) + CenterCrop(IMAGE_SIZE)."""
    image = Image.open(path).convert("RGB")
    w, h = image.size
    if w < h:
        size = (EVAL_RESIZE, int(EVAL_RESIZE * h / w))
    else:
        size = (int(EVAL_RESIZE * w / h), EVAL_RESIZE)
    image = image.resize(size, Image.BILINEAR)
    left = int(round((size[0] - IMAGE_SIZE) / 2.0))
    top = int(round((size[1] - IMAGE_SIZE) / 2.0))
    return np.asarray(image.crop((left, top, left + IMAGE_SIZE, top + IMAGE_SIZE)))


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def load_all(root):
    images = {}
    with tilefeed.Loader(root, source="imagefolder", mode="eval", batch_size=5,
                         image_size=IMAGE_SIZE, eval_resize=EVAL_RESIZE, shuffle=False,
                         workers=2, epochs=1, bad_sample_policy="fail") as loader:
        for batch in loader:
            for row, sample in enumerate(batch.sample_indices.tolist()):
                images[sample] = batch.images[row].copy()
    return images


@pytest.mark.parametrize("kinds", [["png"], ["jpeg", "png"]], ids=["png", "mixed"])
def test_folder_matches_pillow(tmp_path, kinds):
    root = write_folder(tmp_path / "data", kinds)
    files = files_in_order(root)
    images = load_all(root)
    assert sorted(images) == list(range(len(files)))
    for sample, path in enumerate(files):
        quality = psnr(images[sample], pillow_eval(path))
        assert quality >= 35, f"{path.name}: {quality:.1f} dB against Pillow"
        # PNG is lossless and eval is torchvision's Resize + CenterCrop (augment.h): only
        # the resizers' fixed-point rounding differs.
        if path.suffix.lower() == ".png":
            assert quality >= 45, f"{path.name}: {quality:.1f} dB against Pillow"


def test_skipped_formats_do_not_stop_a_folder(tmp_path):
    root = write_folder(tmp_path / "data", ["png"])
    Image.fromarray(smooth_photo(20, 20, 1)).save(root / "class0" / "x.bmp")
    Image.fromarray(smooth_photo(20, 20, 2)).save(root / "class1" / "y.gif")
    with tilefeed.Loader(root, mode="eval", image_size=IMAGE_SIZE, eval_resize=EVAL_RESIZE,
                         batch_size=4, workers=1, epochs=1) as loader:
        assert loader.dataset_size == 12
        assert sum(batch.size for batch in loader) == 12

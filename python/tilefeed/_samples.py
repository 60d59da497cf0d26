"""Datasets listed in Python: a list of (path or bytes, label) pairs, or a CSV file."""

import numbers
import os

from ._options import _INT32

# -- samples listed in Python ------------------------------------------------------------------


def _resolve_data(data, split):
    """(location or description, split, listed samples or None, their class names or None)
    for Loader's `data`: a list of (path or bytes, label), a CSV file, or a location."""
    listed = isinstance(data, (list, tuple))
    if listed or (isinstance(data, (str, os.PathLike)) and os.fspath(data).endswith(".csv")
                  and os.path.isfile(data)):
        if split != "train":
            raise ValueError(f"tilefeed.Loader: split={split!r} needs a location with splits; "
                             f"a list or CSV of samples is one dataset")
        samples, classes = _list_samples(data) if listed else _csv_samples(data)
        where = f"<list of {len(data)} samples>" if listed else os.fspath(data)
        return where, split, samples, classes
    # A location's split is resolved by the C++ opener alone (loader::OpenDataset), as for
    # every tool's --split: it raises SourceError naming what is missing.
    return os.fspath(data), split, None, None


def _list_samples(data, where="data"):
    """[(path or bytes, label)] -> ([(path, bytes, label)], class names). Labels are ints >= 0
    (class names "0".."K-1") or all strings (class names sorted, labels their indices)."""
    if not data:
        raise ValueError(f"tilefeed.Loader: {where} is empty: no samples")
    entries, labels = [], []
    for i, entry in enumerate(data):
        if not isinstance(entry, (tuple, list)) or len(entry) != 2:
            raise TypeError(f"tilefeed.Loader: {where}[{i}] must be (path or bytes, label), got "
                            f"{entry!r:.80}")
        item, label = entry
        if isinstance(item, (str, os.PathLike)):
            entries.append((os.fspath(item), b""))
        else:
            try:
                raw = bytes(memoryview(item).cast("B"))
            except TypeError:
                raise TypeError(f"tilefeed.Loader: {where}[{i}][0] must be a path or bytes, got "
                                f"{type(item).__name__}") from None
            if not raw:
                raise ValueError(f"tilefeed.Loader: {where}[{i}][0] is empty bytes")
            entries.append(("", raw))
        labels.append(label)
    if all(isinstance(label, str) for label in labels):
        classes = sorted(set(labels))
        index = {name: k for k, name in enumerate(classes)}
        labels = [index[label] for label in labels]
    else:
        for i, label in enumerate(labels):
            if isinstance(label, bool) or not isinstance(label, numbers.Integral):
                raise TypeError(f"tilefeed.Loader: {where}[{i}][1] must be an int label (or every "
                                f"label a class name), got {label!r}")
            if not 0 <= label <= _INT32:
                raise ValueError(f"tilefeed.Loader: {where}[{i}][1]: label {label} is outside "
                                 f"[0, 2^31)")
        classes = [str(k) for k in range(max(labels) + 1)]
    return [(path, raw, int(label)) for (path, raw), label in zip(entries, labels)], classes


def _csv_samples(path):
    """A CSV of path,label rows (an optional header row "path,label"; relative paths are
    relative to the CSV's directory) -> _list_samples' result."""
    import csv
    base = os.path.dirname(os.path.abspath(path))
    rows = []
    with open(path, newline="", encoding="utf-8") as f:
        for number, row in enumerate(csv.reader(f), start=1):
            if not row or (number == 1 and [c.strip().lower() for c in row] == ["path", "label"]):
                continue
            if len(row) != 2:
                raise ValueError(f"tilefeed.Loader: {path}:{number}: expected 'path,label', got "
                                 f"{len(row)} fields")
            file, label = row[0].strip(), row[1].strip()
            rows.append((os.path.join(base, file), label))
    if rows and all(label.lstrip("-").isdigit() for _, label in rows):
        rows = [(file, int(label)) for file, label in rows]
    return _list_samples(rows, where=os.fspath(path))



"""Checks metrics records against docs/metrics-schema.json, and the schema against the
tables of docs/metrics.md (the two must not drift)."""

import json
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA_PATH = os.path.join(ROOT, "docs", "metrics-schema.json")
DOC_PATH = os.path.join(ROOT, "docs", "metrics.md")


def load_schema():
    with open(SCHEMA_PATH, encoding="utf-8") as f:
        return json.load(f)


def _type_ok(value, field):
    if value is None:
        return bool(field.get("nullable"))
    kind = field["type"]
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "object":
        return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
    raise ValueError("unknown type in the schema: " + kind)


def record_errors(record, schema):
    """The ways `record` (a parsed JSON object) departs from the schema; [] if none."""
    kind = record.get("record")
    fields = schema["records"].get(kind)
    if fields is None:
        return ["unknown record kind %r" % (kind,)]
    errors = []
    names = {f["name"] for f in fields}
    for field in fields:
        if field["name"] not in record:
            errors.append("%s: missing field %s" % (kind, field["name"]))
        elif not _type_ok(record[field["name"]], field):
            errors.append("%s: field %s = %r is not %s" % (kind, field["name"],
                                                            record[field["name"]], field["type"]))
    for name in record:
        if name not in names:
            errors.append("%s: field %s is not in the schema" % (kind, name))
    return errors


def file_errors(path, schema):
    """Every record of a metrics file checked, and the file's shape: config first, end
    last, at least one interval."""
    errors = []
    kinds = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                errors.append("%s:%d: not JSON: %s" % (path, number, e))
                continue
            kinds.append(record.get("record"))
            errors += ["%s:%d: %s" % (path, number, e) for e in record_errors(record, schema)]
    if not kinds or kinds[0] != "config" or kinds.count("config") != 1:
        errors.append("%s: the first record, and only it, must be config: %s" % (path, kinds))
    if not kinds or kinds[-1] != "end" or kinds.count("end") != 1:
        errors.append("%s: the last record, and only it, must be end: %s" % (path, kinds))
    if "interval" not in kinds:
        errors.append("%s: no interval record" % path)
    return errors


def doc_tables(path=DOC_PATH):
    """{record: [(name, type, unit), ...]} from the '### `record`' tables of docs/metrics.md."""
    tables = {}
    current = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            heading = re.match(r"^### `(\w+)`", line)
            if heading:
                current = tables.setdefault(heading.group(1), [])
                continue
            row = re.match(r"^\| `(\w+)` \| ([^|]*)\| ([^|]*)\|", line)
            if row and current is not None:
                current.append((row.group(1), row.group(2).strip(), row.group(3).strip()))
    return tables


def schema_tables(schema):
    return {
        kind: [(f["name"], f["type"] + (" or null" if f.get("nullable") else ""), f["unit"])
               for f in fields]
        for kind, fields in schema["records"].items()
    }

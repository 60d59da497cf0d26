"""Checks metrics records against docs/metrics-schema.json (a Draft 2020-12 JSON Schema) with
python3-jsonschema's Draft202012Validator, and the schema against the tables of
docs/metrics.md (the two must not drift)."""

import json
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA_PATH = os.path.join(ROOT, "docs", "metrics-schema.json")
DOC_PATH = os.path.join(ROOT, "docs", "metrics.md")


def load_schema():
    with open(SCHEMA_PATH, encoding="utf-8") as f:
        return json.load(f)


def validator(schema):
    """A standard JSON Schema validator (Debian's python3-jsonschema) for `schema`, which
    must itself be a valid Draft 2020-12 schema."""
    from jsonschema import Draft202012Validator
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def record_errors(record, schema):
    """The ways `record` (a parsed JSON value) departs from the schema; [] if none."""
    return ["%s: %s" % ("/".join(str(p) for p in e.absolute_path) or "record", e.message)
            for e in validator(schema).iter_errors(record)]


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
    """{record: [(name, type, unit), ...]} as docs/metrics.md's tables write them."""
    def kind(field):
        types = field["type"] if isinstance(field["type"], list) else [field["type"]]
        return " or ".join(types)
    return {
        name: [(field, kind(spec), spec.get("x-unit", "")) for field, spec in
               definition["properties"].items()]
        for name, definition in schema["$defs"].items()
    }

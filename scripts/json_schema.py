"""The JSON schema of `gpumix-top --once --json`, generated from the snapshot contract.

    python scripts/json_schema.py            # prints docs/json.md
    python scripts/json_schema.py --write    # writes it

The TypedDicts in gpumix/wire/snapshot_types.py are the one declaration; this turns them into a JSON
schema (draft 2020-12 subset: type, properties, required, items, additionalProperties, enum, $defs,
$ref, anyOf) and `validate` checks a document against that subset (tests/test_json_schema.py).
"""

from __future__ import annotations

import json
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, NotRequired, Union, get_args, get_origin, get_type_hints

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpumix.wire import snapshot_types  # noqa: E402

DOC_PATH = ROOT / "docs" / "json.md"
SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def _is_typed_dict(kind: Any) -> bool:
    return isinstance(kind, type) and typing.is_typeddict(kind)


def _schema_of(kind: Any, defs: dict[str, Any]) -> dict[str, Any]:
    if kind is Any:
        return {}
    if kind in SCALARS:
        return {"type": SCALARS[kind]}
    if _is_typed_dict(kind):
        if kind.__name__ not in defs:
            defs[kind.__name__] = {}  # placeholder: a type that refers to itself stops here
            defs[kind.__name__] = _object_schema(kind, defs)
        return {"$ref": f"#/$defs/{kind.__name__}"}
    origin, args = get_origin(kind), get_args(kind)
    if origin is NotRequired:
        return _schema_of(args[0], defs)
    if origin is Literal:
        return {"enum": list(args)}
    if origin is list:
        return {"type": "array", "items": _schema_of(args[0], defs)}
    if origin is dict:
        return {"type": "object", "additionalProperties": _schema_of(args[1], defs)}
    if origin in (Union, types.UnionType):
        return {"anyOf": [_schema_of(arg, defs) for arg in args]}
    raise TypeError(f"no JSON schema for {kind!r}")


def _object_schema(kind: type, defs: dict[str, Any]) -> dict[str, Any]:
    hints = get_type_hints(kind, include_extras=True)
    schema: dict[str, Any] = {"type": "object"}
    if kind.__doc__:
        schema["description"] = " ".join(kind.__doc__.split())
    schema["properties"] = {name: _schema_of(hint, defs) for name, hint in hints.items()}
    # NotRequired is seen in the hints: under `from __future__ import annotations` Python 3.11's
    # __required_keys__ counts every key as required
    schema["required"] = sorted(name for name, hint in hints.items()
                                if name in kind.__required_keys__ and get_origin(hint) is not NotRequired)
    return schema


def snapshot_schema() -> dict[str, Any]:
    defs: dict[str, Any] = {}
    root = _object_schema(snapshot_types.Snapshot, defs)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"gpumix-snapshot-v{snapshot_types.SCHEMA_VERSION}",
        "title": "gpumix snapshot (gpumix-top --once --json)",
        **root,
        "$defs": dict(sorted(defs.items())),
    }


def render_doc() -> str:
    schema = json.dumps(snapshot_schema(), indent=2)
    return (
        "# The snapshot as JSON\n\n"
        "`gpumix-top --once --json` prints one snapshot: the same object the TUI renders and the hub\n"
        "sends every client. Its contract is `gpumix/wire/snapshot_types.py`; the schema below is\n"
        f"generated from it (schema version {snapshot_types.SCHEMA_VERSION}, `schema_version` in the "
        "document)\nby `python scripts/json_schema.py --write`, and a test checks that this page matches "
        "the script\nand that a real `gpumix-top --demo --once --json` validates against it.\n\n"
        "Units sit in key names (`_s`, `_w`, `_bytes`, `_pct`); `null` means not available. Objects may\n"
        "carry keys not listed here (a newer hub may add some): readers ignore what they do not know.\n\n"
        f"```json\n{schema}\n```\n"
    )


def validate(document: Any, schema: dict[str, Any], root: dict[str, Any] | None = None,
             where: str = "$") -> list[str]:
    """Errors of `document` against the subset of JSON schema that snapshot_schema uses."""
    root = root if root is not None else schema
    if "$ref" in schema:
        return validate(document, root["$defs"][schema["$ref"].rsplit("/", 1)[1]], root, where)
    if "anyOf" in schema:
        results = [validate(document, option, root, where) for option in schema["anyOf"]]
        if any(not errors for errors in results):
            return []
        return [f"{where}: matches none of its types ({'; '.join(e[0] for e in results if e)})"]
    if "enum" in schema:
        return [] if document in schema["enum"] else [f"{where}: {document!r} not in {schema['enum']}"]
    kind = schema.get("type")
    if kind is None:
        return []
    if not _has_type(document, kind):
        return [f"{where}: {type(document).__name__} where {kind} is expected"]
    errors: list[str] = []
    if kind == "array":
        for i, item in enumerate(document):
            errors += validate(item, schema["items"], root, f"{where}[{i}]")
    elif kind == "object":
        for name in schema.get("required", []):
            if name not in document:
                errors.append(f"{where}: '{name}' is missing")
        properties = schema.get("properties", {})
        for name, value in document.items():
            if name in properties:
                errors += validate(value, properties[name], root, f"{where}.{name}")
            elif "additionalProperties" in schema:
                errors += validate(value, schema["additionalProperties"], root, f"{where}.{name}")
    return errors


def undeclared(document: Any, schema: dict[str, Any], root: dict[str, Any] | None = None,
               where: str = "$") -> list[str]:
    """Keys of `document` the contract does not declare (validate allows them: a reader ignores them;
    the hub itself should declare everything it sends)."""
    root = root if root is not None else schema
    if "$ref" in schema:
        return undeclared(document, root["$defs"][schema["$ref"].rsplit("/", 1)[1]], root, where)
    if "anyOf" in schema:
        matching = [option for option in schema["anyOf"] if not validate(document, option, root, where)]
        return undeclared(document, matching[0], root, where) if matching else []
    found: list[str] = []
    if isinstance(document, dict) and "properties" in schema:
        for name, value in document.items():
            if name in schema["properties"]:
                found += undeclared(value, schema["properties"][name], root, f"{where}.{name}")
            else:
                found.append(f"{where}.{name}")
    elif isinstance(document, dict) and "additionalProperties" in schema:
        for name, value in document.items():
            found += undeclared(value, schema["additionalProperties"], root, f"{where}.{name}")
    elif isinstance(document, list) and "items" in schema:
        for i, item in enumerate(document):
            found += undeclared(item, schema["items"], root, f"{where}[{i}]")
    return found


def _has_type(value: Any, kind: str) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    python = {"string": str, "boolean": bool, "null": type(None), "array": list, "object": dict}[kind]
    return isinstance(value, python)


def main(argv: list[str]) -> int:
    text = render_doc()
    if "--write" in argv:
        DOC_PATH.write_text(text)
        print(f"wrote {DOC_PATH.relative_to(ROOT)}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

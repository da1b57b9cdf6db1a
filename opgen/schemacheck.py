"""A fast JSON Schema check that vouches for valid recipes and generator options.

``import jsonschema`` costs ~75 ms, a sixth of a build's start-up, for documents that are almost
always valid. ``surely_valid`` decides the common case exactly for the keywords opgen's schemas
use; anything else (an unknown keyword, a type it does not model, a document it finds invalid)
answers False, and the caller asks jsonschema, which also words the error. It never accepts what
jsonschema rejects (tests/test_generate_schema_check.py fuzzes both against each other).
"""

from __future__ import annotations

import re
from typing import Any

_ANNOTATIONS = frozenset({"$schema", "$id", "$defs", "title", "description", "default", "examples", "$comment"})


def surely_valid(schema: Any, value: Any) -> bool:
    """True only if ``value`` is valid under ``schema`` (Draft 2020-12); False means "ask jsonschema"."""
    try:
        return _check(schema, value, schema) is True
    except (RecursionError, re.error, TypeError, KeyError, ValueError):
        return False


def _is_type(value: Any, name: str) -> bool | None:
    t = type(value)
    if name == "string":
        return t is str
    if name == "object":
        return t is dict
    if name == "array":
        return t is list
    if name == "boolean":
        return t is bool
    if name == "null":
        return value is None
    if name == "integer":
        return t is int or (t is float and value.is_integer())
    if name == "number":
        return t in (int, float)
    return None


_PLAIN = (str, type(None))


def _same(a: Any, b: Any) -> bool | None:
    """JSON equality, for the values it decides without ambiguity (1 vs True, 1 vs 1.0: ask jsonschema)."""
    if isinstance(a, _PLAIN) and isinstance(b, _PLAIN):
        return a == b
    return None


def _check(s: Any, v: Any, root: Any) -> bool | None:
    if s is True or s == {}:
        return True
    if s is False or type(s) is not dict:
        return None
    t = type(v)
    if t not in (str, int, float, bool, list, dict, type(None)):
        return None
    for key, arg in s.items():
        if key in _ANNOTATIONS:
            continue
        if key == "type":
            names = arg if type(arg) is list else [arg]
            found = [_is_type(v, n) for n in names]
            if None in found:
                return None
            if not any(found):
                return False
        elif key == "enum" or key == "const":
            options = arg if key == "enum" else [arg]
            same = [_same(v, o) for o in options]
            if True not in same:
                return None if None in same else False
        elif key == "pattern":
            if t is str and not re.search(arg, v):
                return False
        elif key in ("minimum", "maximum"):
            if t in (int, float):
                if (v < arg) if key == "minimum" else (v > arg):
                    return False
        elif key in ("minLength", "minItems", "maxItems", "minProperties"):
            if (key == "minLength" and t is str) or (key in ("minItems", "maxItems") and t is list) or \
                    (key == "minProperties" and t is dict):
                n = len(v)
                if (n > arg) if key == "maxItems" else (n < arg):
                    return False
        elif key == "uniqueItems":
            if arg and t is list:
                if not all(type(x) is str for x in v):
                    return None
                if len(set(v)) != len(v):
                    return False
        elif key == "items":
            if t is list:
                for x in v:
                    r = _check(arg, x, root)
                    if r is not True:
                        return r
        elif key == "required":
            if t is dict and any(k not in v for k in arg):
                return False
        elif key in ("properties", "additionalProperties", "propertyNames"):
            if t is dict:
                r = _object(s, key, v, root)
                if r is not True:
                    return r
        elif key == "oneOf":
            results = [_check(sub, v, root) for sub in arg]
            if None in results:
                return None
            if results.count(True) != 1:
                return False
        elif key == "$ref":
            if type(arg) is not str or not arg.startswith("#/$defs/") or "/" in arg[8:] or "~" in arg:
                return None
            r = _check(root["$defs"][arg[8:]], v, root)
            if r is not True:
                return r
        else:
            return None
    return True


def _object(s: dict[str, Any], key: str, v: dict[str, Any], root: Any) -> bool | None:
    props = s.get("properties", {})
    if key == "properties":
        for name, sub in props.items():
            if name in v:
                r = _check(sub, v[name], root)
                if r is not True:
                    return r
    elif key == "additionalProperties":
        if "patternProperties" in s:
            return None
        for name, x in v.items():
            if name not in props:
                r = _check(s["additionalProperties"], x, root) if s["additionalProperties"] is not False else False
                if r is not True:
                    return r
    else:
        for name in v:
            r = _check(s["propertyNames"], name, root)
            if r is not True:
                return r
    return True

"""A fast JSON Schema check that vouches for valid recipes and generator options.

``import jsonschema`` costs ~75 ms, a sixth of a build's start-up, for documents that are almost
always valid. ``surely_valid`` decides the common case exactly for the keywords opgen's schemas
use; anything else (an unknown keyword, a type it does not model, a document it finds invalid)
answers False, and the caller asks jsonschema, which also words the error. It never accepts what
jsonschema rejects (tests/test_generate_schema_check.py fuzzes both against each other).

One deliberate difference from JSON Schema: an ``integer`` is an int, never a float such as ``2.0``
(JSON Schema counts 2.0 as an integer; opgen's code then fails on ``range(2.0)``). ``validator``
gives jsonschema with that rule, and the fast check follows it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

_ANNOTATIONS = frozenset({"$schema", "$id", "$defs", "title", "description", "default", "examples", "$comment"})


def validator(schema: Any) -> Any:
    """A Draft 2020-12 jsonschema validator whose ``integer`` excludes floats (2.0 is not an integer)."""
    import jsonschema

    base = jsonschema.Draft202012Validator
    checker = base.TYPE_CHECKER.redefine(
        "integer", lambda _, v: isinstance(v, int) and not isinstance(v, bool))
    return jsonschema.validators.extend(base, type_checker=checker)(schema)


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
        return t is int  # not 2.0: see the module docstring
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
        rule = _RULES.get(key)
        if rule is None:  # a keyword this check does not model: ask jsonschema
            return None
        r = rule(s, key, arg, v, t, root)
        if r is not True:
            return r
    return True


# One function per keyword: True (this keyword holds, go on), False (invalid) or None (ask jsonschema).
# Each gets (schema, keyword, its argument, value, type(value), root schema).
Rule = Callable[[dict[str, Any], str, Any, Any, type, Any], "bool | None"]


def _type(s: dict[str, Any], key: str, arg: Any, v: Any, t: type, root: Any) -> bool | None:
    names = arg if type(arg) is list else [arg]
    found = [_is_type(v, n) for n in names]
    if None in found:
        return None
    return any(found)


def _enum(s: dict[str, Any], key: str, arg: Any, v: Any, t: type, root: Any) -> bool | None:
    options = arg if key == "enum" else [arg]
    if t in (list, dict) and all(isinstance(o, _PLAIN) for o in options):
        return False  # an array or object never equals a string or null
    same = [_same(v, o) for o in options]
    if True not in same:
        return None if None in same else False
    return True


def _pattern(s: dict[str, Any], key: str, arg: Any, v: Any, t: type, root: Any) -> bool | None:
    return not (t is str and not re.search(arg, v))


def _bound(s: dict[str, Any], key: str, arg: Any, v: Any, t: type, root: Any) -> bool | None:
    if t in (int, float):
        return not ((v < arg) if key == "minimum" else (v > arg))
    return True


def _size(s: dict[str, Any], key: str, arg: Any, v: Any, t: type, root: Any) -> bool | None:
    if (key == "minLength" and t is str) or (key in ("minItems", "maxItems") and t is list) or \
            (key == "minProperties" and t is dict):
        n = len(v)
        return not ((n > arg) if key == "maxItems" else (n < arg))
    return True


def _unique(s: dict[str, Any], key: str, arg: Any, v: Any, t: type, root: Any) -> bool | None:
    if arg and t is list:
        if not all(type(x) is str for x in v):
            return None
        return len(set(v)) == len(v)
    return True


def _items(s: dict[str, Any], key: str, arg: Any, v: Any, t: type, root: Any) -> bool | None:
    if t is list:
        for x in v:
            r = _check(arg, x, root)
            if r is not True:
                return r
    return True


def _required(s: dict[str, Any], key: str, arg: Any, v: Any, t: type, root: Any) -> bool | None:
    return not (t is dict and any(k not in v for k in arg))


def _properties(s: dict[str, Any], key: str, arg: Any, v: Any, t: type, root: Any) -> bool | None:
    return _object(s, key, v, root) if t is dict else True


def _one_of(s: dict[str, Any], key: str, arg: Any, v: Any, t: type, root: Any) -> bool | None:
    results = [_check(sub, v, root) for sub in arg]
    if None in results:
        return None
    return results.count(True) == 1


def _ref(s: dict[str, Any], key: str, arg: Any, v: Any, t: type, root: Any) -> bool | None:
    if type(arg) is not str or not arg.startswith("#/$defs/") or "/" in arg[8:] or "~" in arg:
        return None
    return _check(root["$defs"][arg[8:]], v, root)


_RULES: dict[str, Rule] = {
    "type": _type, "enum": _enum, "const": _enum, "pattern": _pattern,
    "minimum": _bound, "maximum": _bound,
    "minLength": _size, "minItems": _size, "maxItems": _size, "minProperties": _size,
    "uniqueItems": _unique, "items": _items, "required": _required,
    "properties": _properties, "additionalProperties": _properties, "propertyNames": _properties,
    "oneOf": _one_of, "$ref": _ref,
}


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

"""Fifty varied JSON schemas for the structured-output tests: nested objects, arrays, enums,
integer and number ranges, required and optional fields, with a request text for each. Strings
and arrays are bounded so that a small model's answers stay short."""

from __future__ import annotations

_NAME = {"type": "string", "minLength": 1, "maxLength": 24}
_COLOR = {"enum": ["red", "green", "blue", "yellow"]}
_TOPICS = ["a person", "a city", "a book", "a car", "a recipe", "a planet", "a song",
           "a company", "a movie", "a dog"]


def _shape(i: int) -> dict:
    lo, hi = (i * 7) % 50, (i * 7) % 50 + 10 + i
    k = i % 10
    if k == 0:       # flat object, everything required
        return {"type": "object", "properties": {"name": _NAME, "age": {
            "type": "integer", "minimum": lo, "maximum": hi}}, "required": ["name", "age"],
            "additionalProperties": False}
    if k == 1:       # an enum and a boolean
        return {"type": "object", "properties": {"color": _COLOR, "ok": {"type": "boolean"}},
                "required": ["color", "ok"], "additionalProperties": False}
    if k == 2:       # a bounded array of enums
        return {"type": "object", "properties": {"colors": {
            "type": "array", "items": _COLOR, "minItems": 1, "maxItems": 3}},
            "required": ["colors"], "additionalProperties": False}
    if k == 3:       # a nested object
        return {"type": "object", "properties": {"title": _NAME, "author": {
            "type": "object", "properties": {"name": _NAME, "born": {
                "type": "integer", "minimum": 1000 + lo, "maximum": 2000 + hi}},
            "required": ["name", "born"], "additionalProperties": False}},
            "required": ["title", "author"], "additionalProperties": False}
    if k == 4:       # a number range
        return {"type": "object", "properties": {"score": {
            "type": "number", "minimum": -lo, "maximum": hi}, "label": _NAME},
            "required": ["score", "label"], "additionalProperties": False}
    if k == 5:       # an array of objects
        return {"type": "object", "properties": {"items": {"type": "array", "maxItems": 2,
                "items": {"type": "object", "properties": {"name": _NAME, "qty": {
                    "type": "integer", "minimum": 1, "maximum": 9}},
                    "required": ["name", "qty"], "additionalProperties": False}}},
                "required": ["items"], "additionalProperties": False}
    if k == 6:       # optional fields beside a required one
        return {"type": "object", "properties": {"id": {"type": "integer", "minimum": 0,
                                                        "maximum": 999},
                                                 "nick": _NAME, "rank": _COLOR},
                "required": ["id"], "additionalProperties": False}
    if k == 7:       # a top-level array
        return {"type": "array", "items": {"type": "integer", "minimum": lo, "maximum": hi},
                "minItems": 1, "maxItems": 4}
    if k == 8:       # an enum of mixed constants and a nullable field
        return {"type": "object", "properties": {"size": {"enum": ["S", "M", "L", 1, 2]},
                                                 "note": {"type": ["string", "null"],
                                                          "maxLength": 20}},
                "required": ["size", "note"], "additionalProperties": False}
    return {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {
        "type": "object", "properties": {"c": {"type": "integer", "minimum": lo,
                                               "maximum": hi}, "d": _COLOR},
        "required": ["c", "d"], "additionalProperties": False}},
        "required": ["b"], "additionalProperties": False}},
        "required": ["a"], "additionalProperties": False}


def schemas(n: int = 50) -> list[tuple[str, dict]]:
    """(request text, schema) pairs."""
    return [(f"Describe {_TOPICS[(i // 10 + i) % len(_TOPICS)]} as JSON.", _shape(i))
            for i in range(n)]

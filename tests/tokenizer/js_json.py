"""JSON text exactly as JavaScript's JSON.stringify writes it, so that the
Python scripts here write the same bytes the former node scripts did:
compact separators, non-ASCII characters unescaped, and object keys that are
array indices ("0", "17", ...) first in ascending numeric order, the other
keys after them in insertion order (ECMAScript's property order; it shows in
the vocabularies of tokenizer.json files). Floats are not supported: no
output here has any.
"""

import json

_MAX_INDEX = 2**32 - 2  # ECMAScript's largest array index


def _is_index(key):
    return key.isdigit() and key.isascii() and str(int(key)) == key and int(key) <= _MAX_INDEX


def _js_order(value):
    if isinstance(value, dict):
        keys = list(value)
        ordered = sorted((k for k in keys if _is_index(k)), key=int)
        ordered += [k for k in keys if not _is_index(k)]
        return {k: _js_order(value[k]) for k in ordered}
    if isinstance(value, list):
        return [_js_order(v) for v in value]
    if isinstance(value, float):
        raise TypeError('js_json: floats are not supported')
    return value


def dumps(value):
    """JSON.stringify(value) for dicts, lists, str, int, bool and None."""
    return json.dumps(_js_order(value), ensure_ascii=False, separators=(',', ':'))

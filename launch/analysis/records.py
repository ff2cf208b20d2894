"""Machine-readable records (``results.json``, ``perf.json``) in a form that is still JSON but one line
per record: each top-level key on a line, and a list under it one element a line. Indented JSON made
the committed reports' records most of the repository's lines (11,255 lines for one perf.json)."""
from __future__ import annotations

import json


def records_json(obj) -> str:
    if not isinstance(obj, dict):
        return json.dumps(obj, default=str) + "\n"
    parts = []
    for key, value in obj.items():
        if isinstance(value, list) and value:
            inner = ",\n  ".join(json.dumps(x, default=str) for x in value)
            parts.append(f"{json.dumps(key)}: [\n  {inner}]")
        else:
            parts.append(f"{json.dumps(key)}: {json.dumps(value, default=str)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"

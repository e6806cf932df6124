"""How deeply JSON nests, checked before anything parses or serialises it.

Python's ``json`` parser and pydantic's serialiser recurse once per level: 30,000 ``[`` make the
parser raise ``RecursionError``, and metadata 300 levels deep parses but cannot be served again.
So metadata nests at most :data:`MAX_DEPTH` levels, checked on the way in and on the way out.
"""

from __future__ import annotations

import re
from typing import Any

MAX_DEPTH = 32  # levels of objects and arrays in a question's metadata (the object itself is level 1)
MAX_FILE_DEPTH = MAX_DEPTH + 1  # levels of a JSON file dupq reads (a model's, a collection's): as a request body

# A JSON string (skipped whole: brackets inside it do not nest) or one bracket.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def json_depth(text: str | bytes, limit: int | None = None) -> int:
    """How many levels of objects and arrays ``text`` nests (0 for a scalar), without parsing it.

    With ``limit``, the scan stops as soon as the depth passes it (and answers ``limit + 1``), so a hostile body costs
    no more than its first ``limit`` brackets. Text that is not JSON gets a number too; the parser refuses it later.
    """
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    depth = deepest = 0
    for token in _TOKEN.finditer(data):
        bracket = token.group()
        if bracket in (b"[", b"{"):
            depth += 1
            if depth > deepest:
                deepest = depth
                if limit is not None and deepest > limit:
                    return deepest
        elif bracket in (b"]", b"}"):
            depth -= 1
    return deepest


def nesting(value: Any, limit: int | None = None) -> int:
    """How many levels of dicts and lists (or tuples) ``value`` nests, walked without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if limit is not None and deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest

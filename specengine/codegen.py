"""The one helper through which generated Python source becomes a function.

Every generated program is registered in `linecache`, so tracebacks and `inspect` show its source.
"""

from __future__ import annotations

import itertools
import linecache
from typing import Any, Callable

_counter = itertools.count()


def exec_source(source: str, name: str, globals_: dict[str, Any]) -> Callable:
    """Compile `source`, which defines a function called `name`, and return that function.

    Args:
        source: Python source text of a module defining `name`.
        name: the function to return.
        globals_: the module globals the source runs with (copied).

    Returns:
        The function object; its code's filename is a `<specengine-...>` entry in `linecache`.
    """
    filename = f"<specengine-{name}-{next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace = dict(globals_)
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]

"""Which code is library code: the standard library's own files (not site-packages under it), and the packages
specengine itself runs while tracing. Their module globals are not guarded as the user's."""

from __future__ import annotations

import importlib.util
import os
import sysconfig

_STDLIB = tuple({os.path.abspath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib")})
SITE = tuple({os.path.abspath(sysconfig.get_paths()[k]) + os.sep for k in ("purelib", "platlib")})


def _package_dirs(*names: str) -> tuple[str, ...]:
    out = []
    for name in names:
        spec = importlib.util.find_spec(name)
        out += [os.path.abspath(d) + os.sep for d in (spec.submodule_search_locations or ())] if spec else []
    return tuple(out)


_ENGINE_DEPENDENCIES = _package_dirs("z3")  # what specengine itself runs while tracing (the decider's z3 queries)


def is_library(filename: str) -> bool:
    """The standard library's own files (their module globals are not guarded), not site-packages under it, and
    the packages specengine itself runs."""
    if filename.startswith("<frozen") or filename.startswith(_ENGINE_DEPENDENCIES):
        return True
    return filename.startswith(_STDLIB) and not filename.startswith(SITE)

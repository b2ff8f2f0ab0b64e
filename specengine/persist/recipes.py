"""Recipes: how a prologue global is found again in another process (the table is recipe_base.py; its kinds are in
kinds.py, named.py and fingerprints.py, which this module loads). No live object is written to disk.

A recipe is JSON: a value with a type tag, a module, an object named by (module, qualname) plus a content
fingerprint checked at load, an engine sentinel, the compiled module (`self`) or one of its tables, the compiled
function's globals or closure, an imported module's `__dict__`, a part of a guard rebuilt in this process
(`guards.py`), a content fingerprint, or a place inside a fingerprinted object. A value with no recipe raises
`NoRecipe`: the entry is then not saved (never saved without it).
"""

from __future__ import annotations

from specengine.persist import fingerprints, kinds, lifted, named
from specengine.persist.fingerprints import portable_key
from specengine.persist.recipe_base import TABLE, Context, context, describe, resolve
from specengine.persist.values import (
    NoRecipe,
    decode_constant,
    decode_typed,
    decode_value,
    encode_constant,
    encode_typed,
    encode_value,
)

__all__ = ["TABLE", "Context", "NoRecipe", "context", "describe", "resolve", "portable_key", "decode_constant",
           "decode_typed", "decode_value", "encode_constant", "encode_typed", "encode_value", "KINDS"]  # fmt: skip

KINDS = (kinds, named, fingerprints, lifted)  # the modules whose kinds fill the table

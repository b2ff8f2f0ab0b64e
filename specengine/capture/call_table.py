"""Which C functions a program's own code may call while tracing, by a rule rather than a list of cases.

`capture/calls.py` sees each C call (`sys.setprofile`'s `c_call` events) that the program's own code makes while
it is traced (not the code of installed libraries: torch, the standard library, site-packages, whose C calls are
their own business, issue 22 part 7). After the calls it handles by name (clocks, random generators, guarded torch
getters, `ContextVar.get`, `next`), each is classified by where its function lives (`verdict`):

- **pure**: a function of a module of pure functions (`builtins`, `math`, `cmath`, `operator`, `functools`,
  `itertools`, `collections`, `heapq`, `bisect`, `re`, `struct`, `json`, `copy`, `string`, `unicodedata`, `zlib`,
  `binascii`, `hashlib`, `decimal`, `fractions`, `types`, `abc`, `enum`, `typing`, `weakref`, `numpy`), or a method
  of an object whose type lives in one of them (`str.join`, `list.append`, `dict.get`, `deque.append`,
  `float.fromhex`, `re.Pattern.match`, `ndarray.sum`), or one of `PURE_FUNCTIONS` (`sys.exc_info()`); a method that changes its object in place (`list.append`)
  is pure here, its change is checked by `capture/mutations.py`. Exceptions in `builtins`: `input` and
  `breakpoint` (refused);
- **torch's own** (its module or its object's type is torch's): torch ops are recorded by the torch-function mode
  and its settings are guarded by `capture/torch_settings.py`;
- **a getter whose value is guarded** (`GETTERS`): `os.getpid()`, `os.getcwd()`, `os.cpu_count()`,
  `sys.getrecursionlimit()`; the prologue calls the getter on every call and compares;
- **unknown**: everything else (`os.listdir`, `socket.gethostname`, `sys.getrefcount`, a C extension's function,
  `ContextVar.set`, a file's `read`). Where the program uses its result, the compile is refused, naming the call
  and the line (the result would be computed once, while tracing, and reused by every cached call); where the
  call is a statement whose result is dropped (`sys.stdout.flush()`, `gc.collect()`), it runs while tracing only,
  as other effects outside the Python heap do (docs/python-semantics.md).
"""

from __future__ import annotations

import dis
import functools
import os
import sys
import types
from typing import Any, Callable

PURE, TORCH, GETTER, UNKNOWN, REFUSED = "pure", "torch", "getter", "unknown", "refused"

PURE_MODULES = frozenset(
    ("builtins", "math", "cmath", "operator", "_operator", "functools", "_functools", "itertools", "collections",
     "_collections", "_collections_abc", "heapq", "_heapq", "bisect", "_bisect", "re", "_sre", "struct", "_struct",
     "json", "_json", "copy", "copyreg", "string", "_string", "unicodedata", "zlib", "binascii", "hashlib",
     "_hashlib", "_md5", "_sha1", "_sha256", "_sha512", "_sha3", "_blake2", "decimal", "_decimal", "fractions",
     "numbers", "types", "abc", "_abc", "enum", "typing", "_typing", "weakref", "_weakref", "_weakrefset",
     "dataclasses", "keyword", "array", "datetime", "_datetime", "pickle", "_pickle", "marshal", "codecs",
     "_codecs", "numpy")
)  # fmt: skip
# functions of modules of process state that read nothing that changes (`sys.exc_info()` in a handler)
PURE_FUNCTIONS = frozenset(("sys.exc_info", "sys.exception", "sys.getsizeof", "sys.intern", "sys.getdefaultencoding",
                            "sys.getfilesystemencoding", "sys._getframe"))  # fmt: skip
_REFUSED_BUILTINS = frozenset(("input", "breakpoint"))
# a getter's name -> (what the prologue calls, its text); read where the program's own code calls it
GETTERS: dict[Callable, str] = {os.getpid: "os.getpid()", os.getcwd: "os.getcwd()", os.cpu_count: "os.cpu_count()",
                                sys.getrecursionlimit: "sys.getrecursionlimit()"}  # fmt: skip


def _top(module: Any) -> str:
    return module.split(".", 1)[0] if isinstance(module, str) else ""


def home(fn: Any) -> tuple[str, str]:
    """(module, name) of a C function as the program sees it: a module's function by its module, a method by the
    class of its object's type that defines it (a classmethod by its class)."""
    owner = getattr(fn, "__self__", None)
    name = getattr(fn, "__name__", "?")
    if isinstance(owner, types.ModuleType):
        return owner.__name__, name
    cls = owner if isinstance(owner, type) else type(owner)
    if owner is not None:  # the class that defines the method (a dict subclass's `values` is dict's)
        cls = next((c for c in type.__getattribute__(cls, "__mro__") if name in c.__dict__), cls)
    module = getattr(fn, "__module__", None) if owner is None else cls.__module__
    return (module or "?"), (name if owner is None else f"{cls.__qualname__}.{name}")


def verdict(fn: Any) -> str:
    """PURE, TORCH, GETTER, UNKNOWN or REFUSED for a C function the program's own code calls (module docstring)."""
    if fn in GETTERS:
        return GETTER
    module, name = home(fn)
    top = _top(module)
    if top == "builtins" and name in _REFUSED_BUILTINS:
        return REFUSED
    if top in PURE_MODULES or module in PURE_MODULES or f"{module}.{name}" in PURE_FUNCTIONS:
        return PURE
    if top in ("torch", "functorch", "specengine"):
        return TORCH
    return UNKNOWN


def shown(fn: Any) -> str:
    """The call as an error names it: `os.listdir()`, `TextIOWrapper.read()`."""
    module, name = home(fn)
    module = {"posix": "os", "nt": "os", "_io": "io", "_socket": "socket"}.get(module, module)
    return f"{name}()" if "." in name else f"{module}.{name}()"


@functools.lru_cache(maxsize=4096)
def _dropped_at(code: types.CodeType) -> frozenset[int]:
    """Offsets of the calls in `code` whose result is dropped (a call instruction followed by POP_TOP; a `c_call`
    event's `f_lasti` is its call instruction)."""
    ins = list(dis.get_instructions(code))
    return frozenset(x.offset for x, y in zip(ins, ins[1:]) if x.opname.startswith("CALL") and y.opname == "POP_TOP")


def result_dropped(frame: types.FrameType) -> bool:
    """Whether the call being made at `frame`'s current instruction is a statement whose result is dropped."""
    return frame.f_lasti in _dropped_at(frame.f_code)

"""Recipe kinds of tensors closed over from outside (ops/outside.py: a tensor in a global dict, an attribute of a
plain object, a closure variable's list): the computation takes the tensor as an input and reads its current
values, so its values are not part of the entry. The tensor is found again in the new process at the place the
trace found it (a module's or the compiled function's globals, or a cell of its closure, then the same items and
attributes), and its metadata the trace assumed (class, shape, strides, dtype, device, requires_grad) is checked at
load; the prologue checks on every call that the place still holds it, with the same shape and dtype."""

from __future__ import annotations

import types
from typing import Any

import torch

from specengine.ops.outside import reach
from specengine.persist.recipe_base import Context, Kind, describe, register, resolve
from specengine.persist.signing import Rejected
from specengine.persist.values import NoRecipe, decode_value, encode_value


def _meta(t: torch.Tensor) -> list:
    return [type(t).__name__, list(t.shape), list(t.stride()), str(t.dtype), str(t.device), t.requires_grad]


@register
class Lifted(Kind):
    name, order = "lifted", 5

    def describe(self, v: Any, ctx: Context) -> list | None:
        if not isinstance(v, torch.Tensor):
            return None
        for _, t, (root, steps) in ctx.lifted:
            if t is v:
                try:
                    where = describe(root, ctx)
                except NoRecipe as e:
                    raise NoRecipe(f"a tensor closed over from outside, reached from {e}") from None
                return ["lifted", where, encode_value(steps), _meta(t)]
        return None

    def resolve(self, r: list, ctx: Context) -> Any:
        t = reach(resolve(r[1], ctx), decode_value(r[2]))
        if not isinstance(t, torch.Tensor) or type(t) not in (torch.Tensor, torch.nn.Parameter):
            raise Rejected(f"a tensor closed over from outside is no longer found at {r[2]}")
        if _meta(t) != r[3]:
            raise Rejected(f"a tensor closed over from outside changed: saved {r[3]}, found {_meta(t)}")
        return t


@register
class CellObject(Kind):
    """A cell of the compiled function's closure (the root of a tensor closed over from outside)."""

    name, order = "cellobj", 6

    def describe(self, v: Any, ctx: Context) -> list | None:
        if not isinstance(v, types.CellType):
            return None
        for i, c in enumerate(ctx.fn_closure or ()):
            if c is v:
                return ["cellobj", i]
        return None  # (a cell of another function's closure: no recipe)

    def resolve(self, r: list, ctx: Context) -> Any:
        if type(r[1]) is not int or not ctx.fn_closure:
            raise Rejected("the entry needs the compiled function's closure")
        return ctx.fn_closure[r[1]]

"""Outputs of their own type across processes: the output plan of an entry (`capture/objects.py`: a ModelOutput, a
dataclass, a dict subclass built from the computation's results) as data, and rebuilt from it. Each build function
of a plan carries `.recipe`, and so does each write-back step (a list, dict or object passed in and changed)."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

from specengine.capture.objects import OutputPlan, object_build, writeback_step
from specengine.persist.recipes import Context, NoRecipe, describe, resolve
from specengine.persist.signing import Rejected


def describe_plan(plan: Any, ctx: Context) -> dict:
    """The plan's output and write-back steps as JSON (NoRecipe: a part without a recipe)."""
    keys: dict[int, int] = {}
    steps = [_describe_step(step, ctx, keys) for step in plan.steps]
    return {"build": _describe(plan.build, ctx, keys), "objects": list(plan.objects), "steps": steps}


def _describe_step(step: Callable, ctx: Context, keys: dict[int, int]) -> list:
    """A write-back step (capture/objects.writeback_step): a list's elements, a dict's items or an object's
    attributes made what tracing left them as."""
    recipe = getattr(step, "recipe", None)
    if recipe is None:
        raise NoRecipe("a write-back step without a recipe (the function changes objects passed in)")
    kind, j, fns, removed = recipe
    if kind == "list":
        return [kind, j, [_describe(b, ctx, keys) for b in fns], []]
    key = (lambda k: describe(k, ctx)) if kind == "dict" else (lambda k: k)
    return [kind, j, [[key(k), _describe(b, ctx, keys)] for k, b in fns], [key(k) for k in removed]]


def rebuild_steps(recipes: list, ctx: Context) -> list[Callable]:
    """The write-back steps the recipes describe."""
    out = []
    for kind, j, fns, removed in recipes:
        if kind not in ("list", "dict", "attrs") or type(j) is not int:
            raise Rejected(f"unknown write-back step {kind!r}")
        if kind == "list":
            out.append(writeback_step(kind, j, [rebuild(b, ctx) for b in fns], []))
            continue
        key = (lambda k: resolve(k, ctx)) if kind == "dict" else _attr_name
        out.append(writeback_step(kind, j, [(key(k), rebuild(b, ctx)) for k, b in fns], [key(k) for k in removed]))
    return out


def _attr_name(k: Any) -> str:
    if type(k) is not str:
        raise Rejected("an attribute name that is not a string")
    return k


def _describe(build: Callable, ctx: Context, keys: dict[int, int]) -> list:
    recipe = getattr(build, "recipe", None)
    if recipe is None:
        raise NoRecipe("a part of the output without a recipe")
    kind, *parts = recipe
    if kind in ("leaf", "object"):
        return [kind, parts[0]]
    if kind == "constant":
        return [kind, describe(parts[0], ctx)]
    if kind == "slice":
        return [kind, [_describe(b, ctx, keys) for b in parts[0]]]
    if kind == "node":
        node_type, context, fns, is_size = parts
        return [kind, describe(node_type, ctx), describe(context, ctx), [_describe(b, ctx, keys) for b in fns], is_size]
    if kind == "new":
        key, cls, state, items, elements = parts
        memo = keys.setdefault(key, len(keys))
        return [kind, memo, describe(cls, ctx), [[a, _describe(b, ctx, keys)] for a, b in state],
                None if items is None else [[describe(k, ctx), _describe(b, ctx, keys)] for k, b in items],
                None if elements is None else [_describe(b, ctx, keys) for b in elements]]  # fmt: skip
    raise NoRecipe(f"an output part of kind {kind}")


def rebuild(recipe: list, ctx: Context) -> Callable:
    """The build function a recipe describes: (computed leaves, caller's objects, per-call memo) -> value."""
    kind = recipe[0]
    if kind == "leaf":
        k = int(recipe[1])
        return lambda r, o, m: r[k]
    if kind == "object":
        j = int(recipe[1])
        return lambda r, o, m: o[j]
    if kind == "constant":
        v = resolve(recipe[1], ctx)
        return lambda r, o, m: v
    if kind == "slice":
        parts = [rebuild(p, ctx) for p in recipe[1]]
        return lambda r, o, m: slice(*(f(r, o, m) for f in parts))
    if kind == "node":
        return _node(recipe, ctx)
    if kind == "new":
        return _new(recipe, ctx)
    raise Rejected(f"unknown output part {kind!r}")


def _node(recipe: list, ctx: Context) -> Callable:
    node_type, context = resolve(recipe[1], ctx), resolve(recipe[2], ctx)
    node = pytree.SUPPORTED_NODES.get(node_type)
    if node is None:
        raise Rejected(f"{node_type!r} is not a registered pytree node in this process")
    fns = [rebuild(p, ctx) for p in recipe[3]]
    unflatten = (lambda xs, _: torch.Size(xs)) if recipe[4] else node.unflatten_fn
    return lambda r, o, m: unflatten([f(r, o, m) for f in fns], context)


def _new(recipe: list, ctx: Context) -> Callable:
    _, key, cls_recipe, state_r, items_r, elements_r = recipe
    cls = resolve(cls_recipe, ctx)
    if not isinstance(cls, type):
        raise Rejected("an output object's class is not a class")
    state = [(a, rebuild(b, ctx)) for a, b in state_r]
    items = None if items_r is None else [(resolve(k, ctx), rebuild(b, ctx)) for k, b in items_r]
    elements = None if elements_r is None else [rebuild(b, ctx) for b in elements_r]
    return object_build(cls, ("persist", key), state, items, elements)


def wrap(computation: Callable, build: Callable, steps: list[Callable], n_params: int) -> Callable:
    """The entry's function: run the computation, write back, then build the caller's output (`OutputPlan.wrap`)."""
    return OutputPlan([], build, steps, []).wrap(computation, n_params)

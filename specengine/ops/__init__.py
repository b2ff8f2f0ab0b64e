"""Ops: primitives (`prims`), torch-level ops decomposed into them (`ltorch`), the generic path through torch's meta
kernels. May import `ir`, `marks`, `constraints` and the leaves; never `prologue`, `executors`, `capture` or above."""

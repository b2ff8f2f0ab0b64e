"""Ops: primitives (`prims`) and torch-level ops decomposed into them (`ltorch`)."""

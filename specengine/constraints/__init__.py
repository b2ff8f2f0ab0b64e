"""Symbolic integers and floats, decisions, constraints with provenance, the z3 solver. May import only the leaves
(`errors`, `config`, `logs`, `provenance`, `codegen`, `patching`)."""

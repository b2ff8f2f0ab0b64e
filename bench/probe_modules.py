"""Modules and torch state, probed as a new user writes them: about 140 small PyTorch programs.

Each program (bench/probe_modules_progs/m_*.py) builds a model or function, compiles it with `dynamic=True` and with
the default, and runs a call sequence chosen so that an entry compiled for one call is offered an input or a state
it must not serve: train()/eval() between calls, dropout and batch norm, buffers updated in forward, parameters
replaced, loaded or frozen, optimizer loops, hooks added and removed, containers of modules changed, config
attributes changed, tied weights, nested compiles, grad modes and autocast, random ops and seeds, default dtype,
inputs mutated and aliased, structured inputs and outputs, custom autograd Functions, checkpointing and nn layers.
Every output, gradient and module state is compared with eager (bench/probe_modules_progs/mod_harness.py). A
benchmark, not a test: it prints a table and asserts nothing.

    python bench/probe_modules.py [substring ...]     # only programs whose name contains one of them
"""

from __future__ import annotations

import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "probe_modules_progs"))

import m_autograd  # noqa: E402, F401
import m_hooks  # noqa: E402, F401
import m_patterns  # noqa: E402, F401
import m_state  # noqa: E402, F401
import m_training  # noqa: E402, F401
import mod_harness  # noqa: E402

if __name__ == "__main__":
    warnings.simplefilter("ignore")
    mod_harness.main(sys.argv[1:])

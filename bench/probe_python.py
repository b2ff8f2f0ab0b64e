"""Ordinary Python on traced values, probed as a new user writes it: about 200 small PyTorch programs.

Each program (bench/probe_python_progs/p_*.py) is compiled with `dynamic=True` and with the default, and called
over a sequence of inputs chosen so that an entry compiled for one call is offered an input it must not serve
(sizes 0, 1, 2 and larger, dtype changes, float and int arguments including nan, inf, -0.0 and negatives). Every
call is compared with eager; the table gives each program's class (see bench/probe_python_progs/harness.py),
compiles and hits per mode, and the first differences. A benchmark, not a test: it asserts nothing.

    python bench/probe_python.py [substring ...]     # only programs whose name contains one of them
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "probe_python_progs"))

import harness  # noqa: E402
import p_containers  # noqa: E402, F401
import p_control  # noqa: E402, F401
import p_floats  # noqa: E402, F401
import p_numbers  # noqa: E402, F401
import p_outputs  # noqa: E402, F401
import p_sequences  # noqa: E402, F401
import p_signatures  # noqa: E402, F401
import p_state  # noqa: E402, F401
import p_stdlib  # noqa: E402, F401

if __name__ == "__main__":
    harness.main(sys.argv)

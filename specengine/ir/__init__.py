"""The IR: proxies, symbolic numbers, the SymNode, symbols, traces, printing, passes, the recording context.

May import `constraints` and the leaves (`errors`, `config`, `logs`, `provenance`, `codegen`, `patching`); never `ops`
or above.
"""

from specengine.ir import numbers  # noqa: F401 - installs the number protocols on NumberProxy

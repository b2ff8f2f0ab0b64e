"""Logging under the `specengine` logger, with topics switched on like TORCH_LOGS.

`SPECENGINE_LOGS=guards,recompiles,traces,solver` (or `all`) enables topics at import;
`specengine.set_logs("guards,recompiles")` does the same at run time. Each topic is a child logger,
e.g. `specengine.guards`, so standard logging configuration also works.
"""

from __future__ import annotations

import logging
import os
import sys

TOPICS = ("guards", "recompiles", "traces", "solver", "cache")
root = logging.getLogger("specengine")
_handler: logging.Handler | None = None


def topic(name: str) -> logging.Logger:
    """The logger of one topic."""
    assert name in TOPICS, name
    return root.getChild(name)


def set_logs(spec: str | None) -> None:
    """Enable the topics named in `spec` (comma-separated, or "all") at INFO; others go back to WARNING.

    Args:
        spec: e.g. "guards,recompiles"; None or "" disables every topic.
    """
    global _handler
    wanted = {t.strip() for t in (spec or "").split(",") if t.strip()}
    if "all" in wanted:
        wanted = set(TOPICS)
    unknown = wanted - set(TOPICS)
    if unknown:
        raise ValueError(f"unknown specengine log topics {sorted(unknown)}; known: {', '.join(TOPICS)}")
    for name in TOPICS:
        topic(name).setLevel(logging.INFO if name in wanted else logging.WARNING)
    if wanted and _handler is None:
        _handler = logging.StreamHandler(sys.stderr)
        _handler.setFormatter(logging.Formatter("[specengine.%(topic)s] %(message)s"))
        _handler.addFilter(_add_topic)
        root.addHandler(_handler)


def _add_topic(record: logging.LogRecord) -> bool:
    record.topic = record.name.rsplit(".", 1)[-1]
    return True


set_logs(os.environ.get("SPECENGINE_LOGS"))

"""Process-group timeouts extended by what a compile takes, so that a rank compiling never times out another.

No compile waits on another rank (there is no compile-time collective), but a rank that compiles reaches its next
collective later than a rank that served the same call from an entry: the waiting rank's collective (DDP's bucketed
all-reduce in the backward, FSDP2's all-gather) then lasts as long as the other rank's compile, and fails when that is
longer than the process group's timeout (a gloo or NCCL timeout measured from the moment the collective was issued).
The waiting rank cannot know that another rank compiles, so, as Inductor does on a cache hit
(`add_ephemeral_timeout_increase_for_distributed`: a rank that skipped a compile waits longer for the ranks that did
not), every rank bounds the others' compiles by its own: after each compile, every process group's timeout becomes
its timeout before specengine changed it plus `config.distributed_timeout_factor` times the longest compile this
process has done. The ranks of one job compile the same programs, so their compiles take about as long. The timeouts
stay extended (a collective issued before the compile kept its deadline; one issued after gets the new one): a hang is
detected that much later, seconds against timeouts of minutes.
"""

from __future__ import annotations

import datetime
import sys
import threading
import weakref

from specengine.config import config
from specengine.logs import topic

log = topic("recompiles")
_lock = threading.Lock()
_base: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # group -> its timeout before any extension
_longest = [0.0]  # the longest compile of this process, seconds


def after_compile(seconds: float) -> None:
    """Extend every process group's timeout by `distributed_timeout_factor` times the longest compile so far."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    with _lock:
        _longest[0] = max(_longest[0], seconds)
        extra = datetime.timedelta(seconds=config.distributed_timeout_factor * _longest[0])
        c10d = dist.distributed_c10d
        for group in list(c10d._world.pg_map):
            current = _timeout(group)
            if current is None:
                continue  # a backend without a settable timeout (torch warns for it): left as it is
            base = _base.setdefault(group, current)
            if current != base + extra:
                c10d._set_pg_timeout(base + extra, group)
                log.info("process group %s: timeout %s (%s + %.1f x the longest compile, %.2f s)",
                         getattr(group, "group_name", "?"), base + extra, base,
                         config.distributed_timeout_factor, _longest[0])  # fmt: skip


def _timeout(group: object) -> datetime.timedelta | None:
    """The timeout that the group's gloo or NCCL backend gives the collectives it is asked for now."""
    for device in getattr(group, "_device_types", ()):
        try:
            backend = group._get_backend(device)
            timeout = backend.options._timeout
        except (AttributeError, RuntimeError):
            continue
        if isinstance(timeout, datetime.timedelta):
            return timeout
    return None

"""Torch-level ops (`ltorch.*` in traces): each is a decomposition into prims, registered with the torch callables
it replaces. This module is their namespace; the ops live in the `ltorch_*.py` files, by kind.

The torch executor runs these directly with their torch implementation; the decomposition records the
op's symbolic shape rules and decisions, and serves executors that only run prims.
"""

import sys

from specengine.ir.trace import print_module
from specengine.ops.ltorch_arith import *  # noqa: F403
from specengine.ops.ltorch_checks import *  # noqa: F403
from specengine.ops.ltorch_creation import *  # noqa: F403
from specengine.ops.ltorch_data_dependent import *  # noqa: F403
from specengine.ops.ltorch_elementwise import *  # noqa: F403
from specengine.ops.ltorch_inplace import *  # noqa: F403 - in-place ops are `ltorch.*` too
from specengine.ops.ltorch_joins import *  # noqa: F403
from specengine.ops.ltorch_linalg import *  # noqa: F403
from specengine.ops.ltorch_literals import *  # noqa: F403
from specengine.ops.ltorch_losses import *  # noqa: F403
from specengine.ops.ltorch_nn import *  # noqa: F403
from specengine.ops.ltorch_reductions import *  # noqa: F403
from specengine.ops.ltorch_strides import *  # noqa: F403
from specengine.ops.ltorch_views import *  # noqa: F403 - shape ops are `ltorch.*` too

print_module("ltorch", sys.modules[__name__])

"""Fresh-process init: CPU time of `import specengine` beyond torch, and the seed's first compile.

    python bench/init_time.py [N] [--collect]

Run with .pyc files present (`PYTHONDONTWRITEBYTECODE` unset), else every import recompiles the sources.

torch leaves a generation-2 garbage collection due after its import (about 0.14 s here); whichever code
allocates next pays it. `--collect` runs it right after `import torch`, so it is charged to torch.
"""

import json
import subprocess
import sys

CODE = r"""
import gc, json, sys, time
import torch
if "--collect" in sys.argv: gc.collect()
t0 = time.process_time()
import specengine
t1 = time.process_time()
f = specengine.compile(lambda a: a * 2 if a.shape[0] > 2 else a * 3, dynamic=True)
f(torch.randn(4))
t2 = time.process_time()
print(json.dumps([t1 - t0, t2 - t1]))
"""
n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
extra = ["--collect"] if "--collect" in sys.argv else []
res = [
    json.loads(subprocess.check_output([sys.executable, "-c", CODE, *extra]).decode().strip().splitlines()[-1])
    for _ in range(n)
]
i, c = min(r[0] for r in res), min(r[1] for r in res)
gc_note = ", gc after torch" if extra else ""
print(f"import specengine {i:.3f} s, first compile {c:.3f} s, sum {i + c:.3f} s (best of {n}, CPU time{gc_note})")

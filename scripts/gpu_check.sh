#!/usr/bin/env bash
# GPU check for the nvFuser executor on one CUDA GPU (the H200 device: Python 3.12, torch 2.11+cu130, no
# network). Ends within 8 minutes. Prepare wheels/ here first (bash scripts/repack_nvfuser_wheel.sh), then on
# the device, from the repository root, with wheels/ carried:
#     bash scripts/gpu_check.sh
# It installs nvFuser (unpacking the repacked wheel into torch's site-packages and linking the device's
# libnvrtc in under the name the wheel was built with) and z3-solver (into /tmp/site), preloads the c10 shim
# if nvfuser_direct needs it, runs the CUDA tests (marked `cuda`) and prints bench/nvfuser.py's table.
# Logs go to $OUT (when set) as gpu_tests.log and bench.log.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
deadline=$((start + 470))
py=python3
out=${OUT:-/tmp}
export PYTHONUNBUFFERED=1

$py -c "import torch; assert torch.cuda.is_available(), 'no CUDA'; print('torch', torch.__version__, torch.cuda.get_device_name())" || exit 1
site=$($py -c "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))")
mkdir -p /tmp/site
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"

if ! $py -c "import z3" 2>/dev/null; then
  z3pkg=$(ls wheels/z3_solver-*.tar.xz 2>/dev/null | head -n 1)
  [[ -n "$z3pkg" ]] && tar -xJf "$z3pkg" -C /tmp/site
fi
$py -c "import z3; print('z3', z3.get_version_string())" || { echo "z3 unavailable: carry wheels/"; exit 1; }

if ! $py -c "import torch, nvfuser_direct" 2>/dev/null; then
  nvfpkg=$(ls wheels/nvfuser_cu130_torch210-*.tar.xz 2>/dev/null | head -n 1)
  [[ -n "$nvfpkg" ]] && tar -xJf "$nvfpkg" -C "$site"
  # the wheel's libnvrtc was dropped: link the device's (torch's nvidia-cuda-nvrtc, else the CUDA toolkit's)
  nvrtc=$(find "$site/nvidia" /usr/local/cuda*/lib64 /usr/lib/x86_64-linux-gnu -name 'libnvrtc.so.13*' 2>/dev/null |
    grep -v builtins | sort | head -n 1)
  libs="$site/nvfuser_cu130_torch210.libs"
  if [[ -n "$nvrtc" && -d "$libs" ]]; then
    ln -sf "$nvrtc" "$libs/libnvrtc-a49e67e8.so.13.0.88"
    for b in "$(dirname "$nvrtc")"/libnvrtc-builtins*.so*; do [[ -e "$b" ]] && ln -sf "$b" "$libs/"; done
    export LD_LIBRARY_PATH="$(dirname "$nvrtc")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "libnvrtc: $nvrtc"
  else
    echo "no libnvrtc.so.13 found (nvidia-cuda-nvrtc or the CUDA toolkit)"
  fi
fi
# nvFuser's torch-2.10 build uses c10::MessageLogger(const char*, int, int, bool), which torch 2.11 lacks
if ! $py -c "import torch, nvfuser_direct" 2>/tmp/nvf_import.err; then
  tail -n 2 /tmp/nvf_import.err
  shim=/tmp/libnvfuser_shim.so
  g++ -shared -fPIC -O2 -Wl,-z,lazy -o "$shim" scripts/nvfuser_shim.cpp 2>/dev/null || cp wheels/libnvfuser_shim.so "$shim"
  export LD_PRELOAD="$shim${LD_PRELOAD:+:$LD_PRELOAD}"
  echo "preloading $shim"
fi
$py -c "import torch, nvfuser_direct; print('nvfuser_direct', nvfuser_direct.__version__ if hasattr(nvfuser_direct, '__version__') else '?')" ||
  { echo "nvfuser_direct unavailable: the CUDA tests would skip"; exit 1; }
$py -c "from specengine.executors.nvfuser import nvfuser_available as a; assert a(); print('nvFuser executor: on')" || exit 1
echo "setup: $((SECONDS - start)) s"

# The CUDA tests: the op database through nvFuser against eager, the GPT and block sweeps, sweeps from size 1.
opts=$($py -c "import xdist" 2>/dev/null && echo "-n 8")
opts="$opts $($py -c "import pytest_timeout" 2>/dev/null && echo "--timeout=240")"
# shellcheck disable=SC2086
timeout $((deadline - SECONDS - 150)) $py -m pytest -q -m cuda tests/test_nvfuser.py -rfEs -p no:cacheprovider $opts 2>&1 | tee "$out/gpu_tests.log" | tail -n 60
echo "tests: $((SECONDS - start)) s"

timeout $((deadline - SECONDS)) $py bench/nvfuser.py 2>&1 | tee "$out/bench.log"
echo "total: $((SECONDS - start)) s"

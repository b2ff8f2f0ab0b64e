#!/usr/bin/env bash
# Repack what scripts/gpu_check.sh installs on the GPU machine (no network there; at most 64 MiB travel with
# the working tree) into wheels/ (git-ignored; never commit it). Run here, where PyPI is reachable:
#     bash scripts/repack_nvfuser_wheel.sh
# It writes
#   wheels/nvfuser_cu130_torch210-0.2.36.dev20260301-cp312.tar.xz  the wheel's files without the bundled
#       libnvrtc (about 44 MB compressed; the device's torch ships libnvrtc.so.13, which gpu_check.sh links in
#       under the bundled name), its RECORD line dropped; xz -9. Unpacked into torch's site-packages it is the
#       installed wheel.
#   wheels/z3_solver-<version>-py3.tar.xz  z3-solver's wheel files (the device image has no z3), xz -9.
#   wheels/libnvfuser_shim.so  scripts/nvfuser_shim.cpp built here (gpu_check.sh rebuilds it if g++ is there).
set -euo pipefail
cd "$(dirname "$0")/.."
NVF=nvfuser-cu130-torch210==0.2.36.dev20260301
Z3=z3-solver==${Z3_VERSION:-$(python -c 'import z3; print(z3.get_version_string())')}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p wheels
grep -qx 'wheels/' .gitignore || echo 'wheels/' >>.gitignore

python -m pip download -q --no-deps --python-version 3.12 --only-binary=:all: "$NVF" -d "$tmp/dl"
python -m pip download -q --no-deps --python-version 3.12 --implementation cp --only-binary=:all: \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 "$Z3" -d "$tmp/dl"

repack() {  # repack WHEEL OUT.tar.xz [glob of files to drop]
  local wheel=$1 out=$2 drop=${3:-}
  rm -rf "$tmp/tree" && mkdir "$tmp/tree"
  (cd "$tmp/tree" && python -m zipfile -e "$wheel" .)
  if [[ -n "$drop" ]]; then
    # shellcheck disable=SC2086
    (cd "$tmp/tree" && rm -v $drop)
    # RECORD lists every file of the wheel: keep the lines of files still there
    python - "$tmp/tree" <<'PY'
import csv, glob, os, sys
root = sys.argv[1]
for record in glob.glob(os.path.join(root, "*.dist-info", "RECORD")):
    with open(record, newline="") as f:
        rows = [r for r in csv.reader(f) if r and os.path.exists(os.path.join(root, r[0]))]
    with open(record, "w", newline="") as f:
        csv.writer(f).writerows(rows)
PY
  fi
  tar -C "$tmp/tree" -cf - . | xz -9 -T0 >"$out"
}
repack "$(ls "$tmp"/dl/nvfuser_cu130_torch210-*.whl)" wheels/nvfuser_cu130_torch210-0.2.36.dev20260301-cp312.tar.xz \
  'nvfuser_cu130_torch210.libs/libnvrtc-*'
repack "$(ls "$tmp"/dl/z3_solver-*.whl)" "wheels/z3_solver-${Z3#*==}-py3.tar.xz"

g++ -shared -fPIC -O2 -Wl,-z,lazy -o wheels/libnvfuser_shim.so scripts/nvfuser_shim.cpp  # libc10 resolves it at first call
ls -l wheels
du -cb wheels/* | tail -n 1 | awk '{ printf "wheels/: %.1f MiB (the working tree that travels must stay under 64 MiB)\n", $1 / 1048576 }'

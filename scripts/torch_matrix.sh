#!/usr/bin/env bash
# Run the test suite once per tested torch release, each in its own virtual environment.
#
#     bash scripts/torch_matrix.sh [RELEASE ...] [-- PYTEST_ARGS ...]
#
# RELEASE defaults to the tested range's releases (2.13.0 2.14.1 2.15.0, the pin in pyproject.toml).
# Virtual environments go to $TORCH_MATRIX_VENVS (default ~/.cache/specengine/torch-matrix/torch-RELEASE) and
# are reused while they hold that release. torch comes from, in this order: a wheel already on this machine
# (pip's find-links; --no-index, so nothing is downloaded), the CPU index (download.pytorch.org/whl/cpu), then
# pip's configured indexes (PyPI: a CUDA build of several GB). Every pip call in a venv is constrained to torch==RELEASE, which also lifts
# a machine-wide cap such as /etc/xdg/pip's (pip reads PIP_CONSTRAINT after its config files). The tests run
# against this checkout (PYTHONPATH), so one venv serves every worktree. The closing table shows, per release,
# the build used (torch.__version__, CUDA or CPU) and pytest's summary line; the exit status is 0 only when
# every release passed.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

releases=()
while [[ $# -gt 0 && $1 != "--" ]]; do releases+=("$1"); shift; done
[[ ${1:-} == "--" ]] && shift
pytest_args=("$@")
[[ ${#releases[@]} -eq 0 ]] && releases=(2.13.0 2.14.1 2.15.0)
[[ ${#pytest_args[@]} -eq 0 ]] && pytest_args=(-p no:cacheprovider)
root=${TORCH_MATRIX_VENVS:-$HOME/.cache/specengine/torch-matrix}
logs=$(mktemp -d)

has_release() {  # venv, release
  [[ -x $1/bin/python ]] &&
    "$1/bin/python" -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$2')" 2>/dev/null
}

make_venv() {  # venv, release; prints nothing on success
  local venv=$1 rel=$2
  rm -rf "$venv"
  python3 -m venv "$venv" || return 1
  printf 'torch==%s\n' "$rel" > "$venv/constraints.txt"
  export PIP_CONSTRAINT=$venv/constraints.txt
  local pip=("$venv/bin/python" -m pip)
  "${pip[@]}" install --quiet --upgrade pip || return 1
  if "${pip[@]}" install --no-index --no-deps "torch==$rel" 2>/dev/null; then
    echo "torch $rel: local wheel"
  elif env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null "${pip[@]}" install --no-deps "torch==$rel" \
    --index-url https://download.pytorch.org/whl/cpu 2>/dev/null; then  # (no config: only that index)
    echo "torch $rel: CPU index"
  else
    echo "torch $rel: not on this machine nor on the CPU index; from the package index (PyPI: a CUDA build)"
  fi
  # torch's own dependencies, then the project's test dependencies (the constraint keeps torch at $rel);
  # the project itself is not installed: the tests import this checkout through PYTHONPATH.
  "${pip[@]}" install "torch==$rel" || return 1
  local deps
  deps=$("$venv/bin/python" - <<'EOF'
import tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
print("\n".join(d for d in p["dependencies"] + p["optional-dependencies"]["test"] if not d.startswith("torch")))
EOF
  ) || return 1
  mapfile -t deps <<< "$deps"
  "${pip[@]}" install "${deps[@]}" || return 1
  unset PIP_CONSTRAINT
}

declare -A result build
status=0
for rel in "${releases[@]}"; do
  venv=$root/torch-$rel
  echo "=== torch $rel ($venv)"
  if ! has_release "$venv" "$rel"; then
    if ! make_venv "$venv" "$rel" || ! has_release "$venv" "$rel"; then
      result[$rel]="venv failed"; build[$rel]="-"; status=1; continue
    fi
  fi
  build[$rel]=$("$venv/bin/python" -c \
    "import torch; print(torch.__version__, '(CUDA %s build)' % torch.version.cuda if torch.version.cuda else '(CPU build)')")
  echo "torch ${build[$rel]}"
  log=$logs/torch-$rel.log
  (cd "$repo" && PYTHONPATH=$repo "$venv/bin/python" -m pytest "${pytest_args[@]}") 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  result[$rel]=$(grep -E '^(=+ )?[0-9]+ (passed|failed|error|skipped|deselected|tests? collected)' "$log" | tail -n 1 |
    sed -E 's/^=+ //; s/ =+$//')
  [[ -z ${result[$rel]} ]] && result[$rel]="pytest exit $rc"
  [[ $rc -ne 0 ]] && status=1
done

echo
echo "| torch release | build | pytest |"
echo "|---|---|---|"
for rel in "${releases[@]}"; do echo "| $rel | ${build[$rel]} | ${result[$rel]} |"; done
echo "(logs: $logs)"
exit $status

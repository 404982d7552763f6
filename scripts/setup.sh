#!/usr/bin/env bash
# Create (or refresh) the project's virtual environment in .venv and install robot_rl with everything
# it needs: the ROS 2 (Kilted) wheels from PyPI, MuJoCo, torch, the robot model packages and the dev
# tools. Idempotent and fast when nothing changed: a stamp keyed on the dependency files skips pip.
#
#   scripts/setup.sh            # set up .venv (PYTHON=python3.12 scripts/setup.sh to pick the interpreter)
#   ROBOT_RL_VENV=/path scripts/setup.sh
#
# torch: when the venv has no torch yet, requirements/torch-cpu.txt pins the CPU wheel (2.13.0) so pip
# never pulls a multi-GB CUDA build. A venv that already has a torch (e.g. your CUDA build) keeps it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${ROBOT_RL_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
STAMP="$VENV/.robot_rl_setup_stamp"

"$PY" - <<'PYCHECK'
import sys
if sys.version_info < (3, 10):
    sys.exit(f"robot_rl needs Python >= 3.10 (ROS 2 Humble/Jazzy/Kilted); this is {sys.version.split()[0]}."
             " Run with PYTHON=/path/to/python3.11 scripts/setup.sh")
PYCHECK

# The stamp covers every file that decides what gets installed, plus the interpreter's version.
want="$(cat "$ROOT/setup.py" "$ROOT/requirements/"*.txt "$ROOT/scripts/setup.sh" | sha256sum | cut -c1-16)"
if [[ -x "$VENV/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
  exit 0
fi

if [[ ! -x "$VENV/bin/python" ]]; then
  echo "[setup] creating virtual environment $VENV"
  "$PY" -m venv "$VENV"
fi
pip=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -q --upgrade pip setuptools wheel

constraint=()
if ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
  constraint=(-c "$ROOT/requirements/torch-cpu.txt")
fi
echo "[setup] installing robot_rl[ros,dev,gpu,fleet,hardware,vla] into $VENV (first run: ~2 min, ~2 GB)"
"${pip[@]}" install -q "${constraint[@]}" -e "$ROOT[ros,dev,gpu,fleet,hardware,vla]"
echo "$want" > "$STAMP"
echo "[setup] done: $VENV"

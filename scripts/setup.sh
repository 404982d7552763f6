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
if sys.version_info < (3, 11):
    sys.exit(f"robot_rl needs Python >= 3.11 (MuJoCo 4; ROS 2 Jazzy/Kilted); this is {sys.version.split()[0]}."
             " Run with PYTHON=/path/to/python3.11 scripts/setup.sh")
PYCHECK

# The stamp covers every file that decides what gets installed.
want="$(cat "$ROOT/pyproject.toml" "$ROOT/setup.py" "$ROOT/requirements/"*.txt "$ROOT/scripts/setup.sh" \
  "$ROOT/scripts/build_tf2_msgs.sh" | sha256sum | cut -c1-16)"
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
echo "[setup] installing robot_rl[ros,dev,gpu,fleet,hardware,vendor,vla,viz] into $VENV (first run: ~2 min, ~2 GB)"
"${pip[@]}" install -q "${constraint[@]}" -e "$ROOT[ros,dev,gpu,fleet,hardware,vendor,vla,viz]"

# PyPI has no tf2_msgs wheel: build tf2_msgs/TFMessage (for /tf and /tf_static) into the venv from its
# one-line definition with the ROS wheels' own rosidl generators (~15 s; needs cmake and a C/C++ compiler).
"$ROOT/scripts/build_tf2_msgs.sh" "$VENV"

# Bitcraze ships cflib's example scripts only in its source distribution: extract those of the installed
# version next to the venv, where tests/test_vendor_cflib_examples.py runs them as written (skipped without).
cflib_version="$("$VENV/bin/python" -c "import importlib.metadata as m; print(m.version('cflib'))")"
vendor="$VENV/share/robot_rl_vendor"
if [[ ! -d "$vendor/cflib-$cflib_version/examples" ]]; then
  mkdir -p "$vendor"
  if "${pip[@]}" download -q --no-deps --no-binary :all: "cflib==$cflib_version" -d "$vendor" \
      && tar xzf "$vendor/cflib-$cflib_version.tar.gz" -C "$vendor" "cflib-$cflib_version/examples"; then
    echo "[setup] cflib $cflib_version examples in $vendor"
  else
    echo "[setup] warning: could not fetch cflib's examples; their test will be skipped" >&2
  fi
fi
echo "$want" > "$STAMP"
echo "[setup] done: $VENV"

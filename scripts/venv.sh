# Sourced by the setup scripts (not run): the venv at $1 (created when missing, pip brought up to
# date), with VENV (its absolute path), REPO (this repository) and PIP (the venv's pip) set.
# PYTHON chooses the interpreter a new venv is made from (default python3).
VENV="$(realpath -m "$1")"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip)
"${PIP[@]}" install --quiet --upgrade pip

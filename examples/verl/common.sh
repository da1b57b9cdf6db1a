# Sourced by the run_*.sh scripts beside it: the environment they share and the DRY_RUN switch.
# Reads MODEL (required), DATA (default data/verl), PYTHON (default python3), OPGEN_LIMIT; sets
# `here` (this folder) and `limit` (the --limit argument of opgen build, or nothing).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${MODEL:?set MODEL to a local model folder}"
DATA="${DATA:-data/verl}"
PYTHON="${PYTHON:-python3}"
limit=()
[[ -n "${OPGEN_LIMIT:-}" ]] && limit=(--limit "$OPGEN_LIMIT")

# Runs the command given, or with DRY_RUN=1 prints it (one argument per line) and exits.
run_or_print() {
    if [[ "${DRY_RUN:-0}" == 1 ]]; then
        printf '%s\n' "$@"
        exit 0
    fi
    exec "$@"
}

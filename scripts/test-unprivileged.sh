#!/usr/bin/env bash
# The hostile corpus and the sandbox's attack tests as an unprivileged user (nobody, uid 65534),
# next to the isolation level reached as root and as nobody. Run as root (CI and these machines
# are): it copies the checkout and builds a virtual environment nobody can read (the main one
# lives under /root, closed to nobody), from a Python nobody can run (/usr/bin/python3 by
# default), then runs the tests under `setpriv --reuid 65534 --regid 65534 --clear-groups`.
#
#   bash scripts/test-unprivileged.sh [PYTEST ARGS...]
#
# Without arguments: the sandbox and grading attack tests, slow ones included (a few minutes).
# Exit status: pytest's. Nothing is left behind (the temporary folder is removed).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "test-unprivileged.sh: run as root (it drops to nobody with setpriv)" >&2
  exit 2
fi
command -v setpriv >/dev/null || { echo "test-unprivileged.sh: setpriv (util-linux) is missing" >&2; exit 2; }
python=${OPGEN_NOBODY_PYTHON:-/usr/bin/python3}
[ -x "$python" ] || { echo "test-unprivileged.sh: no $python (set OPGEN_NOBODY_PYTHON)" >&2; exit 2; }

tmp=$(mktemp -d /tmp/opgen-nobody-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
mkdir "$tmp/src"
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$tmp/src"
"$python" -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q --disable-pip-version-check -e "$tmp/src" "pytest>=7.4,<10" "hypothesis>=6.80,<7"
chown -R 65534:65534 "$tmp/src"
chmod -R a+rX "$tmp/venv"

level='from opgen.score.sandbox import Sandbox
with Sandbox(workers=1, allow_weak_sandbox=True) as b:
    print(b.level, "+".join(b.mechanisms))'
echo "== isolation as root:   $(cd / && "$tmp/venv/bin/python" -W ignore -c "$level")"
as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups env -i HOME=/tmp PATH=/usr/bin:/bin LANG=C.UTF-8)
echo "== isolation as nobody: $(cd / && "${as_nobody[@]}" "$tmp/venv/bin/python" -W ignore -c "$level")"

if [ $# -eq 0 ]; then
  set -- tests/test_hostile.py tests/test_grade_hostile.py tests/test_sealed_grading.py tests/test_sandbox_zygote.py \
         tests/test_sandbox_jail.py tests/test_sandbox.py tests/test_sandbox_protocol.py tests/test_batch.py
fi
echo "== as nobody: pytest $*"
cd "$tmp/src"
"${as_nobody[@]}" "$tmp/venv/bin/python" -m pytest -q -p no:cacheprovider --basetemp="$tmp/src/.pytest-tmp" "$@"

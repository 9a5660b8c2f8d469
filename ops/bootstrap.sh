# Sourced by ops/run and ops/test. `bootstrap [EXTRAS]` creates .venv in the repo root and installs
# Flotilla into it, re-installing only when pyproject.toml changed since the last install.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"

bootstrap() {
    local extras="${1:-}"
    local python="${PYTHON:-python3}"
    local stamp="$VENV/.flotilla-installed${extras:+-$extras}"
    if [ ! -x "$VENV/bin/python" ]; then
        echo "creating virtual environment in $VENV" >&2
        "$python" -m venv "$VENV"
    fi
    if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ]; then
        echo "installing Flotilla${extras:+ with [$extras]} into $VENV (the first run takes a minute)" >&2
        "$VENV/bin/python" -m pip install --quiet --upgrade pip >&2
        "$VENV/bin/python" -m pip install --quiet -e "$ROOT${extras:+[$extras]}" >&2
        touch "$stamp"
    fi
}

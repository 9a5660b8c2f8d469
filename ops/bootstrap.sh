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
        # With extras is without them too: `ops/run` after `ops/test` (as tests/integration/test_ops_run.py runs it,
        # beside other test processes) reinstalls nothing under their feet.
        [ -z "$extras" ] || touch "$VENV/.flotilla-installed"
    fi
}

# Node.js and the npm packages of tests/integration/node (a job-states consumer written as another
# team would), installed into that directory's node_modules (git-ignored): Debian's nodejs and npm
# when the machine has no node, then `npm ci` whenever package-lock.json changed since the last one.
node_packages() {
    local dir="$ROOT/tests/integration/node"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
        echo "installing nodejs and npm with apt-get (for tests/integration/node)" >&2
        $sudo apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends nodejs npm >&2
    fi
    if [ ! -f "$dir/node_modules/.package-lock.json" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
        echo "installing the npm packages of tests/integration/node" >&2
        npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error >&2
    fi
}

# checkov, the static security check of ops/kubernetes and ops/Dockerfile (tests/ops/test_manifests.py), in
# an environment of its own under .venv/tools/checkov: installed beside Flotilla, its pins would downgrade
# packages the project uses (packaging to 23.2, cachetools to 5.5, platformdirs, python-dateutil).
CHECKOV_VERSION="3.3.30"

checkov_tool() {
    local python="${PYTHON:-python3}"
    local tool="$VENV/tools/checkov"
    local stamp="$tool/.installed-$CHECKOV_VERSION"
    if [ ! -f "$stamp" ]; then
        echo "installing checkov $CHECKOV_VERSION into $tool (an environment of its own; the first run takes a minute)" >&2
        rm -rf "$tool"
        "$python" -m venv "$tool"
        "$tool/bin/python" -m pip install --quiet --upgrade pip >&2
        "$tool/bin/python" -m pip install --quiet "checkov==$CHECKOV_VERSION" >&2
        touch "$stamp"
    fi
}

#!/usr/bin/env bash
# Builds the TypeScript client and runs its tests against the real daemon.
# Exits 0 with "SKIP: node not found" when there is no node (make test stays green
# on machines without Node); needs Node >= 20 otherwise.
set -euo pipefail
here="${BASH_SOURCE[0]%/*}"
[ "$here" = "${BASH_SOURCE[0]}" ] && here=.
cd "$here"

if ! command -v node >/dev/null 2>&1; then
    echo "SKIP: node not found (TypeScript client tests not run)"
    exit 0
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
    echo "SKIP: node $(node --version) is older than 20 (TypeScript client tests not run)"
    exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
    echo "SKIP: npm not found (TypeScript client tests not run)"
    exit 0
fi

if [ ! -x node_modules/.bin/tsc ]; then
    echo "== clients/typescript: npm ci"
    npm ci --no-audit --no-fund --loglevel=error || npm install --no-audit --no-fund --loglevel=error
fi
echo "== clients/typescript: tsc"
./node_modules/.bin/tsc -p .
echo "== clients/typescript: node --test (daemon: ${PYTHON:-.venv/bin/python} -m ramakv_daemon)"
node --test --test-reporter=spec test/

#!/usr/bin/env bash
# Make sure a PostgreSQL server is installed for the tests that start one (tests/support/
# postgres.py). Installs the Debian package when pg_ctl is missing and apt-get is there;
# never fails the build: where it cannot install, those tests skip and say why.
set -u
have_pg() {
  command -v pg_ctl >/dev/null 2>&1 && return 0
  compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null 2>&1
}
if have_pg; then exit 0; fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "NOTE: PostgreSQL is not installed and apt-get is missing: PostgreSQL tests will skip"
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "NOTE: PostgreSQL is not installed and we cannot become root: PostgreSQL tests will skip"
    exit 0
  fi
fi
echo "Installing PostgreSQL (apt-get install -y postgresql) for the store tests..."
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q postgresql >/dev/null \
  || echo "NOTE: apt-get install postgresql failed: PostgreSQL tests will skip"
# The package starts a cluster of its own; the tests start theirs and need none running.
exit 0

#!/usr/bin/env bash
# ram-a-kv integration test (L1: the daemon's event contract, over real HTTP).
#
# Two modes:
#   tests/test_integration.sh          run the L1 contract tests against a real daemon
#                                      (noop backend, temp SQLite file, free loopback port)
#   tests/test_integration.sh xiaoo    print the step-by-step guide for wiring an agent host
#
# Environment (all optional):
#   PYTHON       interpreter used to start the daemon as `$PYTHON -m ramakv_daemon`
#                (default .venv/bin/python, relative to the repo root)
#   TEST_DIR     where config, SQLite file, debug files and logs go
#                (default: a fresh mktemp dir, removed afterwards when every test passed)
#   DAEMON_URL   use an already running daemon instead of starting one; the tests that need
#                to own the daemon (restart, kill -9, debug files, SQLite rows) are skipped
#   KEEP_DAEMON  1 = leave the daemon we started running after the tests (default 0)
#   RAMAKV_NO_JQ 1 = do not use jq even if installed (exercises the python3 JSON fallback)
#
# Needs bash, curl and either jq or python3. Prints `N passed, M failed` last and exits
# non-zero when anything failed.

set -u -o pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"

# ─────────────────────────────────────────────────────────────
# agent host integration guide
# ─────────────────────────────────────────────────────────────
if [ "${1:-}" = "xiaoo" ]; then
    cat <<'EOF'
=== wiring an agent host (xiaoO or any host using the ram-a-kv SDK) to ram-a-kv ===

1) Start the daemon (test mode: noop backend, nothing else needed)
   mkdir -p /tmp/ram-a-kv-test
   cat > /tmp/ram-a-kv-test/config.toml <<'CONF'
   listen_addr = "127.0.0.1:6998"
   noop_backend = true
   debug_enabled = true
   debug_dir = "/tmp/ram-a-kv-test/debug"
   session_store_path = "/tmp/ram-a-kv-test/sessions.db"
   turn_start_prefetch = true
   trace_events = true
   CONF

   cd <ram-a-kv repo>
   .venv/bin/ram-a-kv --config /tmp/ram-a-kv-test/config.toml
   #   (same thing: .venv/bin/python -m ramakv_daemon --config /tmp/ram-a-kv-test/config.toml
   #    or RAM_A_KV_CONFIG=/tmp/ram-a-kv-test/config.toml .venv/bin/ram-a-kv)

   Check it answers:
   curl -s -X POST http://127.0.0.1:6998/event -H 'Content-Type: application/json' \
        -d '{"type":"health"}'
   -> {"ok": true, "type": "health", "data": {"status": "running", "sessions_count": 0}}

2) Point the SDK at the daemon. The address lives in the SDK's own config file,
   NOT in the host's config:
   mkdir -p ~/.config/ram-a-kv          # ($XDG_CONFIG_HOME/ram-a-kv when that is set)
   cat > ~/.config/ram-a-kv/config.toml <<'CONF'
   daemon_url = "http://127.0.0.1:6998"
   # auth_token = "..."                 # only when the daemon listens off loopback
   CONF

   Python hosts:      import ramakv_sdk as kv; kv.init_from_config()
   Node/TS hosts:     clients/typescript (initFromConfig(), same file)
   No code at all:    run ramakv-proxy in front of vLLM and point the host at the proxy.

3) Switch the host's KV cache integration on. For xiaoO, in ~/.config/xiaoo/config.toml:
   [llm]
   provider = "local"
   model = "glm4.7"
   api_base = "http://localhost:8080/v1"
   kvcache_enabled = true            # send turn_start / turn_end / session events
   kvcache_debug_enabled = true      # also send debug_context (messages + timing)

   The host has no daemon-url field of its own; the SDK config from step 2 is the only
   place the address is read from.

4) Restart the host. The SDK is initialised once per process (later inits are ignored
   with a warning), so a changed SDK config is only picked up by a fresh process.

5) Chat one turn and watch the daemon's stdout. You should see:
     ram-a-kv daemon starting  addr=127.0.0.1:6998 noop=true ...
     ram-a-kv event received   type=turn_start session_id=<id>
     ram-a-kv event completed  type=turn_start ...
     ram-a-kv event received   type=turn_end session_id=<id>
     ram-a-kv event completed  type=turn_end ...
   A line `ram-a-kv event failed` carries the reason (e.g. missing required field).
   With trace_events = true each event is followed by every session's chunk_hashes
   and the global refcounts.

6) Check the session's chunk map:
   curl -s -X POST http://127.0.0.1:6998/event -H 'Content-Type: application/json' \
        -d '{"type":"session_map","session_id":"<id>"}'
   chunk_hashes stays empty until the engine returns kv_transfer_params.chunk_hashes
   (vLLM + LMCache with the ascend_ext connector); a turn_end whose chunk_hashes is
   missing or null is refused (ok=false, "missing required field
   'kv_transfer_params.chunk_hashes'") and changes nothing; [] empties the map.

7) Debug files (debug_enabled = true in the daemon, kvcache_debug_enabled in the host):
   ls /tmp/ram-a-kv-test/debug/
   -> kvcache_debug_<session_id>_<turn>.json, written only for a turn_end whose
      debug_context carries messages or timing.

8) Production switch (daemon config):
   noop_backend = false
   lmcache_url = "http://localhost:6999"
   session_store_path = "/var/lib/ram-a-kv/sessions.db"
   debug_enabled = false
EOF
    exit 0
fi

# ─────────────────────────────────────────────────────────────
# tools
# ─────────────────────────────────────────────────────────────
if ! command -v curl >/dev/null 2>&1; then
    echo "ERROR: curl is required"; exit 1
fi
HOST_PY=""   # for the JSON fallback, the free port and SQLite reads: python3, python, or the venv's
for cand in python3 python "${PYTHON:-$REPO_ROOT/.venv/bin/python}"; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import json, sqlite3, socket' 2>/dev/null; then
        HOST_PY="$cand"; break
    fi
done
USE_JQ=0
if [ "${RAMAKV_NO_JQ:-0}" != "1" ] && command -v jq >/dev/null 2>&1; then USE_JQ=1; fi
if [ "$USE_JQ" = "0" ] && [ -z "$HOST_PY" ]; then
    echo "ERROR: need jq or python3 to read JSON"; exit 1
fi

# A tiny jq subset for machines without jq: `.a.b.c`, optionally piped through
# `keys`, `length` or `tostring`. Strings print raw, everything else as compact JSON,
# a missing key is null; unparseable input prints INVALID_JSON.
read -r -d '' PY_JQ <<'PYEOF'
import json, sys
expr = sys.argv[1]
try:
    v = json.loads(sys.stdin.read())
except Exception:
    print("INVALID_JSON"); sys.exit(0)
parts = [p.strip() for p in expr.split("|")]
path = parts[0]
for key in [k for k in path.split(".") if k]:
    v = v.get(key) if isinstance(v, dict) else None
for op in parts[1:]:
    if op == "keys":
        v = sorted(v.keys()) if isinstance(v, dict) else list(range(len(v)))
    elif op == "length":
        v = 0 if v is None else len(v)
    elif op == "tostring":
        v = v if isinstance(v, str) else json.dumps(v, separators=(",", ":"), ensure_ascii=False)
    else:
        print("UNSUPPORTED:" + op); sys.exit(0)
print(v if isinstance(v, str) else json.dumps(v, separators=(",", ":"), ensure_ascii=False))
PYEOF

# jget <json> <path>  ->  the value, jq -r -c style
jget() {
    local json="$1" path="$2" out
    if [ "$USE_JQ" = "1" ]; then
        out=$(printf '%s' "$json" | jq -r -c "$path" 2>/dev/null) || out="INVALID_JSON"
    else
        out=$(printf '%s' "$json" | "$HOST_PY" -c "$PY_JQ" "$path" 2>/dev/null) || out="INVALID_JSON"
    fi
    printf '%s' "$out"
}

PASS=0
FAIL=0
SKIP=0
pass() { echo "  [PASS] $1"; PASS=$((PASS + 1)); }
fail() { echo "  [FAIL] $1"; shift; for l in "$@"; do echo "        $l"; done; FAIL=$((FAIL + 1)); }
skip() { echo "  [SKIP] $1"; SKIP=$((SKIP + 1)); }

# post <json-payload>  ->  sets RESP (body) and HTTP (status code)
RESP=""
HTTP=""
post() {
    local out
    out=$(curl -sS --max-time 10 -X POST "$DAEMON_URL/event" \
        -H "Content-Type: application/json" --data-binary "$1" \
        -w $'\n%{http_code}' 2>&1) || true
    HTTP="${out##*$'\n'}"
    RESP="${out%$'\n'*}"
}

# check <name> <actual> <expected>
check() {
    if [ "$2" = "$3" ]; then pass "$1"; else fail "$1" "expected: $3" "got:      $2" "response: $RESP"; fi
}

# field <name> <jq-path> <expected>    (on the last RESP)
field() { check "$1" "$(jget "$RESP" "$2")" "$3"; }

# ok <name> <payload> <expected sorted data keys, e.g. ["a","b"]>
# Asserts HTTP 200, ok=true, the echoed type, exactly these data fields and no `error`.
ok() {
    local name="$1" payload="$2" keys="$3" want_type got
    post "$payload"
    want_type=$(jget "$payload" '.type')
    got="http=$HTTP ok=$(jget "$RESP" '.ok') type=$(jget "$RESP" '.type') keys=$(jget "$RESP" '.data | keys') body=$(jget "$RESP" '. | keys')"
    check "$name" "$got" "http=200 ok=true type=$want_type keys=$keys body=[\"data\",\"ok\",\"type\"]"
}

# err <name> <payload> <expected error text, or * for any non-empty text>
# Asserts ok=false, no `data`, and the error text.
err() {
    local name="$1" payload="$2" want="$3" got_ok got_err has_data
    post "$payload"
    got_ok=$(jget "$RESP" '.ok')
    got_err=$(jget "$RESP" '.error')
    has_data=$(jget "$RESP" '.data')
    if [ "$want" = "*" ]; then
        if [ "$got_ok" = "false" ] && [ -n "$got_err" ] && [ "$got_err" != "null" ] && [ "$has_data" = "null" ]; then
            pass "$name  (error: $got_err)"
        else
            fail "$name" "expected ok=false with an error text and no data" "response: $RESP"
        fi
    else
        check "$name" "ok=$got_ok data=$has_data error=$got_err" "ok=false data=null error=$want"
    fi
}

# has_item <name> <compact JSON list of strings> <item>
has_item() {
    if [[ "$2" == *"\"$3\""* ]]; then pass "$1"; else fail "$1" "list: $2"; fi
}

# map_is <session> <expected compact JSON list>
map_is() {
    post "{\"type\":\"session_map\",\"session_id\":\"$1\"}"
    check "session_map $1 = $2" "$(jget "$RESP" '.ok') $(jget "$RESP" '.data.session_id') $(jget "$RESP" '.data.chunk_hashes')" "true $1 $2"
}

# te <session> <json list of hashes>   (turn_end with chunk_hashes; sets RESP)
te() { post "{\"type\":\"turn_end\",\"session_id\":\"$1\",\"kv_transfer_params\":{\"chunk_hashes\":$2}}"; }

# ─────────────────────────────────────────────────────────────
# daemon life cycle
# ─────────────────────────────────────────────────────────────
OWN_DAEMON=1
[ -n "${DAEMON_URL:-}" ] && OWN_DAEMON=0
MADE_TEST_DIR=0
if [ -z "${TEST_DIR:-}" ]; then
    TEST_DIR="$(mktemp -d "${TMPDIR:-/tmp}/ram-a-kv-test.XXXXXX")"
    MADE_TEST_DIR=1
fi
mkdir -p "$TEST_DIR"
DB="$TEST_DIR/sessions.db"
DEBUG_DIR="$TEST_DIR/debug"
LOG="$TEST_DIR/daemon.log"
DAEMON_PID=""
PY="${PYTHON:-.venv/bin/python}"
case "$PY" in /*) ;; */*) PY="$REPO_ROOT/$PY" ;; esac   # relative paths are from the repo root

start_daemon() {
    ( cd "$REPO_ROOT" && exec "$PY" -m ramakv_daemon --config "$TEST_DIR/config.toml" ) \
        >>"$LOG" 2>&1 &
    DAEMON_PID=$!
    local i
    for i in $(seq 1 150); do   # up to ~15 s
        if ! kill -0 "$DAEMON_PID" 2>/dev/null; then
            echo "ERROR: daemon exited during start-up; log $LOG:"; tail -n 40 "$LOG"; return 1
        fi
        if curl -s --max-time 1 -X POST "$DAEMON_URL/event" -H 'Content-Type: application/json' \
            -d '{"type":"health"}' 2>/dev/null | grep -q '"running"'; then
            return 0
        fi
        sleep 0.1
    done
    echo "ERROR: daemon did not answer health within 15 s; log $LOG:"; tail -n 40 "$LOG"
    return 1
}

# stop_daemon [SIGNAL]  (default TERM; waits up to ~10 s, then KILL)
stop_daemon() {
    local sig="${1:-TERM}" i
    [ -z "$DAEMON_PID" ] && return 0
    kill "-$sig" "$DAEMON_PID" 2>/dev/null || true
    for i in $(seq 1 100); do
        kill -0 "$DAEMON_PID" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$DAEMON_PID" 2>/dev/null; then
        echo "        (daemon ignored SIG$sig for 10 s, killing)"
        kill -KILL "$DAEMON_PID" 2>/dev/null || true
    fi
    { wait "$DAEMON_PID"; } 2>/dev/null || true
    DAEMON_PID=""
}

restart_daemon() {
    echo "        --- restart daemon (SIG${1:-TERM}) ---"
    echo "=== restart after SIG${1:-TERM} ===" >>"$LOG"
    # (stderr muted: bash reports a child killed by a signal as "Killed" on stderr;
    #  our own messages go to stdout)
    if ! { stop_daemon "${1:-TERM}"; start_daemon; } 2>/dev/null; then
        fail "daemon restarts on the same SQLite file"
        finish
    fi
}

cleanup() {
    if [ -n "$DAEMON_PID" ]; then
        if [ "${KEEP_DAEMON:-0}" = "1" ]; then
            echo "KEEP_DAEMON=1: daemon pid=$DAEMON_PID still running at $DAEMON_URL (log $LOG)"
        else
            stop_daemon TERM
        fi
    fi
    if [ "$MADE_TEST_DIR" = "1" ] && [ "$FAIL" = "0" ] && [ "${KEEP_DAEMON:-0}" != "1" ]; then
        rm -rf "$TEST_DIR"
    fi
}
trap cleanup EXIT

finish() {
    echo ""
    echo "=============================================="
    echo "  L1 contract test: $PASS passed, $FAIL failed, $SKIP skipped"
    echo "=============================================="
    if [ "$FAIL" -gt 0 ]; then
        echo "daemon log: $LOG   (test dir kept: $TEST_DIR)"
        echo "$PASS passed, $FAIL failed"
        exit 1
    fi
    echo "agent host wiring guide: $0 xiaoo"
    echo "$PASS passed, $FAIL failed"
    exit 0
}

sqlite_q() {  # sqlite_q <sql>  -> rows joined by ',' (read-only, via python3's sqlite3)
    "${HOST_PY:-$PY}" - "$DB" "$1" <<'PYEOF'
import sqlite3, sys
con = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
print(",".join("|".join(str(c) for c in row) for row in con.execute(sys.argv[2])))
PYEOF
}

echo "=== set-up ==="
echo "json reader: $([ "$USE_JQ" = 1 ] && echo jq || echo "python3 fallback")"
echo "test dir:    $TEST_DIR"
if [ "$OWN_DAEMON" = "1" ]; then
    if ! command -v "$PY" >/dev/null 2>&1; then
        echo "ERROR: no interpreter at $PY (run 'make test' or set PYTHON)"; exit 1
    fi
    PORT=$("${HOST_PY:-$PY}" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    DAEMON_URL="http://127.0.0.1:$PORT"
    rm -rf "$DB" "$DB-wal" "$DB-shm" "$DEBUG_DIR" "$LOG"
    cat >"$TEST_DIR/config.toml" <<EOF
listen_addr = "127.0.0.1:$PORT"
noop_backend = true
debug_enabled = true
debug_dir = "$DEBUG_DIR"
session_store_path = "$DB"
turn_start_prefetch = true
trace_events = false
EOF
    echo "daemon:      $PY -m ramakv_daemon --config $TEST_DIR/config.toml  ($DAEMON_URL)"
    start_daemon || { FAIL=$((FAIL + 1)); finish; }
    echo "daemon pid=$DAEMON_PID"
else
    DAEMON_URL="${DAEMON_URL%/}"
    echo "daemon:      already running at $DAEMON_URL (restart, debug-file and SQLite checks skipped)"
fi
RUN="t$$-$RANDOM"   # session-id prefix, so a shared daemon's other sessions are never touched
s() { printf '%s-%s' "$RUN" "$1"; }

# ─────────────────────────────────────────────────────────────
echo ""
echo "=== L1.1 health ==="
ok "health" '{"type":"health"}' '["sessions_count","status"]'
field "health status=running" '.data.status' 'running'
if [ "$OWN_DAEMON" = "1" ]; then
    field "health sessions_count=0 on a fresh store" '.data.sessions_count' '0'
fi

# ─────────────────────────────────────────────────────────────
echo ""
echo "=== L1.2 list_events ==="
ok "list_events" '{"type":"list_events"}' '["admin_events","events"]'
LIST="$RESP"
field "list_events: data.events holds exactly the nine contract events" '.data.events | length' '9'
has_item "list_events: admin events apart (list_sessions)" \
    "$(jget "$LIST" '.data.admin_events | keys')" list_sessions
has_item "session_fork_end optional has fork_id" \
    "$(jget "$LIST" '.data.events.session_fork_end.optional')" fork_id
for ev in turn_start turn_end snapshot_restore session_map session_close session_suspend \
          session_fork session_fork_end health; do
    RESP="$LIST"
    field "list_events has $ev with description/optional/required" \
        ".data.events.$ev | keys" '["description","optional","required"]'
done
RESP="$LIST"
echo "        registered: $(jget "$LIST" '.data.events | keys')"
field "turn_start requires [session_id]" '.data.events.turn_start.required' '["session_id"]'
field "turn_end requires [session_id,kv_transfer_params]" '.data.events.turn_end.required' \
    '["session_id","kv_transfer_params"]'
has_item "turn_end optional has debug_context" "$(jget "$LIST" '.data.events.turn_end.optional')" debug_context
field "health requires nothing" '.data.events.health.required' '[]'
for ev in session_map session_close session_suspend session_fork session_fork_end snapshot_restore; do
    RESP="$LIST"
    field "$ev requires [session_id]" ".data.events.$ev.required" '["session_id"]'
done
has_item "snapshot_restore optional has source_session_id" \
    "$(jget "$LIST" '.data.events.snapshot_restore.optional')" source_session_id

# ─────────────────────────────────────────────────────────────
echo ""
echo "=== L1.3 turn_start / turn_end / session_map ==="
S1=$(s basic-s1)
ok "turn_start unknown session" "{\"type\":\"turn_start\",\"session_id\":\"$S1\"}" \
    '["prefetch_count","prefetch_sent"]'
field "turn_start unknown: prefetch_sent=false" '.data.prefetch_sent' 'false'
field "turn_start unknown: prefetch_count=0" '.data.prefetch_count' '0'
ok "turn_end with kv_transfer_params.chunk_hashes" \
    "{\"type\":\"turn_end\",\"session_id\":\"$S1\",\"kv_transfer_params\":{\"chunk_hashes\":[\"hash-a\",\"hash-b\",\"hash-c\"]}}" \
    '["debug_written","evicted_count","map_updated"]'
field "turn_end map_updated=true" '.data.map_updated' 'true'
field "turn_end evicted_count=0" '.data.evicted_count' '0'
field "turn_end without debug_context: debug_written=false" '.data.debug_written' 'false'
ok "session_map" "{\"type\":\"session_map\",\"session_id\":\"$S1\"}" '["chunk_hashes","session_id"]'
field "session_map session_id" '.data.session_id' "$S1"
field "session_map chunk_hashes in order" '.data.chunk_hashes' '["hash-a","hash-b","hash-c"]'
ok "turn_start known session" "{\"type\":\"turn_start\",\"session_id\":\"$S1\"}" \
    '["prefetch_count","prefetch_sent"]'
field "turn_start known: prefetch_sent=true" '.data.prefetch_sent' 'true'
field "turn_start known: prefetch_count=3" '.data.prefetch_count' '3'
# engine hashes are hex strings that may start with "-"
HX=$(s hex)
te "$HX" '["-1f2e3d","00ab","-0"]'
field "turn_end hashes starting with '-' accepted" '.ok' 'true'
map_is "$HX" '["-1f2e3d","00ab","-0"]'

# ─────────────────────────────────────────────────────────────
echo ""
echo "=== L1.4 refcount sharing (hash-a shared by s1 and s2) ==="
S2=$(s refcount-s2)
te "$S2" '["hash-a","hash-x"]'
field "s2 turn_end [hash-a,hash-x]: evicted_count=0" '.data.evicted_count' '0'
te "$S1" '["hash-b"]'
field "s1 turn_end -> [hash-b]: evicts hash-c only (hash-a held by s2)" '.data.evicted_count' '1'
te "$S1" '["hash-b"]'
field "s1 turn_end same map again: evicted_count=0" '.data.evicted_count' '0'
map_is "$S1" '["hash-b"]'
map_is "$S2" '["hash-a","hash-x"]'

# ─────────────────────────────────────────────────────────────
echo ""
echo "=== L1.5 session_fork / session_fork_end ==="
ok "session_fork s1" "{\"type\":\"session_fork\",\"session_id\":\"$S1\"}" '["fork_id","forked"]'
field "session_fork forked=true" '.data.forked' 'true'
FID=$(jget "$RESP" '.data.fork_id')
check "session_fork fork_id is a positive integer" "$([[ "$FID" =~ ^[1-9][0-9]*$ ]] && echo yes)" yes
te "$S1" '["hash-d"]'
field "turn_end after fork: hash-b held by the fork, evicted_count=0" '.data.evicted_count' '0'
ok "session_fork_end s1 by fork_id" \
    "{\"type\":\"session_fork_end\",\"session_id\":\"$S1\",\"fork_id\":$FID}" '["fork_end","fork_id"]'
field "session_fork_end fork_end=true" '.data.fork_end' 'true'
post "{\"type\":\"session_fork_end\",\"session_id\":\"$S1\",\"fork_id\":$FID}"
check "a retried fork_end of the same fork_id: ok, fork_end=false" \
    "$(jget "$RESP" '.ok') $(jget "$RESP" '.data.fork_end')" "true false"
err "session_fork_end with no open fork" "{\"type\":\"session_fork_end\",\"session_id\":\"$S1\"}" '*'
map_is "$S1" '["hash-d"]'
# fork_end releases the snapshot taken at fork time, not the current map
FP=$(s fork-parent)
te "$FP" '["fork-A"]'
post "{\"type\":\"session_fork\",\"session_id\":\"$FP\"}"; field "fork parent [fork-A]" '.data.forked' 'true'
te "$FP" '["fork-B"]'
field "parent -> [fork-B]: fork-A held by the fork, evicted_count=0" '.data.evicted_count' '0'
post "{\"type\":\"session_fork_end\",\"session_id\":\"$FP\"}"; field "fork_end parent" '.data.fork_end' 'true'
te "$FP" '["fork-C"]'
field "after fork_end fork-B still held once by the map: -> [fork-C] evicts 1" '.data.evicted_count' '1'
# nested forks: each fork pushes a snapshot, fork_end pops the newest
NF=$(s nested)
te "$NF" '["n1"]'
post "{\"type\":\"session_fork\",\"session_id\":\"$NF\"}"; field "nested: fork #1 over [n1]" '.data.forked' 'true'
te "$NF" '["n2"]'
post "{\"type\":\"session_fork\",\"session_id\":\"$NF\"}"; field "nested: fork #2 over [n2]" '.data.forked' 'true'
te "$NF" '["n3"]'
field "nested: -> [n3], n1 and n2 held by forks, evicted_count=0" '.data.evicted_count' '0'
post "{\"type\":\"session_fork_end\",\"session_id\":\"$NF\"}"; field "nested: fork_end #2" '.data.fork_end' 'true'
post "{\"type\":\"session_fork_end\",\"session_id\":\"$NF\"}"; field "nested: fork_end #1" '.data.fork_end' 'true'
err "nested: third fork_end has no open fork" "{\"type\":\"session_fork_end\",\"session_id\":\"$NF\"}" '*'
map_is "$NF" '["n3"]'
# parallel subagents end in any order: by id, the first to finish releases its own snapshot
PA=$(s parallel)
te "$PA" '["pa-1"]'
post "{\"type\":\"session_fork\",\"session_id\":\"$PA\"}"; F1=$(jget "$RESP" '.data.fork_id')
te "$PA" '["pa-2"]'
post "{\"type\":\"session_fork\",\"session_id\":\"$PA\"}"; F2=$(jget "$RESP" '.data.fork_id')
check "fork ids increase" "$([ "$F2" -gt "$F1" ] && echo yes)" yes
te "$PA" '["pa-3"]'
post "{\"type\":\"session_fork_end\",\"session_id\":\"$PA\",\"fork_id\":$F1}"
post "{\"type\":\"chunk_info\",\"chunk_hashes\":[\"pa-1\",\"pa-2\"]}"
check "fork_end of the first fork: pa-1 released, pa-2 still held by the second" \
    "$(jget "$RESP" '.data.chunks["pa-1"].refcount') $(jget "$RESP" '.data.chunks["pa-2"].refcount')" "0 1"
# the parent's close keeps its open forks held until their fork_end
post "{\"type\":\"session_close\",\"session_id\":\"$PA\"}"
post "{\"type\":\"chunk_info\",\"chunk_hashes\":[\"pa-2\"]}"
field "after the parent's close pa-2 is still held by its fork" '.data.chunks["pa-2"].refcount' '1'
post "{\"type\":\"session_fork_end\",\"session_id\":\"$PA\",\"fork_id\":$F2}"
field "fork_end by id after the parent's close" '.data.fork_end' 'true'
post "{\"type\":\"chunk_info\",\"chunk_hashes\":[\"pa-2\"]}"
field "then pa-2 is released" '.data.chunks["pa-2"].refcount' '0'

# ─────────────────────────────────────────────────────────────
echo ""
echo "=== L1.6 session_suspend / snapshot_restore ==="
SU=$(s suspend)
te "$SU" '["su-1","su-2","hash-a"]'
ok "session_suspend" "{\"type\":\"session_suspend\",\"session_id\":\"$SU\"}" '["evicted_count","suspended"]'
field "session_suspend suspended=true" '.data.suspended' 'true'
field "session_suspend demotes su-1, su-2 (hash-a held by s2): evicted_count=2" '.data.evicted_count' '2'
map_is "$SU" '["su-1","su-2","hash-a"]'
ok "session_suspend unknown session" "{\"type\":\"session_suspend\",\"session_id\":\"$(s nobody)\"}" \
    '["evicted_count","suspended"]'
field "session_suspend unknown: suspended=false" '.data.suspended' 'false'
field "session_suspend unknown: evicted_count=0" '.data.evicted_count' '0'
ok "snapshot_restore suspended session" "{\"type\":\"snapshot_restore\",\"session_id\":\"$SU\"}" \
    '["prefetch_count","prefetch_sent"]'
field "snapshot_restore prefetch_sent=true" '.data.prefetch_sent' 'true'
field "snapshot_restore prefetch_count=3" '.data.prefetch_count' '3'
map_is "$SU" '["su-1","su-2","hash-a"]'
# snapshot_restore counts unique hashes
UQ=$(s unique)
te "$UQ" '["u1","u2","u1"]'
post "{\"type\":\"snapshot_restore\",\"session_id\":\"$UQ\"}"
field "snapshot_restore [u1,u2,u1]: prefetch_count=2 (unique)" '.data.prefetch_count' '2'

# ─────────────────────────────────────────────────────────────
echo ""
echo "=== L1.7 errors and edge cases (exact texts) ==="
err "missing type"            '{"session_id":"edge-x"}'           "missing or empty 'type' field"
err "empty type"              '{"type":"","session_id":"edge-x"}' "missing or empty 'type' field"
err "unknown type"            '{"type":"foobar"}'                 "unknown event type"
err "turn_start without session_id" '{"type":"turn_start"}'       "missing required field 'session_id'"
err "turn_start empty session_id"   '{"type":"turn_start","session_id":""}' "session_id must not be empty"
err "session_close without session_id" '{"type":"session_close"}' "missing required field 'session_id'"
err "turn_end without kv_transfer_params" "{\"type\":\"turn_end\",\"session_id\":\"$(s edge-s1)\"}" \
    "missing required field 'kv_transfer_params'"
NO=$(s nonexistent)
err "session_map unknown"      "{\"type\":\"session_map\",\"session_id\":\"$NO\"}"      "session '$NO' not found"
err "session_fork unknown"     "{\"type\":\"session_fork\",\"session_id\":\"$NO\"}"     "session '$NO' not found"
err "session_fork_end unknown" "{\"type\":\"session_fork_end\",\"session_id\":\"$NO\"}" "session '$NO' not found"
err "snapshot_restore unknown" "{\"type\":\"snapshot_restore\",\"session_id\":\"$NO\"}" "session '$NO' not found"
ok "session_close unknown (lenient)" "{\"type\":\"session_close\",\"session_id\":\"$NO\"}" '["closed","evicted_count"]'
field "session_close unknown: closed=false" '.data.closed' 'false'
field "session_close unknown: evicted_count=0" '.data.evicted_count' '0'
err "session_map after lenient close still unknown" "{\"type\":\"session_map\",\"session_id\":\"$NO\"}" \
    "session '$NO' not found"
err "malformed JSON body"        '{"type":"health",'                           '*'
err "JSON array body"            '[{"type":"health"}]'                         '*'
err "JSON string body"           '"health"'                                    '*'
err "session_id not a string"    '{"type":"turn_start","session_id":42}'       '*'
err "type not a string"          '{"type":7}'                                  '*'
# null / missing chunk_hashes: refused, map untouched (a missing list is a host or engine bug)
E2=$(s edge-s2)
te "$E2" '["k1","k2"]'
err "turn_end kv_transfer_params {} (no chunk_hashes)" \
    "{\"type\":\"turn_end\",\"session_id\":\"$E2\",\"kv_transfer_params\":{}}" \
    "missing required field 'kv_transfer_params.chunk_hashes'"
err "turn_end chunk_hashes=null" \
    "{\"type\":\"turn_end\",\"session_id\":\"$E2\",\"kv_transfer_params\":{\"chunk_hashes\":null}}" \
    "missing required field 'kv_transfer_params.chunk_hashes'"
map_is "$E2" '["k1","k2"]'
err "turn_end chunk_hashes with a non-string" \
    "{\"type\":\"turn_end\",\"session_id\":\"$E2\",\"kv_transfer_params\":{\"chunk_hashes\":[\"ok\",123]}}" '*'
err "turn_end chunk_hashes not a list" \
    "{\"type\":\"turn_end\",\"session_id\":\"$E2\",\"kv_transfer_params\":{\"chunk_hashes\":\"k1\"}}" '*'
err "turn_end kv_transfer_params not an object" \
    "{\"type\":\"turn_end\",\"session_id\":\"$E2\",\"kv_transfer_params\":[\"k1\"]}" '*'
map_is "$E2" '["k1","k2"]'
ok "turn_end explicit [] clears the map" \
    "{\"type\":\"turn_end\",\"session_id\":\"$E2\",\"kv_transfer_params\":{\"chunk_hashes\":[]}}" \
    '["debug_written","evicted_count","map_updated"]'
field "explicit []: map_updated=true" '.data.map_updated' 'true'
field "explicit []: evicted_count=2" '.data.evicted_count' '2'
map_is "$E2" '[]'
# a refused turn_end on an unknown session creates nothing
E3=$(s edge-s3)
post "{\"type\":\"turn_end\",\"session_id\":\"$E3\",\"kv_transfer_params\":{\"chunk_hashes\":null}}"
field "turn_end null on unknown session: refused" '.ok' 'false'
err "... and no session was created" "{\"type\":\"session_map\",\"session_id\":\"$E3\"}" "session '$E3' not found"
# limits: more than 1000 hashes, a hash over 100 bytes
BIG=$(printf '"h%d",' $(seq 1 1001)); BIG="[${BIG%,}]"
LONG=$(printf 'x%.0s' $(seq 1 101))
LIM=$(s limits)
te "$LIM" '["keep"]'
err "turn_end with 1001 hashes rejected" \
    "{\"type\":\"turn_end\",\"session_id\":\"$LIM\",\"kv_transfer_params\":{\"chunk_hashes\":$BIG}}" '*'
err "turn_end with a 101-byte hash rejected" \
    "{\"type\":\"turn_end\",\"session_id\":\"$LIM\",\"kv_transfer_params\":{\"chunk_hashes\":[\"$LONG\"]}}" '*'
map_is "$LIM" '["keep"]'
ok "health still serving after bad input" '{"type":"health"}' '["sessions_count","status"]'

# ─────────────────────────────────────────────────────────────
echo ""
echo "=== L1.7b duplicate hashes inside one map hold one reference ==="
D1=$(s dup-s1); D2=$(s dup-s2)
te "$D1" '["dup-A"]'; field "s1 turn_end [dup-A]" '.ok' 'true'
te "$D2" '["dup-A"]'; field "s2 turn_end [dup-A]" '.ok' 'true'
te "$D2" '["dup-A","dup-A"]'; field "s2 turn_end [dup-A,dup-A]: evicted_count=0" '.data.evicted_count' '0'
post "{\"type\":\"session_close\",\"session_id\":\"$D2\"}"
field "close s2: closed=true" '.data.closed' 'true'
field "close s2: dup-A still used by s1, evicted_count=0" '.data.evicted_count' '0'
map_is "$D1" '["dup-A"]'
post "{\"type\":\"session_close\",\"session_id\":\"$D1\"}"
field "close s1: dup-A evicted now, evicted_count=1" '.data.evicted_count' '1'
err "closed session is gone" "{\"type\":\"session_map\",\"session_id\":\"$D1\"}" "session '$D1' not found"

# ─────────────────────────────────────────────────────────────
echo ""
echo "=== L1.7c snapshot_restore is idempotent on a live session ==="
DR=$(s dup-restore)
te "$DR" '["dr-A","dr-B"]'
post "{\"type\":\"snapshot_restore\",\"session_id\":\"$DR\"}"; field "restore #1 prefetch_count=2" '.data.prefetch_count' '2'
post "{\"type\":\"snapshot_restore\",\"session_id\":\"$DR\"}"; field "restore #2 prefetch_count=2" '.data.prefetch_count' '2'
post "{\"type\":\"session_close\",\"session_id\":\"$DR\"}"
field "close after two restores evicts both (refcount not doubled)" '.data.evicted_count' '2'

# ─────────────────────────────────────────────────────────────
echo ""
echo "=== L1.7d resume under a new session id (source_session_id) ==="
SRC=$(s resume-src); DST=$(s resume-dst)
te "$SRC" '["r1","r2","r3"]'
ok "snapshot_restore new id from source" \
    "{\"type\":\"snapshot_restore\",\"session_id\":\"$DST\",\"source_session_id\":\"$SRC\"}" \
    '["prefetch_count","prefetch_sent"]'
field "resume: prefetch_sent=true" '.data.prefetch_sent' 'true'
field "resume: prefetch_count=3" '.data.prefetch_count' '3'
map_is "$DST" '["r1","r2","r3"]'
map_is "$SRC" '["r1","r2","r3"]'
post "{\"type\":\"session_close\",\"session_id\":\"$SRC\"}"
field "close source: chunks held by the resumed session, evicted_count=0" '.data.evicted_count' '0'
post "{\"type\":\"session_close\",\"session_id\":\"$DST\"}"
field "close resumed session: evicted_count=3" '.data.evicted_count' '3'
# resume from a suspended source
SRC2=$(s resume-src2); DST2=$(s resume-dst2)
te "$SRC2" '["q1","q2"]'
post "{\"type\":\"session_suspend\",\"session_id\":\"$SRC2\"}"; field "suspend source" '.data.suspended' 'true'
post "{\"type\":\"snapshot_restore\",\"session_id\":\"$DST2\",\"source_session_id\":\"$SRC2\"}"
field "resume from a suspended source: prefetch_count=2" '.data.prefetch_count' '2'
map_is "$DST2" '["q1","q2"]'
map_is "$SRC2" '["q1","q2"]'
NS=$(s no-such-source)
err "resume from an unknown source" \
    "{\"type\":\"snapshot_restore\",\"session_id\":\"$(s resume-dst3)\",\"source_session_id\":\"$NS\"}" \
    "session '$NS' not found"
err "failed resume created nothing" "{\"type\":\"session_map\",\"session_id\":\"$(s resume-dst3)\"}" \
    "session '$(s resume-dst3)' not found"

# ─────────────────────────────────────────────────────────────
echo ""
echo "=== L1.8 debug files ==="
DS=$(s debug-s1)
post "{\"type\":\"turn_end\",\"session_id\":\"$DS\",\"kv_transfer_params\":{\"chunk_hashes\":[\"dbg-h1\",\"dbg-h2\"]},\"debug_context\":{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"timing\":{\"ttft_ms\":120,\"total_time_ms\":450}}}"
if [ "$OWN_DAEMON" = "1" ]; then
    field "turn_end with debug_context: debug_written=true" '.data.debug_written' 'true'
    DF="$DEBUG_DIR/kvcache_debug_${DS}_1.json"
    if [ -f "$DF" ] && [ "$(jget "$(cat "$DF")" '. | length')" != "INVALID_JSON" ]; then
        pass "debug file $(basename "$DF") written, valid JSON"
    else
        fail "debug file $DF written" "debug dir: $(ls "$DEBUG_DIR" 2>&1 | tr '\n' ' ')"
    fi
    ESC="ramakv-escape-$$"
    post "{\"type\":\"turn_end\",\"session_id\":\"../../$ESC\",\"kv_transfer_params\":{\"chunk_hashes\":[]},\"debug_context\":{\"timing\":{\"ttft_ms\":1}}}"
    echo "        session_id '../../$ESC' -> $RESP"
    outside=$(find "$(dirname "$TEST_DIR")" -maxdepth 3 -name "*$ESC*" -not -path "$DEBUG_DIR/*" 2>/dev/null | head -n 3)
    if [ -z "$outside" ]; then
        pass "a '../../' session_id writes nothing outside debug_dir"
    else
        fail "a '../../' session_id writes nothing outside debug_dir" "found: $outside"
    fi
    [ "$(jget "$RESP" '.ok')" = "true" ] && post "{\"type\":\"session_close\",\"session_id\":\"../../$ESC\"}"
else
    field "turn_end with debug_context ok" '.ok' 'true'
    skip "debug file checks (daemon not ours, debug_dir unknown)"
fi

# ─────────────────────────────────────────────────────────────
echo ""
echo "=== L1.9 persistence across restarts ==="
if [ "$OWN_DAEMON" = "1" ]; then
    SA=$(s shared-s1); SB=$(s shared-s2); PS=$(s persist-s1); FK=$(s fork-persist); SS=$(s suspended-persist)
    te "$SA" '["shared-A","shared-B"]'; field "shared-s1 [shared-A,shared-B]" '.ok' 'true'
    te "$SB" '["shared-A","shared-C"]'; field "shared-s2 [shared-A,shared-C]" '.ok' 'true'
    te "$PS" '["persist-h1","persist-h2"]'; field "persist-s1 [persist-h1,persist-h2]" '.ok' 'true'
    te "$FK" '["fk-1"]'; field "fork-persist [fk-1]" '.ok' 'true'
    post "{\"type\":\"session_fork\",\"session_id\":\"$FK\"}"; field "fork-persist forked" '.data.forked' 'true'
    FKID=$(jget "$RESP" '.data.fork_id')
    te "$FK" '["fk-2"]'; field "fork-persist -> [fk-2], fk-1 held by the fork" '.data.evicted_count' '0'
    te "$SS" '["ss-1","ss-2"]'; field "suspended-persist [ss-1,ss-2]" '.ok' 'true'
    post "{\"type\":\"session_suspend\",\"session_id\":\"$SS\"}"; field "suspended-persist suspended" '.data.suspended' 'true'
    rows=$(sqlite_q "SELECT session_id, map_json FROM sessions WHERE session_id='$PS'")
    echo "        SQLite row before restart: $rows"
    check "sessions table holds persist-s1's map" "$(jget "$(printf '%s' "$rows" | cut -d'|' -f2-)" '.')" \
        '["persist-h1","persist-h2"]'
    post '{"type":"health"}'; BEFORE=$(jget "$RESP" '.data.sessions_count')

    restart_daemon TERM
    post '{"type":"health"}'
    field "sessions_count is the same after restart ($BEFORE)" '.data.sessions_count' "$BEFORE"
    map_is "$PS" '["persist-h1","persist-h2"]'
    map_is "$SA" '["shared-A","shared-B"]'
    map_is "$SB" '["shared-A","shared-C"]'
    post "{\"type\":\"session_close\",\"session_id\":\"$SA\"}"
    field "after restart: close shared-s1 evicts shared-B only (refcounts rebuilt)" '.data.evicted_count' '1'
    map_is "$SB" '["shared-A","shared-C"]'
    post "{\"type\":\"session_close\",\"session_id\":\"$SB\"}"
    field "after restart: close shared-s2 evicts shared-A and shared-C" '.data.evicted_count' '2'
    post "{\"type\":\"snapshot_restore\",\"session_id\":\"$PS\"}"
    field "after restart: snapshot_restore prefetch_sent=true" '.data.prefetch_sent' 'true'
    field "after restart: snapshot_restore prefetch_count=2" '.data.prefetch_count' '2'
    map_is "$SS" '["ss-1","ss-2"]'
    te "$FK" '["fk-3"]'
    field "after restart: fork hold on fk-1 survives, -> [fk-3] evicts fk-2 only" '.data.evicted_count' '1'
    post "{\"type\":\"session_fork_end\",\"session_id\":\"$FK\"}"
    field "after restart: fork_end finds the persisted fork" '.data.fork_end' 'true'
    err "after restart: second fork_end has no open fork" "{\"type\":\"session_fork_end\",\"session_id\":\"$FK\"}" '*'
    post "{\"type\":\"session_fork\",\"session_id\":\"$FK\"}"
    check "after restart: a new fork_id is above every earlier one" \
        "$([ "$(jget "$RESP" '.data.fork_id')" -gt "$FKID" ] && echo yes)" yes
    post "{\"type\":\"session_fork_end\",\"session_id\":\"$FK\"}"

    # kill -9: every acknowledged turn_end survives
    K9=$(s kill9)
    for i in 1 2 3 4 5; do te "$K9" "[\"k9-$i\",\"k9-base\"]"; done
    field "turn_end #5 acknowledged before kill -9" '.ok' 'true'
    restart_daemon KILL
    map_is "$K9" '["k9-5","k9-base"]'
    post "{\"type\":\"session_close\",\"session_id\":\"$K9\"}"
    field "after kill -9: close evicts both chunks" '.data.evicted_count' '2'

    # the daemon's log lines
    for line in "ram-a-kv daemon starting" "ram-a-kv event received" "ram-a-kv event completed" \
                "ram-a-kv event failed"; do
        if grep -q "$line" "$LOG"; then pass "daemon log shows '$line'"; else fail "daemon log shows '$line'" "log: $LOG"; fi
    done
else
    skip "restart, kill -9 and log checks (daemon not ours)"
fi

# ─────────────────────────────────────────────────────────────
echo ""
echo "=== L1.10 cleanup ==="
for id in "$S1" "$S2" "$HX" "$FP" "$NF" "$SU" "$UQ" "$E2" "$LIM" "$SRC2" "$DST2" "$DS" \
          "${PS:-}" "${FK:-}" "${SS:-}"; do
    [ -z "$id" ] && continue
    post "{\"type\":\"session_close\",\"session_id\":\"$id\"}"
    check "session_close ${id#"$RUN"-}" "$(jget "$RESP" '.ok') $(jget "$RESP" '.data.closed')" "true true"
done
# turn_start on an unknown session may or may not register it; close it either way.
post "{\"type\":\"session_close\",\"session_id\":\"$(s nobody)\"}"
if [ "$OWN_DAEMON" = "1" ]; then
    post '{"type":"health"}'
    field "final sessions_count=0" '.data.sessions_count' '0'
    check "SQLite sessions table empty (suspended rows deleted by close)" \
        "$(sqlite_q 'SELECT count(*) FROM sessions')" "0"
    check "SQLite forks table empty (every fork ended)" "$(sqlite_q 'SELECT count(*) FROM forks')" "0"
    check "sessions table keeps the original columns" \
        "$(sqlite_q "SELECT name FROM pragma_table_info('sessions') WHERE name IN ('session_id','map_json','turn_count') ORDER BY name")" \
        "map_json,session_id,turn_count"
fi

finish

"""ProxySettings: where the proxy forwards and reports, and its session lifecycle policy."""

from __future__ import annotations

from dataclasses import dataclass

from ramakv_sdk.config import DEFAULT_DAEMON_URL

#: What the proxy's own turn_start asks of the daemon for a session it did not suspend.
TURN_START_PREFETCH = ("off", "wait")


@dataclass(frozen=True, slots=True)
class ProxySettings:
    """Where to forward, where to report, how sessions are named and when they pause.

    The lifecycle fields (docs/proxy.md, "Session lifecycle"): ``tool_pause_suspend_s``
    seconds after an answer that calls a tool with no new request, the session is
    suspended (0 = never); its next request restores it and waits at most
    ``restore_wait_ms`` for the prefetch to land in DDR (0 = do not wait); a session with
    no request for ``session_idle_close_s`` is closed (0 = never), and so is one whose
    client leaves mid-answer when ``close_on_disconnect`` (unless a newer request of it came:
    a retry); one whose agent run ended (an answer that calls no tool, to a request that
    offered tools and carried their use) is suspended, inferred, after ``run_end_grace_s``
    with no new request (0 = never; the grace then adapts to the sessions' observed
    return gaps, a run end with no return within 60 s counting as one that needed none).
    ``daemon_wait_ms`` bounds what a request waits on the daemon's answers
    (a timeout opens a circuit breaker); ``state_file`` keeps pending suspends and closes
    over a restart (None = not kept); ``scope_sessions_by_key`` prefixes each session id
    with a hash of the caller's API key. ``turn_start_prefetch`` is
    ``"off"`` (the proxy's turn_start asks for no prefetch: its chunks are in DDR unless
    the proxy suspended it) or ``"wait"`` (prefetch and wait for it as after a restore).
    """

    upstream: str
    daemon_url: str = DEFAULT_DAEMON_URL
    token: str | None = None
    session_header: str = "X-Session-ID"
    daemon_timeout: float = 2.0
    retry_for: float = 5.0
    max_body_bytes: int = 256 * 1024 * 1024
    #: LMCache's chunk_size and save_unfull_chunk, to hash a streamed turn's tokenised prompt
    #: exactly as the engine's connector does (vLLM streams carry no kv_transfer_params).
    chunk_size: int = 256
    save_unfull_chunk: bool = False
    tool_pause_suspend_s: float = 2.0
    restore_wait_ms: int = 1000
    session_idle_close_s: float = 900.0
    run_end_grace_s: float = 5.0
    close_on_disconnect: bool = True
    turn_start_prefetch: str = "off"
    #: How often the bounded wait asks where a restored session's chunks are.
    restore_poll_ms: int = 10
    daemon_wait_ms: int = 250
    state_file: str | None = None
    scope_sessions_by_key: bool = False
    #: The stock stack (docs/stock-stack.md): the LMCache multiprocess server's HTTP URL
    #: ("" = ascend_ext's connector), vLLM's --model ("" = the engine's /v1/models root),
    #: its world size and the requests' cache_salt: the server's key fields.
    lmcache_mp_url: str = ""
    lmcache_mp_model: str = ""
    lmcache_mp_world_size: int = 1
    lmcache_mp_cache_salt: str = ""

    def __post_init__(self) -> None:
        for name in ("tool_pause_suspend_s", "session_idle_close_s", "run_end_grace_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0 = off), got {getattr(self, name)}")
        if self.restore_wait_ms < 0:
            raise ValueError(f"restore_wait_ms must be >= 0, got {self.restore_wait_ms}")
        if self.daemon_wait_ms < 0:
            raise ValueError(f"daemon_wait_ms must be >= 0, got {self.daemon_wait_ms}")
        if self.restore_poll_ms <= 0:
            raise ValueError(f"restore_poll_ms must be > 0, got {self.restore_poll_ms}")
        if self.turn_start_prefetch not in TURN_START_PREFETCH:
            raise ValueError(
                f"turn_start_prefetch must be one of {TURN_START_PREFETCH}, "
                f"got {self.turn_start_prefetch!r}"
            )

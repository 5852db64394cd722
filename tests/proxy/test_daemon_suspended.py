"""A session the daemon suspended behind the proxy's back (its idle policy) is restored
before its next request, as one the proxy suspended. The daemon is real and is sent the
very event its idle policy sends (``session_suspend``, reason ``idle_suspend_s``); a
manual clock stands for the time since the session's last answer."""

from __future__ import annotations

from test_lifecycle import ASK, chat, daemon_events, state

from ramakv_proxy import ManualClock
from ramakv_proxy.lifecycle import IDLE_CHECK_S

PLAIN = {"model": "m", "messages": ASK["messages"]}


def idle_suspend(daemon, sid: str) -> None:  # noqa: ANN001
    """What the daemon's idle policy does to a session idle past idle_suspend_s."""
    assert daemon.event("session_suspend", session_id=sid, reason="idle_suspend_s")["ok"]
    assert state(daemon, sid) == "suspended"


async def test_a_session_the_daemon_suspended_is_restored_before_its_request(
    daemon_proc, engine, start_proxy
) -> None:
    clock = ManualClock()
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=clock, daemon_timeout=30)
    await chat(proxy, PLAIN, "slept")
    assert await proxy.sender.flush(120)
    idle_suspend(daemon_proc, "slept")
    clock.advance(IDLE_CHECK_S)
    await chat(proxy, PLAIN, "slept")
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "slept") == "active"
    assert await daemon_events(daemon_proc, "slept") == [
        ("turn_start", None),
        ("turn_end", None),
        ("session_suspend", "idle_suspend_s"),
        ("snapshot_restore", "next_request"),
        ("turn_start", None),
        ("turn_end", None),
    ]
    st = proxy.lifecycle.stats
    assert (st.restores, st.restores_daemon_suspended, st.suspends) == (1, 1, 0)
    assert st.restore_unknown == 1  # the bounded wait ran (a noop backend: nothing to wait on)


async def test_a_session_the_proxy_forgot_is_asked_about_too(
    daemon_proc, engine, start_proxy
) -> None:
    """No idle timer: the proxy forgets the session after each answer; its next request
    asks, whatever the time."""
    clock = ManualClock()
    proxy = await start_proxy(
        engine.url, daemon_proc.url, clock=clock, session_idle_close_s=0, daemon_timeout=30
    )
    await chat(proxy, PLAIN, "forgotten")
    assert proxy.lifecycle.sessions == 0
    assert await proxy.sender.flush(120)
    idle_suspend(daemon_proc, "forgotten")
    await chat(proxy, PLAIN, "forgotten")
    assert proxy.lifecycle.stats.restores_daemon_suspended == 1
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "forgotten") == "active"


async def test_an_active_session_or_a_quick_next_request_gets_a_plain_turn_start(
    daemon_proc, engine, start_proxy
) -> None:
    clock = ManualClock()
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=clock, daemon_timeout=30)
    await chat(proxy, PLAIN, "awake")
    clock.advance(600)  # asked: still active, so no restore
    await chat(proxy, PLAIN, "awake")
    assert await proxy.sender.flush(120)
    # Within IDLE_CHECK_S of its last answer the proxy does not ask (no idle policy is that
    # quick): a suspend made meanwhile by other means is left to the turn_end, as before.
    idle_suspend(daemon_proc, "awake")
    clock.advance(IDLE_CHECK_S / 2)
    await chat(proxy, PLAIN, "awake")
    assert await proxy.sender.flush(120)
    types = [t for t, _ in await daemon_events(daemon_proc, "awake")]
    assert "snapshot_restore" not in types
    assert proxy.lifecycle.stats.restores == 0
    assert state(daemon_proc, "awake") == "active"  # the turn_end made it active again

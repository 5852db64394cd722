"""``ramakv-proxy``: an OpenAI-compatible reverse proxy that reports turns to ram-a-kv and
infers each session's lifecycle with a pure state machine (tool pause → suspend, next request
→ restore, final answer → inferred suspend, side call → branch, gone or idle → close)."""

from ramakv_sdk.proxy.app import LIFECYCLE, SENDER, STATS_PATH, make_app
from ramakv_sdk.proxy.cli import main, parse_args, settings_from
from ramakv_sdk.proxy.clock import Clock, LoopClock, ManualClock
from ramakv_sdk.proxy.lifecycle import Lifecycle
from ramakv_sdk.proxy.machine import IllegalStep, Policy, SessionMachine, Signal, State
from ramakv_sdk.proxy.naming import SOURCES, session_of
from ramakv_sdk.proxy.outcome import Outcome
from ramakv_sdk.proxy.settings import ProxySettings

__all__ = [
    "LIFECYCLE",
    "SENDER",
    "SOURCES",
    "STATS_PATH",
    "Clock",
    "IllegalStep",
    "Lifecycle",
    "LoopClock",
    "ManualClock",
    "Outcome",
    "Policy",
    "ProxySettings",
    "SessionMachine",
    "Signal",
    "State",
    "main",
    "make_app",
    "parse_args",
    "session_of",
    "settings_from",
]

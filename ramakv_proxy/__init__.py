"""ramakv-proxy, a deployable server: an OpenAI-compatible reverse proxy reporting to ram-a-kv.

It reports turns and infers each session's lifecycle with the SDK's pure state machine (tool
pause → suspend, next request → restore, final answer → inferred suspend, side call →
branch, gone or idle → close). Built on ramakv_sdk, never the other way round."""

from ramakv_proxy.app import LIFECYCLE, SENDER, STATS_PATH, make_app
from ramakv_proxy.cli import main, parse_args, settings_from
from ramakv_proxy.lifecycle import Lifecycle
from ramakv_proxy.naming import SOURCES, session_of
from ramakv_proxy.request_end import RequestEnd
from ramakv_proxy.settings import ProxySettings
from ramakv_sdk.lifecycle.clock import Clock, LoopClock, ManualClock
from ramakv_sdk.lifecycle.machine import IllegalStep, Policy, SessionMachine, Signal, State

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
    "RequestEnd",
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

"""The aiohttp application's typed state keys (shared by every HTTP module)."""

from __future__ import annotations

from aiohttp import web

from ramakv_daemon.bootstrap import Daemon
from ramakv_daemon.config import Config

CONFIG_KEY = web.AppKey("config", Config)
DAEMON_KEY = web.AppKey("daemon", Daemon)

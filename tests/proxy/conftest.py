"""Fixtures for the proxy suite: the stand-in engine and an in-process proxy."""

from support.proxy_rig import engine, start_proxy  # noqa: F401

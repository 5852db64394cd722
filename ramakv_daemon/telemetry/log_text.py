"""The daemon's text checks: the one copy lives in :mod:`ramakv_protocol.log_text`."""

from ramakv_protocol.log_text import loggable, utf8

__all__ = ["loggable", "utf8"]

"""The message bus: background work's typed commands, handled in the background lane."""

"""The wire contract shared by the daemon, the SDK and the console (standard library only)."""

"""The console's screens, one per module (sessions, detail, refcounts, trace, config, help)."""

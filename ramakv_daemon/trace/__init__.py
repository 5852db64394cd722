"""The trace: hub, protocol 2 summaries and snapshots, shared counts."""

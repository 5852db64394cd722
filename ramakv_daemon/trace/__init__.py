"""The trace: hub, records, protocol 2 summaries and snapshots, shared counts."""

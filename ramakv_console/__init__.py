"""ramakv-console: the operator's Textual app over the daemon's trace, through the SDK."""

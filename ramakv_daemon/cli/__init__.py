"""The operator tools: ramakv-admin and ramakv-identity."""

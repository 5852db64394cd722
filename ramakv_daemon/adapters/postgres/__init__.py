"""The shared PostgreSQL store."""

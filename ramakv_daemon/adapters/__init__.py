"""The ports' implementations: the SQLite and PostgreSQL stores, the cache backends."""

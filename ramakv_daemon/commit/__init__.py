"""The group commit: frozen change records, held records, the outbox ledger delivery reads."""

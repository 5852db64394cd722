"""Background passes over stored sessions (fork hold expiry)."""

"""The domain, pure: sessions, forks, refcounts, budgets and the manager that turns an
event into a Change (standard library only, no I/O, no asyncio)."""

"""One event's path: the event_id protocol, validate -> apply -> commit -> react."""

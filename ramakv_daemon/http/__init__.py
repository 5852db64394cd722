"""The daemon's HTTP side: POST /event, GET /trace, /metrics, /healthz and /readyz."""

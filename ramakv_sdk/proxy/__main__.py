"""``python -m ramakv_sdk.proxy``: the ramakv-proxy command (the demo and benchmarks use it)."""

from ramakv_sdk.proxy import main

raise SystemExit(main())

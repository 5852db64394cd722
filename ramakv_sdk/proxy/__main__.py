"""``python -m ramakv_sdk.proxy``: the ramakv-proxy command (the benchmarks start it so)."""

import sys

from ramakv_sdk.proxy.cli import main

if __name__ == "__main__":
    sys.exit(main())

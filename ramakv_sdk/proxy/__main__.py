"""``python -m ramakv_sdk.proxy``: the same as the ``ramakv-proxy`` console script."""

import sys

from ramakv_sdk.proxy.cli import main

if __name__ == "__main__":
    sys.exit(main())

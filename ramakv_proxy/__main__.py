"""``python -m ramakv_proxy``: the same as the ``ramakv-proxy`` console script."""

import sys

from ramakv_proxy.cli import main

if __name__ == "__main__":
    sys.exit(main())

"""``python -m ramakv_sdk.proxy``: the same as the ``ramakv-proxy`` console script."""

import sys

from ramakv_sdk.proxy.cli import main

sys.exit(main())

"""``python -m devcluster``: see :func:`devcluster.runner.main`."""

import sys

from devcluster.runner import main

sys.exit(main())

"""``python -m gnomon.client.cli``: the ``gnomon`` command."""

import sys

from gnomon.client.cli import main

sys.exit(main())

"""`python -m gnomon.jepsen run|matrix ...`"""

import sys

from gnomon.jepsen.cli import main

sys.exit(main())

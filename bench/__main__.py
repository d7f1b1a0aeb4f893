"""`python -m gnomon.bench NAME [--quick]`: see gnomon.bench.main."""

from gnomon.bench import main

raise SystemExit(main())

"""`python -m gnomon.gateway`: the gateway process (gnomon-gateway)."""

from gnomon.gateway.cli import main

raise SystemExit(main())

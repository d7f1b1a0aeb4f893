"""What only the leader runs: the term session, trigger, dispatch, leases, job backfills."""

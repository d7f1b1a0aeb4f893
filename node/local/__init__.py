"""A local cluster of real node processes (tests, bench, `gnomon dev`)."""

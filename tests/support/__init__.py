"""What tests share: cluster fixtures, spec builders, polling, HTTP and metrics helpers, fakes.

No test imports another test module; what two tests need lives here."""

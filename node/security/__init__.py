"""Who may call: authentication, admission, TLS and certificates (DESIGN.md)."""

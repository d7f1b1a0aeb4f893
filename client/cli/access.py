"""``gnomon token create|list|revoke``, ``gnomon whoami`` and ``gnomon tenant
create|set|get|list``: who may call, and each tenant's share and bounds (node/security/DESIGN.md)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from .._access import TENANT_SETTINGS, Tenant, Token
from .errors import EXIT_OK
from .render import fmt_time, table
from .values import UsageError, parse_duration_ms

__all__ = ["ACCESS_COMMANDS", "add_access_groups"]

Leaf = Callable[..., argparse.ArgumentParser]
ROLES = ("admin", "tenant-admin", "tenant-writer", "tenant-reader", "worker", "gateway")


def add_access_groups(groups: Any, leaf: Leaf) -> None:
    token = groups.add_parser("token", help="bearer tokens: who may call (admins; "
                              "tenant-admins for their tenants)") \
        .add_subparsers(dest="action", metavar="ACTION", required=True)
    p = leaf(token, "create", "a new token; its secret is printed once")
    p.add_argument("name", metavar="NAME", help="what the token is for (e.g. ci-deploy)")
    p.add_argument("--role", required=True, choices=ROLES)
    p.add_argument("--tenant", action="append", default=[], dest="tenants", metavar="TENANT",
                   help="a tenant it acts for (repeat; none for admin and gateway)")
    p.add_argument("--expires-in", metavar="DURATION",
                   help="expire after DURATION (e.g. 30d, 12h; default: never)")
    p.add_argument("--cert-subject", default="", metavar="CN",
                   help="under mutual TLS, a client certificate of this common name stands "
                        "for the token (no token needed)")
    p.add_argument("--secret-file", metavar="FILE",
                   help="write the secret to FILE (0600) instead of printing it")
    p = leaf(token, "list", "tokens you may manage")
    p.add_argument("--all", action="store_true", help="also revoked and expired ones")
    p = leaf(token, "revoke", "revoke a token on every node")
    p.add_argument("token_id", metavar="TOKEN_ID", help="as token list prints it (t12)")
    leaf(groups, "whoami", "who the cluster takes you for (your token's role and tenants)")
    tenant = groups.add_parser("tenant", help="tenants: share of the workers and bounds "
                               "(admins change them)") \
        .add_subparsers(dest="action", metavar="ACTION", required=True)
    for action, what in (("create", "a new tenant"), ("set", "change a tenant's settings")):
        p = leaf(tenant, action, what)
        p.add_argument("name", metavar="TENANT")
        for name in TENANT_SETTINGS:
            p.add_argument("--" + name.replace("_", "-"), type=int, metavar="N",
                           help=_TENANT_HELP[name])
    audit = groups.add_parser("audit", help="administrative actions (admins)") \
        .add_subparsers(dest="action", metavar="ACTION", required=True)
    p = leaf(audit, "list", "who did what when: tokens, tenants, limits, leadership, job "
             "deletions, newest first")
    p.add_argument("--limit", type=int, default=50, help="default 50")
    p = leaf(tenant, "get", "one tenant's settings")
    p.add_argument("name", metavar="TENANT")
    leaf(tenant, "list", "tenants with settings of their own")


_TENANT_HELP = {
    "weight": "share of a saturated queue, 1-1000 (default 1)",
    "max_concurrency": "tasks leased at once; more wait (0: no bound)",
    "max_jobs": "jobs (0: the cluster's max_jobs_per_tenant)",
    "max_queued_tasks": "ready tasks waiting (0: no bound)",
    "api_rate_per_s": "API calls per second (0: no bound)",
    "api_burst": "calls at once above the rate (0: one second's worth)",
    "max_active_runs": "runs running at once; triggers beyond it are refused (0: no bound)",
    "max_payload_bytes": "task payload bytes over all its jobs (0: no bound)",
}


def tenant_json(t: Tenant) -> dict[str, Any]:
    return {f: getattr(t, f) for f in ("name", *TENANT_SETTINGS, "created_ms", "updated_ms")}


def _render_tenants(tenants: list[Tenant]) -> str:
    rows = [(t.name, t.weight, t.max_concurrency or "-", t.max_jobs or "-",
             t.max_queued_tasks or "-", t.api_rate_per_s or "-", fmt_time(t.updated_ms))
            for t in tenants]
    return table(["TENANT", "WEIGHT", "MAX_CONC", "MAX_JOBS", "MAX_QUEUED", "API/S", "UPDATED"],
                 rows) if rows else "no tenants with settings of their own"


def _settings(args: Any) -> dict[str, int]:
    return {n: getattr(args, n) for n in TENANT_SETTINGS if getattr(args, n) is not None}


def _cmd_tenant_create(ctx: Any) -> int:
    t = ctx.client.create_tenant(ctx.args.name, **_settings(ctx.args))
    ctx.emit(_render_tenants([t]), tenant_json(t))
    return EXIT_OK


def _cmd_tenant_set(ctx: Any) -> int:
    changes = _settings(ctx.args)
    if not changes:
        raise UsageError(f"tenant set: give at least one of "
                         f"{', '.join('--' + n.replace('_', '-') for n in TENANT_SETTINGS)}")
    t = ctx.client.update_tenant(ctx.args.name, **changes)
    ctx.emit(_render_tenants([t]), tenant_json(t))
    return EXIT_OK


def _cmd_tenant_get(ctx: Any) -> int:
    t = ctx.client.get_tenant(ctx.args.name)
    ctx.emit(_render_tenants([t]), tenant_json(t))
    return EXIT_OK


def _cmd_tenant_list(ctx: Any) -> int:
    tenants = ctx.client.list_tenants()
    ctx.emit(_render_tenants(tenants), [tenant_json(t) for t in tenants])
    return EXIT_OK


def _cmd_audit_list(ctx: Any) -> int:
    entries = ctx.client.list_audit(limit=ctx.args.limit)
    rows = [(fmt_time(e.at_ms), e.actor, e.action, e.detail) for e in entries]
    ctx.emit(table(["WHEN", "WHO", "WHAT", "REQUEST"], rows) if rows else "no entries",
             [{"at_ms": e.at_ms, "actor": e.actor, "action": e.action, "detail": e.detail}
              for e in entries])
    return EXIT_OK


def token_json(t: Token) -> dict[str, Any]:
    return {"token_id": t.token_id, "name": t.name, "role": t.role, "tenants": list(t.tenants),
            "created_ms": t.created_ms, "expires_ms": t.expires_ms, "revoked_ms": t.revoked_ms,
            "created_by": t.created_by, "cert_subject": t.cert_subject}


def _state(t: Token, now_ms: int) -> str:
    if t.revoked_ms:
        return "revoked"
    if t.expires_ms and t.expires_ms <= now_ms:
        return "expired"
    return "active"


def _cmd_token_create(ctx: Any) -> int:
    args = ctx.args
    expires_ms = 0
    if args.expires_in:
        expires_ms = int(time.time() * 1000) + parse_duration_ms(args.expires_in, "--expires-in")
    made = ctx.client.create_token(args.name, args.role, args.tenants, expires_ms=expires_ms,
                                   cert_subject=args.cert_subject)
    secret_line = made.secret
    if args.secret_file:
        _write_secret(args.secret_file, made.secret)
        secret_line = f"written to {args.secret_file}"
    ctx.emit(f"token {made.token.token_id} ({made.token.role}"
             f"{': ' + ', '.join(made.token.tenants) if made.token.tenants else ''})\n"
             f"secret: {secret_line}\n"
             "the secret is not shown again; send it as 'authorization: Bearer <secret>' "
             "(gnomon --token-file FILE, or GNOMON_TOKEN)",
             {**token_json(made.token), "secret": None if args.secret_file else made.secret})
    return EXIT_OK


def _write_secret(path: str, secret: str) -> None:
    import os

    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise UsageError(f"--secret-file: {path!r}: {exc.strerror}") from None
    with os.fdopen(fd, "w") as fh:
        fh.write(secret + "\n")


def _cmd_token_list(ctx: Any) -> int:
    tokens = ctx.client.list_tokens(include_inactive=ctx.args.all)
    now_ms = int(time.time() * 1000)
    rows = [(t.token_id, t.name, t.role, ",".join(t.tenants), _state(t, now_ms),
             fmt_time(t.created_ms), fmt_time(t.expires_ms) if t.expires_ms else "never",
             t.created_by) for t in tokens]
    ctx.emit(table(["TOKEN", "NAME", "ROLE", "TENANTS", "STATE", "CREATED", "EXPIRES", "BY"],
                   rows) if rows else "no tokens",
             [token_json(t) for t in tokens])
    return EXIT_OK


def _cmd_token_revoke(ctx: Any) -> int:
    t = ctx.client.revoke_token(ctx.args.token_id)
    ctx.emit(f"token {t.token_id} ({t.name}) revoked", token_json(t))
    return EXIT_OK


def _cmd_whoami(ctx: Any) -> int:
    me = ctx.client.whoami()
    note = "" if me.authentication_required else \
        " (authentication is off on this cluster: everyone is admin)"
    tenants = f" for {', '.join(me.tenants)}" if me.tenants else ""
    ctx.emit(f"{me.name}: {me.role}{tenants}{note}",
             {"name": me.name, "role": me.role, "tenants": list(me.tenants),
              "token_id": me.token_id, "authentication_required": me.authentication_required})
    return EXIT_OK


ACCESS_COMMANDS = {
    ("token", "create"): _cmd_token_create,
    ("token", "list"): _cmd_token_list,
    ("token", "revoke"): _cmd_token_revoke,
    ("whoami", None): _cmd_whoami,
    ("tenant", "create"): _cmd_tenant_create,
    ("tenant", "set"): _cmd_tenant_set,
    ("tenant", "get"): _cmd_tenant_get,
    ("tenant", "list"): _cmd_tenant_list,
    ("audit", "list"): _cmd_audit_list,
}

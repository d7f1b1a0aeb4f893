"""``gnomon``: the command line of a gnomon cluster (jobs, runs, dead letters, ready-made
workers and a local development cluster). Run ``gnomon --help``.

The parser is in ``parser``, the commands in ``commands``, every spec conversion in
``spec``, exit codes and error lines in ``errors``, output in ``render``."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from .. import _grpc_env
from .._errors import GnomonError
from .commands import COMMANDS, ClientFactory, CommandContext
from .dev import DEFAULT_SERVERS, DEV_DATA_DIR, dev_cluster_security
from .errors import (
    EXIT_CODES,
    EXIT_OK,
    EXIT_USAGE,
    error_json,
    error_line,
    exit_code_for,
)
from .parser import ArgumentError, build_parser
from .server_parts import require_server
from .values import UsageError

__all__ = ["EXIT_CODES", "build_parser", "error_line", "exit_code_for", "main"]


def _default_client(servers: str, timeout_s: float, *, tls: Any = None,
                    token: str | None = None) -> Any:
    from .._blocking_client import Client

    return Client(servers, timeout_s=timeout_s, attempt_timeout_s=min(5.0, timeout_s),
                  tls=tls, token=token)


def _dev_security(args: Any, env: Mapping[str, str]) -> tuple[str, str] | None:
    """A command for the servers of the `gnomon dev` cluster whose data is in ./.gnomon, run
    while that cluster is secure (its dev.json says so): its CA and admin token, so the tour
    just works. None for any other command or cluster."""
    if getattr(args, "group", "") == "dev":
        return None
    servers = getattr(args, "server", None) or env.get("GNOMON_SERVERS") or DEFAULT_SERVERS
    return dev_cluster_security(Path(DEV_DATA_DIR), servers)


def _security(args: Any, env: Mapping[str, str]) -> dict[str, Any]:
    """TLS and token options from --ca/--cert/--key/--token-file and GNOMON_* variables."""
    from .._transport import TLSConfig

    def pick(flag: str, var: str) -> str | None:
        return getattr(args, flag, None) or env.get(var) or None

    ca, cert, key = pick("ca", "GNOMON_CA"), pick("cert", "GNOMON_CERT"), pick("key", "GNOMON_KEY")
    token = env.get("GNOMON_TOKEN") or None
    token_file = pick("token_file", "GNOMON_TOKEN_FILE")
    dev = None if (ca or cert or token or token_file) else _dev_security(args, env)
    if dev is not None:
        ca, token_file = dev
    tls = TLSConfig(ca_file=ca, cert_file=cert, key_file=key) if (ca or cert) else None
    if token_file:
        try:
            with open(token_file, encoding="utf-8") as fh:
                token = fh.read().strip()
        except OSError as exc:
            raise UsageError(f"--token-file: {token_file!r} cannot be read ({exc.strerror})") \
                from None
    return {"tls": tls, "token": token}


# Tools that live beside the client and may use the node's code: run as their own process so
# the client never imports gnomon.node (an import-linter contract).
_TOOLS = {"jepsen": "gnomon.jepsen", "bench": "gnomon.bench", "gateway": "gnomon.gateway"}


def _run_tool(module: str, args: list[str]) -> int:
    """`gnomon jepsen ...` / `gnomon bench ...` / `gnomon gateway ...`: the tool's own CLI,
    its exit code."""
    import subprocess

    try:
        return subprocess.call([sys.executable, "-m", module, *args])
    except KeyboardInterrupt:
        return 130


def main(
    argv: Sequence[str] | None = None,
    *,
    client_factory: ClientFactory | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run one ``gnomon`` command; returns the exit code (see ``EXIT_CODES``)."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["__complete"]:  # the completion script's question (completion.py)
        from .completion import candidates

        print("\n".join(candidates(build_parser(), words[1:])), file=out)
        return EXIT_OK
    as_json = "--json" in words

    def fail(e: BaseException, servers: str | None = None) -> int:
        """Print how the command failed (one line, or one JSON object with --json)."""
        if as_json:
            print(json.dumps(error_json(e, servers=servers)), file=err)
        else:
            print(error_line(e, servers=servers), file=err)
        return exit_code_for(e)

    if words and words[0] in _TOOLS:
        try:
            require_server(words[0], _TOOLS[words[0]])
        except UsageError as e:
            return fail(e)
        return _run_tool(_TOOLS[words[0]], words[1:])
    try:
        args = build_parser().parse_args(argv)
    except ArgumentError as e:
        if as_json:
            return fail(UsageError(str(e).removeprefix("gnomon: ")))
        print(e, file=err)
        return EXIT_USAGE
    except SystemExit as e:  # --help, --version
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    if getattr(args, "verbose", False) and argv is None and _grpc_env.SET_BY_GNOMON:
        # C-core read GRPC_VERBOSITY when grpc was imported: run again with INFO.
        env = {**os.environ, "GRPC_VERBOSITY": "INFO"}
        os.execve(sys.executable, [sys.executable, "-m", "gnomon.client.cli", *words], env)
    as_json = bool(getattr(args, "json", False))
    try:
        security = _security(args, os.environ)
    except UsageError as e:
        return fail(e)
    factory = client_factory or functools.partial(_default_client, **security)
    ctx = CommandContext(args, factory, out)
    ctx.err = err
    ctx.security = security
    handler = COMMANDS[(args.group, getattr(args, "action", None))]
    try:
        return handler(ctx)
    except (UsageError, GnomonError) as e:
        return fail(e, ctx.servers)
    except KeyboardInterrupt as e:
        return fail(e)
    except BrokenPipeError:
        # The reader went away (`gnomon job list | head`): stop quietly.
        if out is sys.stdout:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK  # what was printed was read as far as wanted: not a failure
    finally:
        try:
            ctx.close()
        except Exception:  # noqa: BLE001 - closing must not hide the command's outcome
            pass


if __name__ == "__main__":
    sys.exit(main())

"""The security flags of ``runwick serve``: authentication (on unless ``--insecure``),
the first admin token (``--bootstrap-token-file`` or ``RUNWICK_BOOTSTRAP_TOKEN``, or the
file it names) and TLS. ``coordinator.config`` is imported inside the functions, so
building the parser loads none of the server's dependencies.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Mapping
from typing import Any

BOOTSTRAP_TOKEN_ENV = "RUNWICK_BOOTSTRAP_TOKEN"


def bootstrap_token(options: argparse.Namespace, environ: Mapping[str, str] | None = None) -> str | None:
    """The operator's first admin token: ``--bootstrap-token-file``, else
    ``RUNWICK_BOOTSTRAP_TOKEN`` or the file ``RUNWICK_BOOTSTRAP_TOKEN_FILE`` names."""
    from coordinator.config import env_or_file, read_setting_file

    environ = os.environ if environ is None else environ
    named = options.bootstrap_token_file or environ.get(f"{BOOTSTRAP_TOKEN_ENV}_FILE")
    if named and not os.path.exists(named):
        # Read only while no token exists: the Secret that holds it may be gone once the
        # first install made its token (the Kubernetes volume is optional).
        logging.getLogger("runwick").warning(
            "the bootstrap token file %s does not exist: no first admin token from it "
            "(needed only while the database has no token)",
            named,
        )
        return None
    if options.bootstrap_token_file:
        return read_setting_file(options.bootstrap_token_file, "--bootstrap-token-file")
    found = env_or_file(environ, BOOTSTRAP_TOKEN_ENV)
    return found[0] if found else None


def security_flags(serve: argparse.ArgumentParser) -> None:
    """Adds ``--insecure``, the admin and bootstrap token files and the TLS files."""
    env = os.environ.get
    serve.add_argument(
        "--insecure",
        action="store_true",
        default=env("RUNWICK_INSECURE", "") not in ("", "0", "false"),
        help="turn authentication off (refused unless --host is a loopback address) [RUNWICK_INSECURE=1]",
    )
    serve.add_argument(
        "--admin-token-file",
        default=env("RUNWICK_ADMIN_TOKEN_FILE"),
        help="write a bootstrap admin token the coordinator makes here (mode 0600); it is shown "
        "only on a terminal, never logged [RUNWICK_ADMIN_TOKEN_FILE]",
    )
    serve.add_argument(
        "--bootstrap-token-file",
        default=None,
        metavar="PATH",
        help="a file holding the first admin token (rwk_...), used when no token exists yet "
        f"[{BOOTSTRAP_TOKEN_ENV}, or {BOOTSTRAP_TOKEN_ENV}_FILE]",
    )
    serve.add_argument(
        "--tls-cert", default=env("RUNWICK_TLS_CERT"), help="PEM server certificate [RUNWICK_TLS_CERT]"
    )
    serve.add_argument("--tls-key", default=env("RUNWICK_TLS_KEY"), help="PEM server key [RUNWICK_TLS_KEY]")
    serve.add_argument(
        "--tls-client-ca",
        default=env("RUNWICK_TLS_CLIENT_CA"),
        help="PEM CA: require client certificates it signed (mutual TLS) [RUNWICK_TLS_CLIENT_CA]",
    )


def security_config(options: argparse.Namespace, *, terminal: bool) -> dict[str, Any]:
    """The CoordinatorConfig fields the security flags set: auth is on by default. A
    token the coordinator makes must reach someone: shown on a ``terminal`` or written
    to ``--admin-token-file``; with neither, none is made."""
    return {
        "auth_enabled": not options.insecure,
        "admin_token_file": options.admin_token_file,
        "bootstrap_token": bootstrap_token(options),
        "generate_bootstrap_token": terminal or bool(options.admin_token_file),
        "tls_cert_file": options.tls_cert,
        "tls_key_file": options.tls_key,
        "tls_client_ca_file": options.tls_client_ca,
    }

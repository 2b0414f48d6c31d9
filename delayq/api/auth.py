"""Authentication and authorization: which project a request acts in, and whether it may.

One middleware (``Authentication.process_resource``) decides, once per routed request,
before the resource runs:

1. A request carrying ``URL-Signature`` is a pre-signed URL (``delayq.signed_urls``): the
   signature alone allows it, in the project of its ``X-Project-ID`` (which the
   signature covers), whatever the strategy; a signature that does not allow it is 404,
   as in Zaqar. The policy is not consulted: creating the URL was (``queues:share``, and
   every rule of the requests it grants: ``delayq.api.share``).
2. With ``auth_strategy = keystone``, the ``X-Auth-Token`` is validated by
   keystonemiddleware's auth_token (its ``[keystone_authtoken]`` options and token
   cache), in a pool thread since a cache miss asks Keystone. The project is the
   token's; an ``X-Project-ID`` the client sends is ignored. No token or a bad one is
   401, Keystone unreachable 503. The policy (``delayq.api.policy``) then allows the
   request or answers 403; its target says whether the request names a claim
   (``claim_id``). Routes outside any project (``/v2/ping``, ``/v2/health``,
   ``/metrics``) take a request without a token when their rule lets anyone through
   (by default ``ping:get`` only), so a load balancer can check the service.
3. With no strategy, the project is the ``X-Project-ID`` header, as sent
   (``delayq.api.request.project``; a request to a project's route without it is 400),
   and nothing is enforced.

The middleware leaves the project in ``req.context.project``, and the token's
credentials in ``req.context.credentials`` (for the share's own checks). Without a
strategy and without ``[signed_url] secret_key`` the app has no such middleware at all.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import falcon
import falcon.asgi
from keystoneauth1 import exceptions as keystone_errors
from keystonemiddleware import auth_token
from oslo_config import cfg
from oslo_context import context

from delayq import errors, signed_urls
from delayq.api import policy, request
from delayq.conf import KEYSTONE
from delayq.offload import Offload

LOG = logging.getLogger(__name__)

TOKEN_HEADER = "X-Auth-Token"
SERVICE_TOKEN_HEADER = "X-Service-Token"
PROJECT_ROUTES = policy.QUEUES  # every route below it acts in one project
ANONYMOUS: Mapping[str, Any] = {"roles": [], "project_id": None, "user_id": None}
_ACCEPTED = "delayq.token_accepted"
# The ASGI scope key under which a WebSocket hands the credentials its ``authenticate``
# settled to the requests it makes of the app (``delayq.websocket``). Only the app's own
# dispatch sets scope keys: no client can.
SOCKET_CREDENTIALS = "delayq.socket_credentials"
CONFIRMED = "Confirmed"
IDENTITY_UNAVAILABLE = ("The identity service cannot be reached to check the token; try "
                        "again later.")


def from_conf(conf: cfg.ConfigOpts, offload: Offload) -> Authentication | None:
    """The middleware *conf* asks for; None when it asks for neither a strategy nor
    signed URLs."""
    keystone = conf.auth_strategy == KEYSTONE
    signing = signed_urls.Settings.from_conf(conf)
    if not keystone and not signing.secret_key:
        return None
    return Authentication(offload, signing=signing,
                          tokens=KeystoneTokens(conf) if keystone else None,
                          rules=policy.Policy(conf) if keystone else None)


@dataclass(frozen=True)
class Identity:
    """What a token says of its holder: the policy values, and when it expires (a UTC
    datetime; None when Keystone does not say)."""

    credentials: dict[str, Any]
    expires: datetime | None


class KeystoneTokens:
    """Validates tokens with keystonemiddleware's auth_token, as a WSGI call of its own.

    Blocking (a token not in the cache is checked with Keystone): call ``credentials``
    in a pool thread.
    """

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self._protocol = auth_token.AuthProtocol(_accept, {"oslo_config_config": conf})

    def credentials(self, token: str | None, service_token: str | None) -> dict[str, Any]:
        """The policy values (oslo.context) of the token's holder: user, project, roles.

        Raises NotAuthenticated (no token, or one Keystone does not confirm) and
        IdentityUnavailable (Keystone cannot be asked).
        """
        return self.identity(token, service_token).credentials

    def identity(self, token: str | None, service_token: str | None) -> Identity:
        """The token's credentials and expiry; raises as ``credentials`` does."""
        environ = _environ(token, service_token)
        answer: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]],
                           exc_info: Any = None) -> None:
            answer.update(status=int(status.split()[0]), headers=dict(headers))

        try:
            b"".join(self._protocol(environ, start_response))
        except keystone_errors.ClientException:
            # A catalog without the identity endpoint auth_token looks for, say: the
            # operator's to fix, and no client's fault.
            LOG.exception("Checking a token with Keystone failed")
            raise errors.IdentityUnavailable(IDENTITY_UNAVAILABLE) from None
        if environ.get(_ACCEPTED) and environ.get("HTTP_X_IDENTITY_STATUS") == CONFIRMED:
            return Identity(
                dict(context.RequestContext.from_environ(environ).to_policy_values()),
                _expiry(environ))
        if answer.get("status") == 503:
            raise errors.IdentityUnavailable(IDENTITY_UNAVAILABLE)
        raise errors.NotAuthenticated(
            "This request needs a valid Keystone token in X-Auth-Token." if token else
            "This request needs a Keystone token in X-Auth-Token.",
            challenge=answer.get("headers", {}).get("WWW-Authenticate"))


def _expiry(environ: Mapping[str, Any]) -> datetime | None:
    """When the validated token expires: ``expires_at`` (v3) or ``expires`` (v2) of the
    token data auth_token leaves in the environ."""
    token = (environ.get("keystone.token_info") or {})
    token = token.get("token") or token.get("access", {}).get("token") or {}
    stamp = token.get("expires_at") or token.get("expires")
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def _accept(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    """The WSGI app behind auth_token: reached when it lets the request through."""
    environ[_ACCEPTED] = True
    start_response("204 No Content", [])
    return []


def _environ(token: str | None, service_token: str | None) -> dict[str, Any]:
    """A WSGI environ carrying only the tokens: auth_token reads nothing else, and
    identity headers a client sends must not reach the credentials."""
    environ: dict[str, Any] = {
        "REQUEST_METHOD": "GET", "SCRIPT_NAME": "", "PATH_INFO": "/",
        "SERVER_NAME": "delayq", "SERVER_PORT": "80", "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(), "wsgi.errors": io.StringIO(),
    }
    if token is not None:
        environ["HTTP_X_AUTH_TOKEN"] = token
    if service_token is not None:
        environ["HTTP_X_SERVICE_TOKEN"] = service_token
    return environ


class Authentication:
    """Middleware: settles the request's project and checks the policy (module doc)."""

    def __init__(self, offload: Offload, *, signing: signed_urls.Settings,
                 tokens: KeystoneTokens | None, rules: policy.Policy | None) -> None:
        self.offload = offload
        self.signing = signing
        self.tokens = tokens
        self.rules = rules

    async def process_resource(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                               resource: object, params: dict) -> None:
        if req.get_header(signed_urls.SIGNATURE_HEADER) is not None:
            req.context.project = self.signed_project(req)
            return
        if self.tokens is None or self.rules is None:
            return
        template = req.uri_template or ""
        rule = policy.RULES.get((req.method, template))
        in_project = template.startswith(PROJECT_ROUTES)
        token = req.get_header(TOKEN_HEADER)
        if (token is None and SOCKET_CREDENTIALS not in req.scope
                and not in_project and rule is not None
                and self.rules.allows(rule, ANONYMOUS, None)):
            return
        credentials: Mapping[str, Any] | None = req.scope.get(SOCKET_CREDENTIALS)
        if credentials is None:
            credentials = await self.offload(self.tokens.credentials, token,
                                             req.get_header(SERVICE_TOKEN_HEADER))
        project = credentials.get("project_id")
        if in_project:
            if not project:
                raise errors.Forbidden("The token is not scoped to a project: queues "
                                       "belong to projects.")
            req.context.project = project
        req.context.credentials = credentials
        if rule is not None and not self.rules.allows(
                rule, credentials, project,
                with_claim_id=bool(req.get_param(request.CLAIM_ID_PARAM))):
            raise errors.Forbidden.by_policy(rule)

    def signed_project(self, req: falcon.asgi.Request) -> str:
        """The project a pre-signed request acts in; raises SignatureRefused."""
        project = request.header_project(req)
        if not signed_urls.allows(
                self.signing.secret_key, max_lifetime=self.signing.max_lifetime,
                method=req.method, path=req.path, project=project,
                signature=req.get_header(signed_urls.SIGNATURE_HEADER) or "",
                expires=req.get_header(signed_urls.EXPIRES_HEADER) or "",
                methods=req.get_header(signed_urls.METHODS_HEADER) or "",
                paths=req.get_header(signed_urls.PATHS_HEADER) or ""):
            raise errors.SignatureRefused(
                "The pre-signed URL does not allow this request: the method, path or "
                "project differs from what was signed, the signature does not match, or "
                "it has expired (or expires further ahead than [signed_url] max_expires "
                "allows).")
        return project

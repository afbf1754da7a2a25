"""Who may see the dashboard: Streamlit's OIDC login where configured, else a token or basic-auth gate.

Position: app. ``app.server.serve(..., auth=AuthConfig(...))`` sets the process's gate (:func:`configure`);
the router (``app/main.py``) calls :func:`gate` before any page runs, so no figure reaches a viewer
who has not logged in. Three ways, first configured wins:

1. **OIDC** (Streamlit's ``st.login``): an ``[auth]`` section in ``.streamlit/secrets.toml`` with the
   provider's ``client_id``, ``client_secret``, ``server_metadata_url``, ``redirect_uri`` and
   ``cookie_secret`` (Streamlit docs, "User authentication"). Viewers log in with the provider.
2. **Token** (``INFERCOST_AUTH_TOKEN``): a password field, or ``Authorization: Bearer <token>`` sent
   by a proxy or a script.
3. **Basic** (``INFERCOST_AUTH_BASIC=user:password``): a user + password form, or
   ``Authorization: Basic ...`` from a proxy.

Secrets are compared in constant time (``hmac.compare_digest``). A successful login lasts for the
browser session (Streamlit's session state). The server refuses a non-loopback bind without one of
these (``infercost.service.check_exposure``) unless ``INFERCOST_ALLOW_UNAUTHENTICATED`` says a proxy
in front authenticates.
"""

from __future__ import annotations

import base64
import hmac
import threading
from dataclasses import dataclass

from schema.redact import bearer_matches, credentials

_lock = threading.Lock()


@dataclass(frozen=True)
class AuthConfig:
    """The dashboard's gate: ``token`` and/or ``basic`` (``user:password``); empty = open."""

    token: str = ""
    basic: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.token or self.basic)

    def check_header(self, header: str) -> bool:
        """True when an ``Authorization`` header value carries the token or the basic credentials."""
        header = (header or "").strip()
        if self.token and credentials(header, "Bearer") is not None:
            return bearer_matches(header, self.token)
        if self.basic and (basic := credentials(header, "Basic")) is not None:
            try:
                given = base64.b64decode(basic, validate=True).decode()
            except (ValueError, UnicodeDecodeError):
                return False
            return hmac.compare_digest(given.encode(), self.basic.encode())
        return False

    def check_form(self, user: str, secret: str) -> bool:
        """True when the login form's values match the token (user ignored) or ``user:password``."""
        ok = False
        if self.token:
            ok = hmac.compare_digest((secret or "").encode(), self.token.encode()) or ok
        if self.basic:
            ok = hmac.compare_digest(f"{user}:{secret}".encode(), self.basic.encode()) or ok
        return ok


_config = AuthConfig()


def configure(config: AuthConfig | None) -> None:
    """Set the process's gate (``app.server.serve`` does)."""
    global _config
    with _lock:
        _config = config or AuthConfig()


def current() -> AuthConfig:
    with _lock:
        return _config


def oidc_configured() -> bool:
    """True when Streamlit's ``[auth]`` secrets are present (OIDC login available)."""
    try:
        import streamlit as st

        return "auth" in st.secrets
    except Exception:  # no secrets file: Streamlit raises; OIDC is simply not configured
        return False


def gate() -> None:
    """Stop the script run with a login screen unless the viewer is authenticated (see module doc)."""
    import streamlit as st

    if oidc_configured():
        if not getattr(st.user, "is_logged_in", False):
            st.title("infercost")
            st.button("Log in", on_click=st.login, type="primary", icon=":material/login:")
            st.stop()
        with st.sidebar:
            st.button("Log out", on_click=st.logout, key="auth_logout")
        return
    config = current()
    if not config.enabled or st.session_state.get("_auth_ok"):
        return
    try:
        header = st.context.headers.get("Authorization", "")
    except Exception:  # outside a browser session there are no headers
        header = ""
    if header and config.check_header(header):
        st.session_state["_auth_ok"] = True
        return
    st.title("infercost")
    with st.form("auth_login"):
        user = st.text_input("User", key="auth_user") if config.basic else ""
        secret = st.text_input("Password" if config.basic else "Access token", type="password", key="auth_secret")
        submitted = st.form_submit_button("Log in", type="primary")
    if submitted:
        if config.check_form(user, secret):
            st.session_state["_auth_ok"] = True
            st.rerun()
        st.error("Wrong credentials.")
    st.stop()

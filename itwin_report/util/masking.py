"""The one place secrets are masked: every message, error, table and file passes through here.

Masked: the password (or whole user-info without a password) of any URI, the values of
secret-looking query parameters (``?token=...``), and the values of MLflow's and the cloud
stores' credential variables wherever they appear in a text.

Light module: standard library only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from urllib.parse import urlsplit

MASK = "***"

# environment variables whose values are credentials
SECRET_ENV_VARS: tuple[str, ...] = (
    "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_TRACKING_TOKEN",
    "MLFLOW_TRACKING_CLIENT_CERT_PATH",
    "DATABRICKS_TOKEN",
    "DATABRICKS_CLIENT_SECRET",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_STORAGE_ACCESS_KEY",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_CLIENT_SECRET",
    "PGPASSWORD",
)
_MIN_SECRET_LEN = 4  # shorter values would mask ordinary words

# query parameters whose name contains one of these words carry a secret
_SECRET_PARAM = re.compile(
    r"(token|passw|pwd|secret|key|auth|sig|credential|session|cookie|bearer)", re.IGNORECASE
)
# scheme://user[:password]@host in free text (user-info may hold anything but / and whitespace).
# Matches start only where a run of scheme characters starts (``lead``: its part before the
# first letter), so a long run is scanned once, not once per character: linear time.
_USERINFO = re.compile(
    r"(?<![A-Za-z0-9+.\-])(?P<lead>[0-9+.\-]*)"
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<info>[^/\s@'\"<>]+)@"
)
# name=value pairs in a query string or free text (starting where a run of name characters
# starts: the same matches, in linear time)
_QUERY_PAIR = re.compile(
    r"(?<![A-Za-z0-9_.\-])(?P<name>[A-Za-z0-9_.\-]+)=(?P<value>[^&\s'\"<>#;,)]+)"
)
# Authorization headers echoed in error texts
_BEARER = re.compile(r"\b(Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=\-]{6,}", re.IGNORECASE)


def _mask_userinfo(match: re.Match[str]) -> str:
    info = match.group("info")
    user, sep, _password = info.partition(":")
    masked = f"{user}:{MASK}" if sep else MASK
    return f"{match.group('lead')}{match.group('scheme')}{masked}@"


def _mask_pair(match: re.Match[str]) -> str:
    name = match.group("name")
    if _SECRET_PARAM.search(name):
        return f"{name}={MASK}"
    return match.group(0)


def mask_text(text: str, environ: Mapping[str, str] | None = None) -> str:
    """``text`` with URI passwords, secret query values and credential variables masked.

    ``environ`` defaults to ``os.environ``; the values of :data:`SECRET_ENV_VARS` found there
    are replaced wherever they occur in ``text``.
    """
    if not text:
        return text
    env = os.environ if environ is None else environ
    out = _USERINFO.sub(_mask_userinfo, text)
    out = _QUERY_PAIR.sub(_mask_pair, out)
    out = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", out)
    for name in SECRET_ENV_VARS:
        value = env.get(name, "")
        if len(value) >= _MIN_SECRET_LEN:
            out = out.replace(value, MASK)
    return out


def mask_uri(uri: str) -> str:
    """A tracking URI safe to show: user-info password and secret query values masked.

    ``https://user:pw@host/x?token=t&a=1`` -> ``https://user:***@host/x?token=***&a=1``;
    a user-info without a password (often a token) is masked whole. Only those parts change:
    the rest of the URI keeps its exact shape (``sqlite:////abs.db?password=***`` keeps its
    four slashes).
    """
    try:
        parts = urlsplit(uri)
    except ValueError:
        return mask_text(uri)
    out = uri
    if "@" in parts.netloc:
        userinfo, _, host = parts.netloc.rpartition("@")
        user, sep, _ = userinfo.partition(":")
        masked = f"{user}:{MASK}@{host}" if sep else f"{MASK}@{host}"
        start = out.find(parts.netloc, out.find("//"))
        out = out[:start] + masked + out[start + len(parts.netloc) :]
    if parts.query:
        head, sep, tail = out.partition("?")
        masked_query = _QUERY_PAIR.sub(_mask_pair, parts.query)
        out = head + sep + tail.replace(parts.query, masked_query, 1)
    return mask_text(out)

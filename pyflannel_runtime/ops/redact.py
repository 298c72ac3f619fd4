"""Secrets out of the texts a diagnostics bundle collects.

Two nets, one after the other. The secrets the node is known to hold (the etcd password, a
kubeconfig's token and keys, the lines of a private key file) are replaced wherever they
appear, whatever surrounds them. Then whatever looks like a credential is replaced too: a
private key's PEM block, the value of a setting whose name says password, user name, token or
secret (``FLANNELD_ETCD_PASSWORD=...``, ``--etcd-password x``, ``"token": "..."``,
``etcdPassword:...``), an ``Authorization`` header or a bearer token, and a URL's password. A
setting naming a file (``FLANNELD_ETCD_KEYFILE=/etc/...``, ``tokenFile: ...``) keeps its path.

Pure: `redact` returns the text with each secret replaced by `MARK`, and how many it replaced.
A known secret that the replacement itself would spell (a password that is a piece of `MARK`)
takes the lines that hold it out of the text, and if that is not enough, the whole text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

MARK = "<redacted>"

# A setting's name that says its value is a credential, in any case and spelling.
_WORDS = (
    r"(?:password|passwd|passphrase|user[-_]?name|secret|token|credentials?|api[-_]?key"
    r"|private[-_]?key|key[-_]?data|auth[-_]?key)"
)
_NAME_CHARS = r"[A-Za-z0-9_.-]"
# A name that ends so names a file or a place, not the credential itself.
_PLACE_SUFFIXES = ("file", "path", "dir", "directory")
_VALUE = r"""(?P<value>"(?:[^"\\\n]|\\.)*"|'[^'\n]*'|[^\s"',;}\])]+)"""
_SETTING = re.compile(
    rf"(?P<name>{_NAME_CHARS}*{_WORDS}{_NAME_CHARS}*)(?P<sep>[\"']?[ \t]*[=:][ \t]*){_VALUE}",
    re.IGNORECASE,
)
# A flag and its value as two words: --etcd-password secret.
_FLAG = re.compile(
    rf"(?<![\w-])(?P<name>--?{_NAME_CHARS}*{_WORDS}{_NAME_CHARS}*)(?P<sep>[ \t]+){_VALUE}",
    re.IGNORECASE,
)
_AUTHORIZATION = re.compile(
    r"(?P<name>(?:proxy-)?authorization)(?P<sep>[\"']?[ \t]*[=:][ \t]*[\"']?"
    r"(?:(?:bearer|basic|token|negotiate|digest)[ \t]+)?)(?P<value>[^\s\"',;}\]]+)",
    re.IGNORECASE,
)
_BEARER = re.compile(r"(?P<name>\bbearer)(?P<sep>[ \t]+)(?P<value>[A-Za-z0-9._~+/=-]+)", re.I)
_URL_PASSWORD = re.compile(
    r"(?P<name>\b[a-z][a-z0-9+.-]*://[^\s:/@]*)(?P<sep>:)(?P<value>[^\s@]+)(?=@)", re.I
)
_PEM_KEY = re.compile(
    r"-----BEGIN (?P<kind>[A-Z0-9 ]*)PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)",
    re.DOTALL,
)


@dataclass(frozen=True)
class Redacted:
    text: str
    count: int  # how many secrets were replaced (a dropped line or text counts once)


def secret_forms(secrets: Iterable[str]) -> list[str]:
    """The secrets worth looking for, longest first: each as it is and as JSON escapes it,
    leaving out blank ones (nothing to hide)."""
    forms: set[str] = set()
    for secret in secrets:
        if secret.strip():
            forms.add(secret)
            forms.add(json.dumps(secret)[1:-1])
    return sorted(forms, key=lambda form: (-len(form), form))


def _replace_known(text: str, forms: list[str]) -> tuple[str, int]:
    if not forms:
        return text, 0
    pattern = re.compile("|".join(re.escape(form) for form in forms))
    return pattern.subn(MARK, text)


def _is_place(name: str) -> bool:
    return name.lower().rstrip("\"'").endswith(_PLACE_SUFFIXES)


def _replace_value(match: re.Match[str]) -> str:
    value = match.group("value")
    if _is_place(match.group("name")) or value.strip("\"'") in (MARK, ""):
        return match.group(0)
    quote = value[0] if value[0] in "\"'" else ""
    return f"{match.group('name')}{match.group('sep')}{quote}{MARK}{quote}"


def _replace_patterns(text: str) -> tuple[str, int]:
    replaced = 0

    def value(match: re.Match[str]) -> str:
        nonlocal replaced
        new = _replace_value(match)
        replaced += new != match.group(0)
        return new

    text, keys = _PEM_KEY.subn(lambda m: f"-----BEGIN {m.group('kind')}PRIVATE KEY {MARK}", text)
    for pattern in (_AUTHORIZATION, _BEARER, _URL_PASSWORD, _SETTING, _FLAG):
        text = pattern.sub(value, text)
    return text, keys + replaced


def _holds(text: str, forms: list[str]) -> bool:
    return any(form in text for form in forms)


def redact(text: str, secrets: Iterable[str] = ()) -> Redacted:
    """`text` with every known secret and everything that looks like a credential replaced."""
    forms = secret_forms(secrets)
    text, known = _replace_known(text, forms)
    text, seen = _replace_patterns(text)
    count = known + seen
    if _holds(text, forms):
        lines = text.split("\n")
        kept = ["" if _holds(line, forms) else line for line in lines]
        count += sum(1 for line in lines if _holds(line, forms))
        text = "\n".join(kept)
        if _holds(text, forms):  # a secret across lines, spelt by what is left
            text = ""
    return Redacted(text, count)

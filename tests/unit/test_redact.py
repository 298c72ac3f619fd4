"""The diagnostics bundle's redactor (pyflannel_runtime/ops/redact.py): no known secret survives
in any text, whatever surrounds it; every credential-looking setting loses its value, in the
spellings a node's files and logs use; and a text with neither is left exactly as it was."""

from __future__ import annotations

import json

from hypothesis import assume, given
from hypothesis import strategies as st

from pyflannel_runtime.ops.redact import MARK, redact, secret_forms

# Values of credentials: what tokens, passwords and base64 keys are made of.
VALUES = st.text(
    alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/=_~.-", min_size=1, max_size=40
).filter(lambda v: v.strip(".-") != "")
# Text around them (no upper case, no digits: it seldom spells one).
AROUND = st.text(alphabet="abcdefghijklmnopqrstuvwxyz \t\n,;:={}[]()#/'\"", max_size=60)
# Text that no pattern takes: no a, e or o (every credential word holds one), no '@'.
PLAIN = st.text(
    alphabet=st.characters(blacklist_characters="aeoAEO@", blacklist_categories=("Cs",)),
    max_size=300,
)

# Each form a credential's setting takes in what a bundle collects, the value at {}.
FORMS = [
    "FLANNELD_ETCD_PASSWORD={}",
    'FLANNELD_ETCD_PASSWORD="{}"',
    "FLANNELD_ETCD_USERNAME={}",
    "Environment=FLANNELD_ETCD_PASSWORD={}",
    "--etcd-password={}",
    "-etcd-password {}",
    "--etcd-password {}",
    "CLI flags config: {{etcdEndpoints:http://x:2379 etcdPassword:{} help:false}}",
    '{{"password": "{}"}}',
    "    token: {}",
    "    client-key-data: {}",
    "  id-token: '{}'",
    "Authorization: Bearer {}",
    "authorization: basic {}",
    "header bearer {}",
    "https://flannel:{}@etcd.example:2379",
    "secret={}",
]


@given(st.text(max_size=200), st.lists(st.text(min_size=1, max_size=20), max_size=4))
def test_no_known_secret_survives_anywhere(text: str, secrets: list[str]) -> None:
    planted = text + "".join(f" {s} {text[: len(s)]}" for s in secrets)
    out = redact(planted, secrets).text
    assert not [s for s in secrets if s.strip() and s in out]


@given(AROUND, st.sampled_from(FORMS), VALUES, AROUND)
def test_a_credential_setting_loses_its_value(
    before: str, form: str, value: str, after: str
) -> None:
    # Else it is there anyway, around the setting.
    assume(value not in before + form.format("") + after and value not in MARK)
    text = before + "\n" + form.format(value) + "\n" + after
    redacted = redact(text)
    assert value not in redacted.text
    assert MARK in redacted.text and redacted.count >= 1


@given(PLAIN)
def test_a_text_without_credentials_is_unchanged(text: str) -> None:
    assert redact(text) == redact(text, ["   ", ""])
    assert redact(text).text == text and redact(text).count == 0


@given(st.text(max_size=100), st.lists(VALUES, max_size=3))
def test_redacting_again_changes_nothing(text: str, secrets: list[str]) -> None:
    once = redact(text + " ".join(secrets), secrets).text
    assert redact(once, secrets).text == once


def test_file_settings_keep_their_paths_and_keys_their_blocks_go() -> None:
    key = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5oyIe\n-----END EC PRIVATE KEY-----"
    text = (
        "FLANNELD_ETCD_KEYFILE=/etc/pyflannel/pki/etcd-client.key\n"
        "    tokenFile: /var/run/secrets/token\n"
        "    client-key: /etc/kubernetes/flannel.key\n"
        f"{key}\nafter the key\n"
        "FLANNELD_ETCD_ENDPOINTS=https://192.0.2.10:2379\n"
    )
    out = redact(text).text
    assert out == (
        "FLANNELD_ETCD_KEYFILE=/etc/pyflannel/pki/etcd-client.key\n"
        "    tokenFile: /var/run/secrets/token\n"
        "    client-key: /etc/kubernetes/flannel.key\n"
        f"-----BEGIN EC PRIVATE KEY {MARK}\nafter the key\n"
        "FLANNELD_ETCD_ENDPOINTS=https://192.0.2.10:2379\n"
    )


def test_a_secret_the_mark_would_spell_takes_its_lines_out() -> None:
    out = redact("a line with dact in it\nanother line\n", ["dact"]).text
    assert "dact" not in out and out == "\nanother line\n"


def test_json_escaped_forms_of_a_secret_are_looked_for_too() -> None:
    assert secret_forms(['pa"ss\\', " "]) == ['pa\\"ss\\\\', 'pa"ss\\']
    secret = 'quo"ted\\'
    document = json.dumps({"note": f"logged {secret} here"})
    out = redact(document, [secret]).text
    assert json.loads(out) == {"note": f"logged {MARK} here"}

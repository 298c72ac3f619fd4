"""The lease stores' server URLs (etcd endpoints, the Kubernetes API URL), checked up front.

flanneld hands these strings to its clients unchecked, so a typo shows up as connection
retries; pyflannel rejects a URL that names no server before it connects. Only ``urllib``:
`pyflannel` builds its command line from this on every start.
"""

from __future__ import annotations

import urllib.parse


def split_http_url(url: str, default_port: int) -> tuple[str, int]:
    """Host (IPv6 without brackets) and port of an ``http://`` or ``https://`` URL.

    Raises ValueError saying what is wrong: no such scheme, no host, or a bad port.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{url!r} is not an http:// or https:// URL")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{url!r} has an invalid port (1 to 65535)") from None
    if port == 0:
        raise ValueError(f"{url!r} has an invalid port (1 to 65535)")
    if not parts.hostname:
        raise ValueError(f"{url!r} names no host")
    return parts.hostname, port or default_port

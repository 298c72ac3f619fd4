"""The lab's hint when a host stops at once: too few inotify instances left for its systemd."""

from __future__ import annotations

from pyflannel_lab.podman import inotify_hint


def test_no_hint_while_a_host_still_has_room() -> None:
    assert inotify_hint(used=100, limit=128) == ""
    assert inotify_hint(used=122, limit=128) == ""


def test_the_hint_names_the_limit_and_what_to_do_when_it_is_nearly_reached() -> None:
    hint = inotify_hint(used=125, limit=128)
    assert "125 of the 128" in hint
    assert "fs.inotify.max_user_instances" in hint
    assert "take other labs down" in hint

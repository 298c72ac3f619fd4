"""The lab notices systemd remounting the host's cgroup2 with nsdelegate, to undo it."""

from __future__ import annotations

from pyflannel_lab.rootns import nsdelegate_mounts

MOUNTINFO = """\
25 1 252:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
35 30 0:30 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate
36 30 0:31 / /sys/fs/cgroup/cpu rw,relatime shared:10 - cgroup cgroup rw,cpu
37 30 0:32 / /sys/fs/cgroup/other rw,relatime - cgroup2 cgroup2 rw
"""


def test_nsdelegate_is_read_from_the_super_options() -> None:
    assert nsdelegate_mounts(MOUNTINFO) == ["/sys/fs/cgroup/unified"]

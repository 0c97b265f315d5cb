"""A power-cut harness: a FUSE filesystem that keeps what is written in memory until it is fsynced, and on
command drops everything not yet synced, as a power cut does (issue 29).

- model.py: the durability model (what fsync, fdatasync and a directory's fsync make durable; what a cut drops)
- fusefs.py: the filesystem process (mfusepy over libfuse 3), controlled through a pipe
- control.py: PowerCutFS, the test side (mount, cut, sync, stats, unmount)
- fixtures.py: the `powercut_fs` / `powercut_fs_posix` pytest fixtures, and the skip when FUSE is not here
"""

from tests.powercut.control import PowerCutError, PowerCutFS

__all__ = ["PowerCutError", "PowerCutFS"]

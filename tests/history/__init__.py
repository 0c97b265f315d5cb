"""A history checker for the cluster, in the spirit of Jepsen (issue 29, item 5).

- checker.py: the history of write attempts (who, what, when invoked, when completed, outcome ok / fail /
  unknown), what the log and each replica hold afterwards, and `check`, which says what went wrong.
- run.py: a run: writers through two gateways of a three-node cluster while a nemesis injects faults for a
  bounded time (SIGKILL of a node, SIGSTOP/SIGCONT of the stream leader, a power cut of one node), then the
  check. `python -m tests.history.run --help`.
"""

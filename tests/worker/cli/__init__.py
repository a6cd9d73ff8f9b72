"""Tests of the ``keel`` command (``keel.worker.cli``), driven as a user drives it."""

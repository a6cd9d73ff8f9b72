"""``python3 -m worker.cli``: the ``keel`` command."""

from worker.cli.main import main

main()

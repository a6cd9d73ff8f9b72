"""``python3 -m keel.worker.cli``: the ``keel`` command."""

from keel.worker.cli.main import main

main()

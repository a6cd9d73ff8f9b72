"""``python -m tests.benchmarks``: Keel against the floor, in one run (see ``runner``)."""

from tests.benchmarks.runner import main

main()

"""``python -m coordinator.cli``: the ``runwick`` command."""

from coordinator.cli import main

raise SystemExit(main())

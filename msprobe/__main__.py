"""``python -m msprobe`` is the ``msprobe`` command."""

from msprobe.cli import main

raise SystemExit(main())

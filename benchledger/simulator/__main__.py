"""``python -m benchledger.simulator``: see benchledger.simulator.server."""

from benchledger.simulator.server import main

raise SystemExit(main())

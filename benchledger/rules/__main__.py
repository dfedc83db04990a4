"""`python -m benchledger.rules [--markdown]`: the catalogue, or the rule table of the docs."""

from benchledger.rules import main

raise SystemExit(main())

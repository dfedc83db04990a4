"""Publishing: validated-only exports, the HTML report, terminal tables and `explain`.

Reads the warehouse (read-only connections); never writes to it."""

"""Reading: a trace file -> compact columns, and the name tables that classify events."""

"""One module per command: argparse in, calls below, exit codes out."""

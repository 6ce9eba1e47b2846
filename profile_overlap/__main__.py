"""`python -m profile_overlap [COMMAND] ...`: see profile_overlap/cli/main.py."""

import sys

from profile_overlap.cli.main import main

if __name__ == "__main__":
    sys.exit(main())

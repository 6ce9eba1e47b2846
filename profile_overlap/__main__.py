"""`python -m profile_overlap [COMMAND] ...`: see profile_overlap/cli/main.py."""

from profile_overlap.cli.main import exit_with

if __name__ == "__main__":
    exit_with()

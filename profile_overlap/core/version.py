"""Installed versions, read from the distributions' metadata without importing them (torch takes seconds)."""

from __future__ import annotations


def distribution_version(name: str, *, missing: str = "not installed") -> str:
    from importlib import metadata  # 14 ms to import: not paid by every command at start-up, only by --version and records

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return missing


def package_version() -> str:
    """profile_overlap's own: pyproject.toml's `version`, the one place it is written; a source tree
    on sys.path that was never installed says 0+unknown."""
    return distribution_version("profile-overlap", missing="0+unknown")

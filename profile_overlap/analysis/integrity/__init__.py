"""Integrity checks: the evidence every analysis carries about its own numbers."""

"""Trace files -> events -> intervals -> per rank -> across ranks. No torch import."""

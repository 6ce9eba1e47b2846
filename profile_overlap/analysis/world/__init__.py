"""Across ranks: clocks, the wait/transfer split, causes, stragglers, the critical path, heatmap, spread."""

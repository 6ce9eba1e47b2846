"""One file's events: classified intervals, calls, steps, phases, facts and the replay input."""

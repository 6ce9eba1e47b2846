"""The bottom layer: errors, atomic file writes, and the file names of a run folder. Imports
nothing from the rest of the package."""

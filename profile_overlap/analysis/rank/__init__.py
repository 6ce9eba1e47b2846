"""One rank: its events -> its metrics, times, interference, dimensions and spans."""

"""Commands that compose run, analysis and render: sweep, bench-collectives, explain."""

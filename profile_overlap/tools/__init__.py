"""Commands that compose run, analysis and render, one package each: advise/, whatif/, perfetto/,
sweep/, bench/ (bench-collectives), and explain.py."""

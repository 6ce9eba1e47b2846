"""The Overlap tab for TensorBoard: a dynamic plugin (`plugin.py`, registered through the
`tensorboard_plugins` entry point) that serves run folders' metrics.json and timeline.json to one
small ES module (`static/`), and `export.py`, which writes those two files for foreign traces.

Importing this package imports neither torch nor tensorboard; only `plugin` needs tensorboard.
"""

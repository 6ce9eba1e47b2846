"""Renderers of the record: console, report (document -> HTML, Markdown, JSON), timeline figure, TensorBoard."""

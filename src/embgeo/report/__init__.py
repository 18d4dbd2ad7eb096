"""Self-contained HTML reports of experiment runs."""

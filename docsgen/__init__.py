"""Reference pages generated when the documentation is built (see `hooks.py`)."""

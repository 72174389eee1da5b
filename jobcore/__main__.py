"""`python -m jobcore` runs the command line."""

from jobcore.cli import main

main()

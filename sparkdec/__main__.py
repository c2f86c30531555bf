"""`python -m sparkdec` runs the CLI."""
from sparkdec.cli import main

main()

"""`python -m rlcleanup` is the `rlcleanup` command."""

from rlcleanup.cli.main import main

main()

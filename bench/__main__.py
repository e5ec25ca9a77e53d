"""`python -m bench [--full]` (what `make bench` runs): every bench, see bench/run_all.py."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run_all import main

sys.exit(main())

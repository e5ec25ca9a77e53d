"""The functions source of a stack started with `rlcleanup stack up --stages MODULE:ATTR` (stack/served_table.py):
every function of that stage table's topology, by entry point, dispatched through that table. The supervisor starts
each function process with RLCLEANUP_STACK_STAGES set; without it nothing is served (the stack was not asked to)."""

from __future__ import annotations

import os

from rlcleanup.entrypoints import register_entry_points
from rlcleanup.runtime.functions import serve_table
from rlcleanup.stack.served_table import STAGES_VAR, load_stage_table

TABLE = load_stage_table(os.environ[STAGES_VAR])  # a KeyError at cold start: this source needs `--stages`
serve_table(TABLE)
ENTRY_POINTS = register_entry_points([fn.entry_point for fn in TABLE.topology.functions])
globals().update(ENTRY_POINTS)

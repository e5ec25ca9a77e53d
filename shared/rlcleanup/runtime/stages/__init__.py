"""One module per pipeline stage (its handlers: decode -> claim -> step -> persist -> publish), the one generic
barrier they share (`barrier.py`), the paged plans (`paged_plan.py`). Which handler serves which function, and
what a failed member stores, is the stage table (`runtime/stage_table.py`), checked against topology.yaml."""

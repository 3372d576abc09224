"""`model-explorer debug`: an individual's error layer by layer and its cheapest repair.

`debug_individual(context, result, individual)` gives a DebugReport (render.py writes it);
`repair_individual(...)` the repaired individual's record (repair.py finds it)."""

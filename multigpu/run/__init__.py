"""Running the graph safely: the loop, its hooks, signals, the report."""

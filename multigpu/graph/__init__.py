"""Building the graph: devices, variables, towers, all-reduce, summaries."""

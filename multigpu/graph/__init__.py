"""Building the graph: devices, variables, towers, precision, summaries."""

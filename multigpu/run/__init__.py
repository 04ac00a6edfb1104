"""Running the graph safely: the loop, checkpoints, signals, train_dirs."""

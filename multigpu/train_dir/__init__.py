"""The train_dir: its lock, checkpoints, restore, data record, event files."""

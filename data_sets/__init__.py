"""The data sets on disk: formats, sample sets, download, batched input."""

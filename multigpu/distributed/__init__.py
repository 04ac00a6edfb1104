"""Beyond one machine: cluster tasks and servers, TF_CONFIG, the servers."""

"""The CIFAR-10 models beyond the tutorial's net, and --model's choices."""

"""The CIFAR-10 models beyond the tutorial's net, and --model's choices.

- `resnet`: the CIFAR-10 ResNets of He et al. 2016 (resnet20, resnet56),
  written with `tf.compat.v1.layers` as a user would write them.
- `registry`: what --model names (tutorial, resnet20, resnet56, or a
  user's MODULE:FUNCTION) and the recipe each trains with.
"""

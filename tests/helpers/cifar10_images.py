"""NumPy views of CIFAR-10 images: standardised, cropped and flipped."""

import numpy as np

import cifar10_input

CROP = cifar10_input.IMAGE_SIZE


# Crop offsets per axis (0..8) times the two flips: every distorted view.
OFFSETS = range(32 - CROP + 1)


def standardize(image):
    """NumPy `tf.image.per_image_standardization` of one image."""
    image = image.astype(np.float64)
    floor = 1.0 / np.sqrt(image.size)
    return (image - image.mean()) / max(image.std(), floor)


def crop_views(image):
    """Every standardised crop of image: {(row, column, flipped): view}."""
    views = {}
    for row in OFFSETS:
        for column in OFFSETS:
            crop = image[row : row + CROP, column : column + CROP]
            views[row, column, False] = standardize(crop)
            views[row, column, True] = standardize(crop[:, ::-1])
    return views

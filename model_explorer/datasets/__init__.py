"""Datasets: the registry and every dataset's settings (spec.py, no torch), the built-in builders
(digits, bundled with scikit-learn; photos; sentences; cifar10; imagefolder; imagenet, image
folders or WebDataset shards; imagenet_c; arrays from local files; imported.py: a
`package.module:builder` of the user's code, each imported when it first builds), seeded
subsets and loaders (base.py), and a TensorCache that decodes an evaluation subset once
(cache.py). Its public names load their modules on first use (SPEC 1)."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "spec": ["DATASETS", "DatasetSpec", "register_dataset"],
        "base": ["SampleStream", "build_dataset", "build_loader", "select_indices"],
        "cache": ["TensorCache"],
    },
)
